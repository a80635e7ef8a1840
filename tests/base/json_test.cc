// The one JSON string escaper (base/json.h).
#include "base/json.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace cuckoo {
namespace {

TEST(JsonTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString(""), R"("")");
  EXPECT_EQ(JsonString("plain text"), R"("plain text")");
  EXPECT_EQ(JsonString(R"(a "quoted" \ back)"), R"("a \"quoted\" \\ back")");
  EXPECT_EQ(JsonString("line\nfeed\rtab\t"), R"("line\nfeed\rtab\t")");
  EXPECT_EQ(JsonString(std::string_view("\0\x01\x1f\x7f", 4)), R"("\u0000\u0001\u001f\u007f")");
  // UTF-8 and other bytes from 0x20 up (but DEL) as they are.
  EXPECT_EQ(JsonString("caf\xc3\xa9 ~"), "\"caf\xc3\xa9 ~\"");
}

TEST(JsonTest, AppendsTheInsideToAnyBuffer) {
  std::string out = "{\"k\":\"";
  AppendJsonEscaped("a\"b", out);
  out += "\"}";
  EXPECT_EQ(out, R"({"k":"a\"b"})");

  // A buffer with append(begin, end), as spdlog's memory_buf_t.
  struct Buffer {
    void append(const char* begin, const char* end) { bytes.insert(bytes.end(), begin, end); }
    std::vector<char> bytes;
  } buffer;
  AppendJsonEscaped("x\ty", buffer);
  EXPECT_EQ(std::string(buffer.bytes.begin(), buffer.bytes.end()), R"(x\ty)");
}

}  // namespace
}  // namespace cuckoo
