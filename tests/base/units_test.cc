// Byte sizes and counts as people write them and read them (base/units.h).
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

TEST(UnitsTest, CountsTakeDecimalSuffixesInEitherCase) {
  EXPECT_EQ(*ParseCount("0"), 0u);
  EXPECT_EQ(*ParseCount("1000"), 1000u);
  EXPECT_EQ(*ParseCount("10k"), 10'000u);
  EXPECT_EQ(*ParseCount("10K"), 10'000u);
  // The two tools once disagreed on "1m": it is a million in both.
  EXPECT_EQ(*ParseCount("1m"), 1'000'000u);
  EXPECT_EQ(*ParseCount("1M"), 1'000'000u);
  EXPECT_EQ(*ParseCount("2g"), 2'000'000'000u);
  EXPECT_EQ(*ParseCount("2G"), 2'000'000'000u);
  EXPECT_EQ(*ParseCount("3t"), 3'000'000'000'000u);
  EXPECT_EQ(*ParseCount("3T"), 3'000'000'000'000u);
  EXPECT_EQ(*ParseCount("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(*ParseCount("18446744073709551k"), 18'446'744'073'709'551'000u);
}

TEST(UnitsTest, BadCountsAreRejectedWithTheReason) {
  for (const char* bad : {"", "k", "M", "-1", "+1", " 1", "1 ", "1.5M", "1 M", "1MB", "1Mi", "1KiB",
                          "0x10", "lots", "1kk"}) {
    const absl::StatusOr<uint64_t> count = ParseCount(bad);
    EXPECT_FALSE(count.ok()) << bad;
    EXPECT_THAT(std::string(count.status().message()), HasSubstr("is not a count")) << bad;
  }
  EXPECT_THAT(std::string(ParseCount("18446744073709551616").status().message()),
              HasSubstr("too large"));
  EXPECT_THAT(std::string(ParseCount("18446744073709552k").status().message()),
              HasSubstr("too large"));
  EXPECT_THAT(std::string(ParseCount("20000000T").status().message()), HasSubstr("too large"));
}

}  // namespace
}  // namespace cuckoo
