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

TEST(AccessFileTest, PatternsAreFilterNameCharactersAndWildcards) {
  EXPECT_TRUE(IsAccessPattern("*"));
  EXPECT_TRUE(IsAccessPattern("billing.*"));
  EXPECT_TRUE(IsAccessPattern("log-202?_x"));
  EXPECT_TRUE(IsAccessPattern(std::string(kMaxAccessPatternBytes, 'p')));
  EXPECT_FALSE(IsAccessPattern(std::string(kMaxAccessPatternBytes + 1, 'p')));
  EXPECT_FALSE(IsAccessPattern(""));
  EXPECT_FALSE(IsAccessPattern("a:b"));
  EXPECT_FALSE(IsAccessPattern("[ab]"));
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
