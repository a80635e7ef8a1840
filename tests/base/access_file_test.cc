// The access file's words (base/access_file.h), as the server's parser and
// cuckooctl hash-token both check them.
#include "base/access_file.h"

#include <gtest/gtest.h>

#include <string>

namespace cuckoo {
namespace {

TEST(AccessFileTest, NamesAreOneTo64OfLettersDigitsDotUnderscoreDash) {
  EXPECT_TRUE(IsAccessName("billing-reader"));
  EXPECT_TRUE(IsAccessName("a.B_9-"));
  EXPECT_TRUE(IsAccessName(std::string(kMaxAccessNameBytes, 'n')));
  EXPECT_FALSE(IsAccessName(std::string(kMaxAccessNameBytes + 1, 'n')));
  EXPECT_FALSE(IsAccessName(""));
  EXPECT_FALSE(IsAccessName("has space"));
  EXPECT_FALSE(IsAccessName("star*"));
  EXPECT_FALSE(IsAccessName("caf\xc3\xa9"));
}

TEST(AccessFileTest, PatternsAreUtf8GlobsOverRedisStyleKeys) {
  EXPECT_TRUE(IsAccessPattern("*"));
  EXPECT_TRUE(IsAccessPattern("billing.*"));
  EXPECT_TRUE(IsAccessPattern("log-202?_x"));
  EXPECT_TRUE(IsAccessPattern("a:b"));
  EXPECT_TRUE(IsAccessPattern("users:*"));
  EXPECT_TRUE(IsAccessPattern("a/b"));
  EXPECT_TRUE(IsAccessPattern("my filter"));
  EXPECT_TRUE(IsAccessPattern("caf\xc3\xa9"));
  EXPECT_TRUE(IsAccessPattern("star\\*"));
  EXPECT_TRUE(IsAccessPattern("\\[ab]"));
  EXPECT_TRUE(IsAccessPattern(std::string(kMaxAccessPatternBytes, 'p')));
  EXPECT_EQ(AccessPatternError(std::string(kMaxAccessPatternBytes + 1, 'p')),
            "the pattern is 1025 bytes; at most 1024 are allowed");
  EXPECT_EQ(AccessPatternError(""), "the pattern is empty");
  EXPECT_EQ(AccessPatternError("[ab]").substr(0, 37), "the pattern has '[' at offset 0: char");
  EXPECT_EQ(AccessPatternError("ab\\"),
            "the pattern ends in a lone backslash (write \\\\ for a backslash)");
  EXPECT_EQ(AccessPatternError("a\xff"
                               "b"),
            "the pattern is not valid UTF-8 (byte 0xff at offset 1)");
  EXPECT_EQ(AccessPatternError("a\tb"), "the pattern has control character 0x09 at offset 1");
}

TEST(AccessFileTest, GrantKindsAreReadWriteAdmin) {
  EXPECT_TRUE(IsAccessGrantKind("read"));
  EXPECT_TRUE(IsAccessGrantKind("write"));
  EXPECT_TRUE(IsAccessGrantKind("admin"));
  EXPECT_FALSE(IsAccessGrantKind("Read"));
  EXPECT_FALSE(IsAccessGrantKind("own"));
  EXPECT_FALSE(IsAccessGrantKind(""));
}

}  // namespace
}  // namespace cuckoo
