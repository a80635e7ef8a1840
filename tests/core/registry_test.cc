#include "core/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace cuckoo {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Names are Redis keys: any bytes but NUL, valid UTF-8, 1 to 512 of them.
// None becomes a path, so path-like names are names like any other.
TEST(RegistryTest, RedisStyleKeysAreValidNames) {
  for (const std::string name : {"a",
                                 "users",
                                 "User_1.v2-b",
                                 "0",
                                 "x.y.z",
                                 "users:seen",
                                 "my filter",
                                 "a/b",
                                 "../x",
                                 ".",
                                 "..",
                                 ".hidden",
                                 "-x",
                                 "a\\b",
                                 "a\nb",
                                 "\x01",
                                 "\xC3\xBC",
                                 "\xE2\x82\xAC",
                                 "\xF0\x9F\x98\x80",
                                 "*",
                                 "{tag}:x"}) {
    EXPECT_TRUE(FilterRegistry::ValidateName(name).ok()) << absl::CHexEscape(name);
  }
  EXPECT_TRUE(FilterRegistry::ValidateName(std::string(512, 'a')).ok());
  EXPECT_TRUE(FilterRegistry::ValidateName(std::string(511, 'a') + ":").ok());
  // 170 three-byte characters: 510 bytes.
  std::string euros;
  for (int i = 0; i < 170; ++i) euros += "\xE2\x82\xAC";
  EXPECT_TRUE(FilterRegistry::ValidateName(euros).ok());
}

TEST(RegistryTest, EmptyTooLongAndNulNamesAreRefusedSayingWhy) {
  absl::Status s = FilterRegistry::ValidateName("");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "filter name is empty");
  s = FilterRegistry::ValidateName(std::string(513, 'a'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(s), "filter name is 513 bytes; at most 512 are allowed");
  s = FilterRegistry::ValidateName(std::string("ab\0c", 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Escaped unambiguously: a hex digit after \x00 is escaped too.
  EXPECT_THAT(Message(s), HasSubstr("\"ab\\x00\\x63\" has a NUL byte at offset 2"));
  s = FilterRegistry::ValidateName(std::string("\0", 1));
  EXPECT_THAT(Message(s), HasSubstr("NUL byte at offset 0"));
}

TEST(RegistryTest, NamesThatAreNotUtf8AreRefusedNamingTheFirstBadByte) {
  struct Case {
    std::string name;
    size_t offset;
    unsigned byte;
  };
  const std::vector<Case> cases = {
      {"\xFF", 0, 0xFF},
      {"users:\x80", 6, 0x80},        // A lone continuation byte.
      {"ab\xC3", 2, 0xC3},            // Cut short.
      {"\xC3\xBC\xC3(", 2, 0xC3},     // A bad continuation after a good character.
      {"x\xC0\xAF", 1, 0xC0},         // Overlong "/".
      {"\xE0\x80\xAF", 0, 0xE0},      // Overlong, three bytes.
      {"a\xED\xA0\x80", 1, 0xED},     // A UTF-16 surrogate.
      {"\xF4\x90\x80\x80", 0, 0xF4},  // Above U+10FFFF.
      {"\xF5\x80\x80\x80", 0, 0xF5},
      {"\xE2\x82", 0, 0xE2},
  };
  for (const Case& c : cases) {
    absl::Status s = FilterRegistry::ValidateName(c.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(c.name);
    EXPECT_THAT(Message(s), HasSubstr(absl::StrFormat(
                                "is not valid UTF-8 (byte 0x%02x at offset %u)", c.byte, c.offset)))
        << absl::CHexEscape(c.name);
    EXPECT_EQ(FilterRegistry::FirstInvalidUtf8Byte(c.name), c.offset) << absl::CHexEscape(c.name);
  }
}

// Control bytes never reach a message raw: a terminal or a log line shows
// them escaped.
TEST(RegistryTest, MessagesQuoteNamesEscaped) {
  FilterRegistry reg;
  const std::string name = "evil\n\x1b[31mred";
  absl::StatusOr<std::shared_ptr<CuckooFilter>> missing = reg.Get(name);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(Message(missing.status()), "filter \"evil\\n\\x1b[31mred\" not found");
  ASSERT_TRUE(reg.Create(name, {.capacity = 1000}).ok());
  absl::StatusOr<std::shared_ptr<CuckooFilter>> again = reg.Create(name, {.capacity = 1000});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(again.status()), HasSubstr("filter \"evil\\n\\x1b[31mred\" already exists"));
  EXPECT_EQ(Message(again.status()).find('\n'), std::string::npos);
  EXPECT_EQ(Message(again.status()).find('\x1b'), std::string::npos);
}

// ImportFilter's claim: the name, a filter of the count and the memory are
// held while the filter is read and made durable, then published, or given
// back if it never is.
TEST(RegistryTest, AClaimHoldsTheNameCountAndMemoryUntilPublishedOrReleased) {
  const FilterShape shape = *ComputeShape({.capacity = 1000, .seed = 5});
  const uint64_t bytes = CuckooFilter::MemoryBytes(shape);
  FilterRegistry reg({.memory_budget_bytes = 3 * bytes, .max_filters = 2});
  absl::StatusOr<FilterRegistry::Claim> claim = reg.ClaimName("g", bytes);
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_TRUE(claim->held());
  EXPECT_EQ(reg.memory_bytes(), bytes);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.Get("g").status().code(), absl::StatusCode::kNotFound);
  // The name is taken while claimed, by a create, an add or another claim.
  for (const absl::Status& s :
       {reg.Create("g", {.capacity = 10}).status(), reg.ClaimName("g", 1).status(),
        reg.CheckRoom("g", 1), reg.Add("g", *CuckooFilter::FromShape(shape)).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
    EXPECT_THAT(Message(s), HasSubstr("\"g\" is being added"));
  }
  // It counts as a filter: max_filters 2 leaves room for one more.
  ASSERT_TRUE(reg.Create("a", {.capacity = 1000}).ok());
  EXPECT_EQ(reg.ClaimName("b", 1).status().code(), absl::StatusCode::kResourceExhausted);
  // Released unpublished (here by a move-assignment over it), it gives all back.
  *claim = FilterRegistry::Claim();
  EXPECT_EQ(reg.memory_bytes(), reg.Get("a").value()->memory_bytes());
  claim = reg.ClaimName("g", bytes);
  ASSERT_TRUE(claim.ok()) << claim.status();
  // Too little memory for a claim: nothing is held.
  EXPECT_EQ(reg.ClaimName("h", 10 * bytes).status().code(), absl::StatusCode::kResourceExhausted);
  // Published: the filter has the name, and the claim's charge is its own.
  auto added = reg.AddClaimed(*std::move(claim), *CuckooFilter::FromShape(shape));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(reg.Get("g").value().get(), added->get());
  EXPECT_EQ(reg.size(), 2u);
  EXPECT_EQ(reg.memory_bytes(), 2 * bytes);
  ASSERT_TRUE(reg.Drop("g").ok());
  added->reset();
  EXPECT_EQ(reg.memory_bytes(), bytes);
  // A claim taken by value and not published is released with it.
  {
    auto c = reg.ClaimName("h", bytes);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(reg.memory_bytes(), 2 * bytes);
  }
  EXPECT_EQ(reg.memory_bytes(), bytes);
  EXPECT_TRUE(reg.ClaimName("h", bytes).ok());
  EXPECT_EQ(reg.memory_bytes(), bytes);  // (Released again at once.)
}

TEST(RegistryTest, CreateGetListDrop) {
  FilterRegistry reg;
  auto a = reg.Create("b-filter", {.capacity = 1000});
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(reg.Create("a-filter", {.capacity = 2000}).ok());
  auto got = reg.Get("b-filter");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->get(), a->get());
  auto list = reg.List();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].first, "a-filter");
  EXPECT_EQ(list[1].first, "b-filter");
  EXPECT_EQ(reg.memory_bytes(), list[0].second->memory_bytes() + list[1].second->memory_bytes());
  const uint64_t a_bytes = list[0].second->memory_bytes();
  list.clear();
  got = absl::NotFoundError("released");
  ASSERT_TRUE(reg.Drop("b-filter").ok());
  EXPECT_EQ(reg.Get("b-filter").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(reg.Drop("b-filter")), HasSubstr("\"b-filter\" not found"));
  EXPECT_EQ(reg.size(), 1u);
  // A dropped filter stays usable by whoever still holds it, and charged.
  EXPECT_EQ((*a)->Insert("k"), InsertResult::kInserted);
  EXPECT_EQ(reg.memory_bytes(), a_bytes + (*a)->memory_bytes());
  a = absl::NotFoundError("released");
  EXPECT_EQ(reg.memory_bytes(), a_bytes);
}

// The budget used to release a dropped filter's bytes at once, while calls
// still running on it kept its memory: a create could then take the budget
// twice over.
TEST(RegistryTest, ADroppedFilterInUseStaysChargedUntilItsLastUserLetsGo) {
  FilterRegistry reg({.memory_budget_bytes = 4 << 20, .max_filters = 10});
  const FilterOptions big{.capacity = 2'000'000, .fingerprint_bits = 12, .shards = 1};
  auto held = reg.Create("big", big);  // A call running on it.
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(reg.Drop("big").ok());
  auto again = reg.Create("big", big);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kResourceExhausted) << again.status();
  EXPECT_THAT(Message(again.status()), HasSubstr("memory budget of 4194304 bytes"));
  held = absl::CancelledError("the call ended");
  EXPECT_EQ(reg.memory_bytes(), 0u);
  EXPECT_TRUE(reg.Create("big", big).ok());
}

TEST(RegistryTest, TheBudgetIsChargedWithEveryByteAFilterAllocates) {
  FilterRegistry reg;
  // Many shards of tiny tables: the per-shard state is most of it.
  auto f = reg.Create("many", {.capacity = 1024, .shards = 1024});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(reg.memory_bytes(), CuckooFilter::MemoryBytes((*f)->shape()));
  EXPECT_EQ((*f)->memory_bytes(), CuckooFilter::MemoryBytes((*f)->shape()));
  const uint64_t tables = (*f)->shape().table_bytes_per_shard() * 1024;
  EXPECT_GT((*f)->memory_bytes(), tables + 1024 * 100) << "per-shard state is charged";
}

TEST(RegistryTest, DuplicateCreateWithOtherSettingsNamesTheDifference) {
  FilterRegistry reg;
  ASSERT_TRUE(reg.Create("f", {.capacity = 1000, .fingerprint_bits = 12}).ok());
  auto again = reg.Create("f", {.capacity = 1000, .fingerprint_bits = 16}, true);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(again.status()), HasSubstr("fingerprint_bits 12 (requested 16)"));
  auto plain = reg.Create("f", {.capacity = 1000, .fingerprint_bits = 12});
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(RegistryTest, IfNotExistsWithAnotherTableKindNamesTheDifference) {
  FilterRegistry reg;
  // Rate-derived f = 12 at b = 4: semi-sorted unless asked otherwise.
  auto first = reg.Create("f", {.capacity = 1000});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ((*first)->shape().table_kind, TableKind::kSemiSorted);
  auto packed = reg.Create("f", {.capacity = 1000, .semi_sort = false}, true);
  EXPECT_EQ(packed.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(packed.status()), HasSubstr("table kind semi_sorted (requested packed)"));
  // Only the kind differs: f and b are the same.
  EXPECT_THAT(Message(packed.status()), ::testing::Not(HasSubstr("fingerprint_bits")));
  auto same = reg.Create("f", {.capacity = 1000, .semi_sort = true}, true);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->get(), first->get());

  ASSERT_TRUE(reg.Create("g", {.capacity = 1000, .fingerprint_bits = 12}).ok());
  auto semi = reg.Create("g", {.capacity = 1000, .fingerprint_bits = 12, .semi_sort = true}, true);
  EXPECT_THAT(Message(semi.status()), HasSubstr("table kind packed (requested semi_sorted)"));
}

TEST(RegistryTest, IfNotExistsWithSameSettingsReturnsTheExistingFilter) {
  FilterRegistry reg;
  auto first = reg.Create("f", {.capacity = 1000, .false_positive_rate = 0.01});
  ASSERT_TRUE(first.ok());
  (*first)->Insert("kept");
  auto second = reg.Create("f", {.capacity = 1000, .false_positive_rate = 0.01}, true);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->get(), first->get());
  EXPECT_TRUE((*second)->MayContain("kept"));
}

TEST(RegistryTest, IfNotExistsComparesGrowthSettingsAndNamesEachDifference) {
  FilterRegistry reg;
  const FilterOptions grows{
      .capacity = 1000, .false_positive_rate = 0.01, .seed = 3, .growth_factor = 2};
  auto first = reg.Create("g", grows);
  ASSERT_TRUE(first.ok()) << first.status();
  auto same = reg.Create("g", grows, true);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->get(), first->get());
  FilterOptions factor = grows;
  factor.growth_factor = 4;
  EXPECT_THAT(Message(reg.Create("g", factor, true).status()),
              HasSubstr("growth_factor 2 (requested 4)"));
  FilterOptions ceiling = grows;
  ceiling.max_capacity = 100'000;
  EXPECT_THAT(Message(reg.Create("g", ceiling, true).status()),
              HasSubstr("max_capacity 0 (requested 100000)"));
  // Two rates may pick the same fingerprints; the rate budget still differs.
  FilterOptions rate = grows;
  rate.false_positive_rate = 0.011;
  EXPECT_THAT(Message(reg.Create("g", rate, true).status()),
              HasSubstr("false_positive_rate 0.01 (requested 0.011)"));
  FilterOptions fixed = grows;
  fixed.growth_factor = 0;
  auto as_fixed = reg.Create("g", fixed, true);
  EXPECT_EQ(as_fixed.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(as_fixed.status()), HasSubstr("growth_factor 2 (requested 0)"));
}

TEST(RegistryTest, GrowthIsChargedAsItHappensEvenPastTheBudgetAndReleasedWithTheFilter) {
  FilterRegistry reg({.memory_budget_bytes = 64 << 10, .max_filters = 10});
  auto f = reg.Create(
      "g", {.capacity = 1000, .false_positive_rate = 0.01, .seed = 3, .growth_factor = 2});
  ASSERT_TRUE(f.ok()) << f.status();
  const uint64_t initial = (*f)->memory_bytes();
  EXPECT_EQ(reg.memory_bytes(), initial);
  // Far past the budget: growth is never refused by the registry (the
  // server refuses inserts instead), and every byte is charged.
  for (int i = 0; i < 100'000; ++i) {
    ASSERT_EQ((*f)->Insert("key-" + std::to_string(i)), InsertResult::kInserted) << i;
  }
  EXPECT_GT((*f)->memory_bytes(), initial);
  EXPECT_GT(reg.memory_bytes(), reg.limits().memory_budget_bytes);
  EXPECT_EQ(reg.memory_bytes(), (*f)->memory_bytes());
  // A new filter cannot be had while growth holds the budget.
  EXPECT_EQ(reg.Create("h", {.capacity = 10}).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(reg.Drop("g").ok());
  EXPECT_GT(reg.memory_bytes(), 0u);  // Still in use here.
  f = absl::CancelledError("the last user let go");
  EXPECT_EQ(reg.memory_bytes(), 0u);
  EXPECT_TRUE(reg.Create("h", {.capacity = 10}).ok());
}

TEST(RegistryTest, AClaimSmallerThanItsFilterChargesTheRestWhateverTheBudget) {
  // A cluster replica's peer copy of a grown filter claims its first
  // generation's bytes, what its creation was admitted for; the tables it
  // grew are charged as growth is, whatever the budget: the replica must
  // hold every filter of the log.
  const FilterShape shape = *ComputeShape({.capacity = 1000, .seed = 1});
  const uint64_t bytes = CuckooFilter::MemoryBytes(shape);
  FilterRegistry tight({.memory_budget_bytes = bytes - 1, .max_filters = 10});
  auto claim = tight.ClaimName("f", 1);
  ASSERT_TRUE(claim.ok()) << claim.status();
  auto added = tight.AddClaimed(*std::move(claim), *CuckooFilter::FromShape(shape));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(tight.memory_bytes(), bytes);  // Past the budget.
  ASSERT_TRUE(tight.Drop("f").ok());
  added->reset();
  EXPECT_EQ(tight.memory_bytes(), 0u);
}

// A snapshot of a filter that grew past the budget loads at the next start
// (Add): its first generation is admitted, its grown tables charged.
TEST(RegistryTest, AddOfAGrownFilterAdmitsItsFirstGenerationAndChargesTheRest) {
  auto grown = *CuckooFilter::Create(
      {.capacity = 100, .false_positive_rate = 0.01, .seed = 1, .growth_factor = 2});
  for (int i = 0; i < 20'000; ++i) grown->Insert(absl::StrCat("k", i));
  const uint64_t base = CuckooFilter::MemoryBytes(grown->shape());
  const uint64_t total = grown->memory_bytes();
  ASSERT_GT(total, 4 * base);
  FilterRegistry reg({.memory_budget_bytes = base + 1, .max_filters = 10});
  auto added = reg.Add("g", std::move(grown));
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(reg.memory_bytes(), total);
  // The budget is used up now: a new filter is refused.
  EXPECT_EQ(reg.Create("h", {.capacity = 10}).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(reg.Drop("g").ok());
  added->reset();
  EXPECT_EQ(reg.memory_bytes(), 0u);
}

// Two idempotent creates of one name whose budget holds one such filter:
// the loser used to get RESOURCE_EXHAUSTED for the memory its twin had
// reserved, instead of the twin's filter.
TEST(RegistryTest, RacingIdempotentCreatesOfANameBothGetTheOneFilter) {
  FilterRegistry reg({.memory_budget_bytes = 4 << 20, .max_filters = 10});
  const FilterOptions options = {.capacity = 2'000'000, .fingerprint_bits = 12, .shards = 1};
  for (int round = 0; round < 50; ++round) {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> got[2];
    bool created[2] = {false, false};
    std::thread twin([&] { got[1] = reg.Create("f", options, true, &created[1]); });
    got[0] = reg.Create("f", options, true, &created[0]);
    twin.join();
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    ASSERT_TRUE(got[1].ok()) << got[1].status();
    EXPECT_EQ(got[0]->get(), got[1]->get());
    EXPECT_EQ(created[0] + created[1], 1);
    got[0] = got[1] = absl::StatusOr<std::shared_ptr<CuckooFilter>>();
    ASSERT_TRUE(reg.Drop("f").ok());
  }
}

TEST(RegistryTest, MemoryBudgetIsEnforcedWithAClearMessage) {
  FilterRegistry reg({.memory_budget_bytes = 4 << 20, .max_filters = 10});
  // ~3 MiB at 12.6 bits per item.
  ASSERT_TRUE(reg.Create("big", {.capacity = 2'000'000, .fingerprint_bits = 12, .shards = 1}).ok());
  auto over = reg.Create("big2", {.capacity = 2'000'000, .fingerprint_bits = 12, .shards = 1});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(over.status()), HasSubstr("memory budget of 4194304 bytes"));
  EXPECT_EQ(reg.size(), 1u);
  ASSERT_TRUE(reg.Drop("big").ok());
  EXPECT_TRUE(
      reg.Create("big2", {.capacity = 2'000'000, .fingerprint_bits = 12, .shards = 1}).ok());
}

TEST(RegistryTest, MaxFiltersIsEnforced) {
  FilterRegistry reg({.memory_budget_bytes = 1 << 30, .max_filters = 2});
  ASSERT_TRUE(reg.Create("a", {.capacity = 10}).ok());
  ASSERT_TRUE(reg.Create("b", {.capacity = 10}).ok());
  auto c = reg.Create("c", {.capacity = 10});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(Message(c.status()), HasSubstr("max filters 2"));
}

TEST(RegistryTest, BadOptionsAndNamesFailBeforeAnythingIsCreated) {
  FilterRegistry reg;
  EXPECT_EQ(reg.Create(std::string(513, 'e'), {.capacity = 10}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Create("ok", {.capacity = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.memory_bytes(), 0u);
}

// Expiry: a filter is gone for clients (GetLive, ListLive) from its
// expire_at on, judged by the registry's clock; Get and List still hand it
// out (its owner's logged drop needs it).
TEST(RegistryTest, ExpiredFiltersAreMissingForGetLiveAndListLiveFromTheirExpireAtOn) {
  FilterRegistry registry;
  int64_t now = 1'000'000;
  registry.SetClock([&] { return now; });
  FilterOptions options{.capacity = 1000, .seed = 1};
  auto a = registry.Create("a", options);
  auto b = registry.Create("b", options);
  ASSERT_TRUE(a.ok() && b.ok());
  (*a)->set_expire_at(now + 100);
  EXPECT_FALSE(registry.Expired(**a));
  EXPECT_TRUE(registry.GetLive("a").ok());
  EXPECT_EQ(registry.ListLive().size(), 2u);
  now += 99;
  EXPECT_TRUE(registry.GetLive("a").ok());
  now += 1;  // At expire_at: expired, as a Redis key.
  EXPECT_TRUE(registry.Expired(**a));
  absl::StatusOr<std::shared_ptr<CuckooFilter>> gone = registry.GetLive("a");
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_THAT(
      std::string(gone.status().message()),
      ::testing::HasSubstr("filter \"a\" not found: it expired at 1970-01-01T00:16:40.1+00:00"));
  ASSERT_EQ(registry.ListLive().size(), 1u);
  EXPECT_EQ(registry.ListLive()[0].first, "b");
  EXPECT_TRUE(registry.Get("a").ok());
  EXPECT_EQ(registry.List().size(), 2u);
  // Cleared: live again. A change of the expiry counts as a change.
  const uint64_t changes = (*a)->changes();
  (*a)->set_expire_at(0);
  EXPECT_TRUE(registry.GetLive("a").ok());
  EXPECT_EQ((*a)->changes(), changes + 1);
  (*a)->set_expire_at(0);
  EXPECT_EQ((*a)->changes(), changes + 1);  // No change, not counted.
}

TEST(RegistryRename, RenameMovesTheFilterToTheNewNameInOneStep) {
  FilterRegistry reg;
  auto a = reg.Create("seen:today", {.capacity = 100});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Insert("k") == InsertResult::kInserted);
  std::shared_ptr<CuckooFilter> replaced;
  auto r = reg.Rename("seen:today", "seen:yesterday", false, nullptr, &replaced);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->get(), a->get());
  EXPECT_EQ(replaced, nullptr);
  EXPECT_EQ(reg.Get("seen:today").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Get("seen:yesterday").value().get(), a->get());
  EXPECT_TRUE(reg.Get("seen:yesterday").value()->MayContain("k"));
  EXPECT_EQ(reg.size(), 1u);
}

TEST(RegistryRename, ATakenDestinationIsRefusedUnlessReplaceDropsIt) {
  FilterRegistry reg;
  auto a = reg.Create("a", {.capacity = 100});
  auto b = reg.Create("b", {.capacity = 200});
  ASSERT_TRUE(a.ok() && b.ok());
  auto refused = reg.Rename("a", "b", false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(refused.status()), HasSubstr("\"b\" already exists"));
  EXPECT_EQ(reg.Get("a").value().get(), a->get());  // Nothing changed.
  EXPECT_EQ(reg.Get("b").value().get(), b->get());
  const uint64_t before = reg.memory_bytes();
  std::shared_ptr<CuckooFilter> replaced;
  ASSERT_TRUE(reg.Rename("a", "b", true, nullptr, &replaced).ok());
  EXPECT_EQ(replaced.get(), b->get());
  EXPECT_EQ(reg.Get("b").value().get(), a->get());
  EXPECT_EQ(reg.Get("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.size(), 1u);
  // The replaced filter stays charged until its last holder lets go.
  EXPECT_EQ(reg.memory_bytes(), before);
  replaced.reset();
  b->reset();
  EXPECT_EQ(reg.memory_bytes(), (*a)->memory_bytes());
}

TEST(RegistryRename, MissingSourceBadNewNameAndOnlyIfAreRefusedChangingNothing) {
  FilterRegistry reg;
  auto a = reg.Create("a", {.capacity = 100});
  auto other = CuckooFilter::Create({.capacity = 100});
  ASSERT_TRUE(a.ok() && other.ok());
  EXPECT_EQ(reg.Rename("missing", "x", true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Rename("a", std::string(513, 'n'), true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Rename("a", "x", true, other->get()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg.Get("a").value().get(), a->get());
  EXPECT_EQ(reg.Get("x").status().code(), absl::StatusCode::kNotFound);
}

TEST(RegistryRename, RenamingToItsOwnNameChangesNothingAndSucceeds) {
  FilterRegistry reg;
  auto a = reg.Create("a", {.capacity = 100});
  ASSERT_TRUE(a.ok());
  bool hook = false;
  auto r = reg.Rename("a", "a", false, nullptr, nullptr,
                      [&](CuckooFilter&, const CuckooFilter* replaced) {
                        hook = true;
                        EXPECT_EQ(replaced, nullptr);
                        return absl::OkStatus();
                      });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(hook);
  EXPECT_EQ(reg.Get("a").value().get(), a->get());
}

TEST(RegistryRename, TheHookSeesBothFiltersAndItsErrorAbandonsTheRename) {
  FilterRegistry reg;
  auto a = reg.Create("a", {.capacity = 100});
  auto b = reg.Create("b", {.capacity = 100});
  ASSERT_TRUE(a.ok() && b.ok());
  auto r = reg.Rename("a", "b", true, nullptr, nullptr,
                      [&](CuckooFilter& f, const CuckooFilter* replaced) {
                        EXPECT_EQ(&f, a->get());
                        EXPECT_EQ(replaced, b->get());
                        return absl::UnavailableError("log closed");
                      });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(reg.Get("a").value().get(), a->get());
  EXPECT_EQ(reg.Get("b").value().get(), b->get());
}

TEST(RegistryRename, AClaimedDestinationIsBusyEvenWithReplace) {
  FilterRegistry reg;
  auto a = reg.Create("a", {.capacity = 100});
  ASSERT_TRUE(a.ok());
  auto claim = reg.ClaimName("loading", 1);
  ASSERT_TRUE(claim.ok());
  auto r = reg.Rename("a", "loading", true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(Message(r.status()), HasSubstr("being added"));
}

TEST(RegistryRename, ReadersNeverSeeBothNamesOrNeither) {
  FilterRegistry reg;
  ASSERT_TRUE(reg.Create("x", {.capacity = 100}).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load()) {
      // One List is one look under the lock: exactly one of the names.
      const auto all = reg.List();
      if (all.size() != 1) ++bad;
    }
  });
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(reg.Rename(i % 2 == 0 ? "x" : "y", i % 2 == 0 ? "y" : "x", true).ok());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace cuckoo
