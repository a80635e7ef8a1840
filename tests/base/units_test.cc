// Byte sizes as people write them and read them (base/units.h).
#include "base/units.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace cuckoo {
namespace {

using ::testing::HasSubstr;

TEST(UnitsTest, ByteSizesParseWithAndWithoutUnits) {
  EXPECT_EQ(*ParseByteSize("123"), 123u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 64u << 10);
  EXPECT_EQ(*ParseByteSize("8 GiB"), uint64_t{8} << 30);
  EXPECT_EQ(*ParseByteSize("1.5gib"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseByteSize("10GB"), 10'000'000'000u);
  EXPECT_EQ(*ParseByteSize("512M"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("0"), 0u);
}

TEST(UnitsTest, BadByteSizesAreRejectedWithTheReason) {
  EXPECT_THAT(std::string(ParseByteSize("").status().message()), HasSubstr("is not a size"));
  EXPECT_THAT(std::string(ParseByteSize("GiB").status().message()), HasSubstr("is not a size"));
  EXPECT_THAT(std::string(ParseByteSize("12XB").status().message()),
              HasSubstr("unknown unit \"xb\""));
  EXPECT_THAT(std::string(ParseByteSize("99999999TiB").status().message()), HasSubstr("too large"));
}

TEST(UnitsTest, ByteSizesFormatForPeopleAndExactly) {
  EXPECT_EQ(FormatByteSize(64u << 20), "64MiB");
  EXPECT_EQ(FormatByteSize((uint64_t{17} << 30) + (uint64_t{7} << 29)), "20.5GiB");
  EXPECT_EQ(FormatByteSize(100), "100B");
  EXPECT_EQ(FormatByteSizeExactly(1536u << 10), "1536KiB");
  EXPECT_EQ(FormatByteSizeExactly(1'000'001), "1000001B");
  EXPECT_EQ(FormatByteSizeExactly(0), "0");
  EXPECT_EQ(*ParseByteSize(FormatByteSizeExactly(123'456'789)), 123'456'789u);
}

}  // namespace
}  // namespace cuckoo
