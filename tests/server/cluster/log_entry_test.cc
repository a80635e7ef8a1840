#include "server/cluster/log_entry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/little_endian.h"
#include "core/registry.h"
#include "xxhash.h"

namespace cuckoo::server {
namespace {

using ::testing::HasSubstr;

FilterShape Shape() {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 100'000, .seed = 77});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(LogEntryTest, EveryTypeRoundTrips) {
  const std::vector<uint64_t> hashes = {1, 2, 0xffffffffffffffff, 42};
  // The decoded hashes point into the bytes: keep them alive.
  const std::string encoded = EncodeInsertEntry(9, "users", true, hashes);
  absl::StatusOr<LogEntry> ins = DecodeLogEntry(encoded);
  ASSERT_TRUE(ins.ok()) << ins.status();
  EXPECT_EQ(ins->type, LogEntryType::kInsert);
  EXPECT_EQ(ins->filter_id, 9u);
  EXPECT_EQ(ins->name, "users");
  EXPECT_TRUE(ins->if_absent);
  EXPECT_EQ(std::vector<uint64_t>(ins->hashes.begin(), ins->hashes.end()), hashes);

  const std::string encoded_delete = EncodeDeleteEntry(3, "a.b-c_d", {});
  absl::StatusOr<LogEntry> del = DecodeLogEntry(encoded_delete);
  ASSERT_TRUE(del.ok()) << del.status();
  EXPECT_EQ(del->type, LogEntryType::kDelete);
  EXPECT_TRUE(del->hashes.empty());
  EXPECT_FALSE(del->if_absent);

  absl::StatusOr<LogEntry> create = DecodeLogEntry(EncodeCreateEntry("x", Shape()));
  ASSERT_TRUE(create.ok()) << create.status();
  EXPECT_EQ(create->type, LogEntryType::kCreateFilter);
  EXPECT_EQ(create->shape, Shape());
  EXPECT_EQ(create->name, "x");

  absl::StatusOr<LogEntry> drop = DecodeLogEntry(EncodeDropEntry(5, std::string(128, 'n')));
  ASSERT_TRUE(drop.ok()) << drop.status();
  EXPECT_EQ(drop->type, LogEntryType::kDropFilter);
  EXPECT_EQ(drop->filter_id, 5u);
  EXPECT_EQ(drop->name, std::string(128, 'n'));
}

TEST(LogEntryTest, HashesAreReadFromUnalignedBytesToo) {
  const std::string e = EncodeInsertEntry(1, "f", false, {10, 20, 30});
  std::string shifted = "x" + e;
  absl::StatusOr<LogEntry> d = DecodeLogEntry(absl::string_view(shifted).substr(1));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(std::vector<uint64_t>(d->hashes.begin(), d->hashes.end()),
            (std::vector<uint64_t>{10, 20, 30}));
}

TEST(LogEntryTest, ABatchOfLongKeysCostsEightBytesAKey) {
  std::vector<uint64_t> hashes(100'000, 7);
  // 100,000 keys of 4 KiB would be 400 MB; their entry is 800 KB.
  EXPECT_EQ(EncodeInsertEntry(1, "f", false, hashes).size(), 24 + 8 + 800'000 + 8u);
  EXPECT_LE(LogEntryBytesForHashes(100'000), size_t{1} << 20);
  EXPECT_EQ(MaxHashesPerLogEntry(LogEntryBytesForHashes(1000)), 1000u);
}

TEST(LogEntryTest, AnEntryOfTheLongestNameFitsTheBoundItsHashesWereCountedBy) {
  // The publisher splits a batch by MaxHashesPerLogEntry: whatever the name,
  // no entry it makes may pass the bytes it was given.
  const std::string longest(kMaxFilterNameBytes, 'n');
  for (const size_t max_bytes : {size_t{4096}, size_t{1} << 20}) {
    const std::vector<uint64_t> hashes(MaxHashesPerLogEntry(max_bytes), 7);
    EXPECT_LE(EncodeInsertEntry(1, longest, false, hashes).size(), max_bytes);
    EXPECT_LE(EncodeDeleteEntry(1, longest, hashes).size(), max_bytes);
  }
}

TEST(LogEntryTest, EveryFlippedBitOrCutIsRefusedAsDataLoss) {
  const std::string e = EncodeInsertEntry(4, "users", false, {1, 2, 3});
  for (size_t i = 0; i < e.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = e;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      absl::StatusOr<LogEntry> d = DecodeLogEntry(bad);
      ASSERT_FALSE(d.ok()) << "byte " << i << " bit " << bit;
      EXPECT_TRUE(absl::IsDataLoss(d.status()) || absl::IsFailedPrecondition(d.status()))
          << d.status();
    }
  }
  for (size_t n = 0; n < e.size(); ++n) {
    EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(e.substr(0, n)).status())) << n;
  }
  EXPECT_THAT(std::string(DecodeLogEntry(std::string(64, 'z')).status().message()),
              HasSubstr("not written by cuckood"));
}

// Rewrites the checksum after an edit.
std::string Reseal(std::string e) {
  const uint64_t sum = XXH3_64bits(e.data(), e.size() - 8);
  std::memcpy(e.data() + e.size() - 8, &sum, 8);
  return e;
}

// An intact entry this build cannot apply (a newer version or type) stops
// the replica instead of being skipped: FAILED_PRECONDITION, not DATA_LOSS;
// an intact entry that breaks the format's rules is DATA_LOSS.
// Filter names are Redis keys of up to 512 bytes: every entry carries them
// (u32 length, no format change); 513 bytes is no entry any build writes.
TEST(LogEntryTest, NamesOfUpTo512BytesOfAnyKeyShapeRoundTrip) {
  const std::string longest(512, 'k');
  for (const std::string& name :
       {longest, std::string("users:seen"), std::string("a/b c"), std::string("caf\xC3\xA9")}) {
    absl::StatusOr<LogEntry> create = DecodeLogEntry(EncodeCreateEntry(name, Shape()));
    ASSERT_TRUE(create.ok()) << create.status();
    EXPECT_EQ(create->name, name);
    const std::string encoded = EncodeInsertEntry(7, name, false, {1, 2});
    absl::StatusOr<LogEntry> ins = DecodeLogEntry(encoded);
    ASSERT_TRUE(ins.ok()) << ins.status();
    EXPECT_EQ(ins->name, name);
    absl::StatusOr<LogEntry> drop = DecodeLogEntry(EncodeDropEntry(7, name));
    ASSERT_TRUE(drop.ok()) << drop.status();
    EXPECT_EQ(drop->name, name);
  }
  absl::StatusOr<LogEntry> too_long = DecodeLogEntry(EncodeDropEntry(7, longest + "k"));
  EXPECT_TRUE(absl::IsDataLoss(too_long.status())) << too_long.status();
  EXPECT_THAT(std::string(too_long.status().message()), HasSubstr("a 513-byte name"));
}

TEST(LogEntryTest, NewerVersionIsFailedPreconditionAndBrokenRulesAreDataLoss) {
  std::string newer = EncodeDropEntry(5, "x");
  newer[4] = 2;
  absl::StatusOr<LogEntry> d = DecodeLogEntry(Reseal(newer));
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("upgrade this replica"));
  std::string type = EncodeDropEntry(5, "x");
  type[5] = 9;
  EXPECT_TRUE(absl::IsFailedPrecondition(DecodeLogEntry(Reseal(type)).status()));
  std::string no_id = EncodeInsertEntry(1, "x", false, {1});
  std::memset(no_id.data() + 8, 0, 8);
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(no_id)).status()));
  std::string count = EncodeInsertEntry(1, "x", false, {1, 2});
  count[16] = 3;  // Three hashes claimed, two there.
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(count)).status()));
  std::string name = EncodeDropEntry(1, "x");
  name[20] = 0;  // An empty name.
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(name)).status()));
  std::string shape = EncodeCreateEntry("x", Shape());
  shape[24 + 8 + 4] = 0;  // fingerprint_bits 0.
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(shape)).status()));
}

// Filter expiry (type 6): the filter's id and name, its expire_at (Unix
// ms, 0 clears).
TEST(LogEntryTest, ExpiryEntriesRoundTripAndBrokenOnesAreDataLoss) {
  for (int64_t at : {int64_t{0}, int64_t{1796083200123}, kLogEntryMaxExpireAt}) {
    absl::StatusOr<LogEntry> e = DecodeLogEntry(EncodeSetExpiryEntry(12, "seen:2026-11-29", at));
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->type, LogEntryType::kSetExpiry);
    EXPECT_EQ(e->filter_id, 12u);
    EXPECT_EQ(e->name, "seen:2026-11-29");
    EXPECT_EQ(e->expire_at, at);
    EXPECT_EQ(LogEntryTypeName(e->type), "expire");
  }
  const std::string good = EncodeSetExpiryEntry(12, "x", 5);
  const size_t body = kLogEntryHeaderBytes + 8;
  std::string late = good;
  Put64(late.data() + body, uint64_t(kLogEntryMaxExpireAt) + 1);
  absl::StatusOr<LogEntry> d = DecodeLogEntry(Reseal(late));
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("an expiry of \"x\""));
  std::string negative = good;
  Put64(negative.data() + body, ~uint64_t{0});
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(negative)).status()));
  std::string no_id = good;
  std::memset(no_id.data() + 8, 0, 8);
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(no_id)).status()));
  std::string hashes = good;
  hashes[16] = 1;  // A hash count on an expiry.
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(hashes)).status()));
  std::string flags = good;
  flags[6] = 1;
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(flags)).status()));
  std::string cut = good.substr(0, good.size() - 16) + good.substr(good.size() - 8);
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(cut)).status()));
  // Types 7 and 8, not this build's, are a newer cuckood's.
  for (char type : {char{7}, char{8}}) {
    std::string newer = good;
    newer[5] = type;
    EXPECT_TRUE(absl::IsFailedPrecondition(DecodeLogEntry(Reseal(newer)).status())) << int(type);
  }
}

TEST(LogEntryRename, RenameEntriesRoundTripAsTheFormatDocumentsThem) {
  for (const std::string& new_name : {std::string("seen:yesterday"), std::string(512, 'n')}) {
    for (bool replace : {false, true}) {
      const std::string e = EncodeRenameEntry(9, "seen:today", new_name, replace ? 4 : 0, replace);
      // The layout of docs/CLUSTER.md: header, the name padded, then
      // replaced_id, the new name's length, 0 and the new name padded.
      ASSERT_EQ(e.size(), 24 + 16 + 16 + (new_name.size() + 7) / 8 * 8 + 8);
      EXPECT_EQ(e[5], 5);
      EXPECT_EQ(e[6], replace ? 1 : 0);
      EXPECT_EQ(Get64(e.data() + 40), replace ? 4u : 0u);
      EXPECT_EQ(Get32(e.data() + 48), new_name.size());
      EXPECT_EQ(e.substr(56, new_name.size()), new_name);
      absl::StatusOr<LogEntry> d = DecodeLogEntry(e);
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(d->type, LogEntryType::kRenameFilter);
      EXPECT_EQ(d->filter_id, 9u);
      EXPECT_EQ(d->name, "seen:today");
      EXPECT_EQ(d->new_name, new_name);
      EXPECT_EQ(d->replaced_id, replace ? 4u : 0u);
      EXPECT_EQ(d->replace, replace);
      EXPECT_EQ(LogEntryTypeName(d->type), "rename");
    }
  }
}

TEST(LogEntryRename, DamagedOrImpossibleRenamesAreDataLossNamingTheProblem) {
  struct Case {
    std::string bytes;
    std::string says;
  };
  std::vector<Case> cases;
  const std::string good = EncodeRenameEntry(9, "a", "bcd", 4, true);  // Name at 24, tail at 32.
  {
    std::string e = good;
    e[32 + 12] = 1;
    cases.push_back({e, "reserved bytes"});
  }
  {
    std::string e = good;
    Put32(e.data() + 32 + 8, 0);
    cases.push_back({e, "a 0-byte name"});
  }
  {
    std::string e = good;
    Put32(e.data() + 32 + 8, 9);
    cases.push_back({e, "a 9-byte name"});
  }
  {
    std::string e = good;
    e[48 + 3] = 'x';
    cases.push_back({e, "padding"});
  }
  {
    std::string e = good;
    e[48 + 1] = '\xff';  // Not UTF-8.
    cases.push_back({e, "bad name"});
  }
  {
    std::string e = good;
    Put32(e.data() + 16, 1);  // Hashes in a rename.
    cases.push_back({e, "a rename with 1 hashes"});
  }
  cases.push_back({EncodeRenameEntry(9, "a", "b", 9, true), "replacing itself"});
  cases.push_back({EncodeRenameEntry(9, "a", "b", 4, false), "may not replace"});
  {
    std::string e = EncodeRenameEntry(9, "a", "b", 0, false);
    std::memset(e.data() + 8, 0, 8);  // No filter id.
    cases.push_back({e, "rename with filter id 0"});
  }
  for (const Case& c : cases) {
    absl::StatusOr<LogEntry> d = DecodeLogEntry(Reseal(c.bytes));
    EXPECT_TRUE(absl::IsDataLoss(d.status())) << c.says << ": " << d.status();
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(c.says));
  }
  std::string flags = good;
  flags[6] = 4;
  absl::StatusOr<LogEntry> newer = DecodeLogEntry(Reseal(flags));
  EXPECT_TRUE(absl::IsFailedPrecondition(newer.status())) << newer.status();
  // Every flipped bit of a rename is refused.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_FALSE(DecodeLogEntry(bad).ok()) << i;
  }
}

FilterShape GrowingShape() {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000,
                                                .false_positive_rate = 0.001,
                                                .seed = 77,
                                                .growth_factor = 2,
                                                .max_capacity = 5'000'000});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(LogEntryTest, GrowingFilterCreateCarriesItsGrowthSettings) {
  const FilterShape shape = GrowingShape();
  ASSERT_TRUE(shape.growing());
  const std::string e = EncodeCreateEntry("grows", shape);
  EXPECT_EQ(e.size(), 24 + 8 + kLogEntryShapeBytes + kLogEntryGrowthBytes + 8);
  EXPECT_EQ(e[6], 2);  // The growth flag.
  absl::StatusOr<LogEntry> d = DecodeLogEntry(e);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->type, LogEntryType::kCreateFilter);
  EXPECT_EQ(d->shape, shape);
  EXPECT_EQ(d->shape.growth_factor, 2u);
  EXPECT_EQ(d->shape.max_capacity, 5'000'000u);
  EXPECT_EQ(d->shape.false_positive_rate, 0.001);
}

// A create as builds before growing filters wrote it, from the layout in
// log_entry.h (not from the encoder).
std::string OldCreateEntry(absl::string_view name, const FilterShape& s) {
  const size_t padded = (name.size() + 7) / 8 * 8;
  std::string e(24 + padded + 56 + 8, '\0');
  Put32(e.data(), 0x454c4b43);
  e[4] = 1;  // Version 1.
  e[5] = 1;  // Create, flags 0.
  Put32(e.data() + 20, static_cast<uint32_t>(name.size()));
  std::memcpy(e.data() + 24, name.data(), name.size());
  char* p = e.data() + 24 + padded;
  const uint32_t u32s[] = {s.hash_id,
                           s.fingerprint_bits,
                           s.bucket_size,
                           s.shards,
                           s.shard_bits,
                           s.max_kicks,
                           static_cast<uint32_t>(s.table_kind)};
  for (size_t i = 0; i < 7; ++i) Put32(p + 4 * i, u32s[i]);
  Put64(p + 32, s.seed);
  Put64(p + 40, s.capacity);
  Put64(p + 48, s.buckets_per_shard);
  return Reseal(e);
}

TEST(LogEntryTest, FixedFilterCreateIsTheEntryOfBuildsBeforeGrowthAndOldEntriesStillDecode) {
  const std::string old = OldCreateEntry("x", Shape());
  EXPECT_EQ(EncodeCreateEntry("x", Shape()), old);
  absl::StatusOr<LogEntry> d = DecodeLogEntry(old);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->shape, Shape());
  EXPECT_FALSE(d->shape.growing());
}

TEST(LogEntryTest, UnknownFlagsAreNewerAndMisplacedOrBrokenGrowthIsDataLoss) {
  std::string newer = EncodeCreateEntry("grows", GrowingShape());
  newer[6] = 2 | 4;
  absl::StatusOr<LogEntry> d = DecodeLogEntry(Reseal(newer));
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  std::string on_insert = EncodeInsertEntry(1, "x", false, {1});
  on_insert[6] = 2;
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(on_insert)).status()));
  std::string if_absent_on_create = EncodeCreateEntry("x", Shape());
  if_absent_on_create[6] = 1;
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(if_absent_on_create)).status()));
  std::string flag_without_block = EncodeCreateEntry("x", Shape());
  flag_without_block[6] = 2;
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(flag_without_block)).status()));
  const size_t block = 24 + 8 + kLogEntryShapeBytes;
  std::string no_factor = EncodeCreateEntry("grows", GrowingShape());
  Put32(no_factor.data() + block, 0);
  EXPECT_TRUE(absl::IsDataLoss(DecodeLogEntry(Reseal(no_factor)).status()));
  std::string low_max = EncodeCreateEntry("grows", GrowingShape());
  Put64(low_max.data() + block + 8, 10);  // Below the capacity.
  absl::StatusOr<LogEntry> low = DecodeLogEntry(Reseal(low_max));
  EXPECT_TRUE(absl::IsDataLoss(low.status())) << low.status();
  EXPECT_THAT(std::string(low.status().message()), HasSubstr("max_capacity"));
}

TEST(LogEntryTest, RandomBytesNeverCrashTheDecoder) {
  std::mt19937_64 rng(1);
  const std::string bases[] = {EncodeCreateEntry("f", Shape()),
                               EncodeCreateEntry("f", GrowingShape())};
  for (int i = 0; i < 20'000; ++i) {
    const std::string& base = bases[i % 2];
    std::string b = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    if (rng() % 3 == 0) b.resize(rng() % (b.size() + 1));
    absl::StatusOr<LogEntry> d = DecodeLogEntry(b);
    if (d.ok()) {
      EXPECT_EQ(b, base);
    }
  }
}

}  // namespace
}  // namespace cuckoo::server
