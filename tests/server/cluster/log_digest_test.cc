#include "server/cluster/log_digest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cuckoo::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kIdentity[] = "CUCKOOD@1764400000000000000";

// A replica that applied `entries` (entry i at position i + 1).
struct Replica {
  std::string key;
  DigestHistory history;
  uint64_t digest = 0;
  uint64_t applied = 0;

  explicit Replica(std::string k) : key(std::move(k)) {}
  void Apply(const std::string& entry) {
    ++applied;
    digest = NextLogDigest(digest, applied, LogEntryHash(entry));
    history.Add(applied, digest, LogEntryHash(entry));
  }
  void ApplyAll(const std::vector<std::string>& entries) {
    for (const std::string& e : entries) Apply(e);
  }
  DigestReport Report() const {
    DigestReport r;
    r.key = key;
    r.identity = kIdentity;
    r.applied = applied;
    r.digest = digest;
    r.marks = history.Marks();
    r.consumer_from = 1;
    return r;
  }
};

std::vector<std::string> Log(int n, int offset = 0) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(absl::StrCat("entry ", i + offset));
  return out;
}

TEST(LogDigestTest, SameEntriesAtSamePositionsGiveSameDigests) {
  Replica a("a"), b("b");
  a.ApplyAll(Log(500));
  b.ApplyAll(Log(500));
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_NE(a.digest, 0u);
}

TEST(LogDigestTest, ASkippedEntryChangesEveryLaterDigest) {
  const std::vector<std::string> log = Log(300);
  Replica a("a"), b("b");
  a.ApplyAll(log);
  // b's copy lacks entry 100 and has the next one in its place: shifted.
  for (size_t i = 0; i < log.size(); ++i) {
    if (i != 99) b.Apply(log[i]);
  }
  b.Apply("entry 300");
  ASSERT_EQ(a.applied, b.applied);
  for (uint64_t p = 1; p < 100; ++p) EXPECT_EQ(a.history.At(p), b.history.At(p)) << p;
  for (uint64_t p = 100; p <= 300; ++p) EXPECT_NE(a.history.At(p), b.history.At(p)) << p;
}

TEST(LogDigestTest, TheSameEntryAtAnotherPositionDiffers) {
  Replica a("a"), b("b");
  a.ApplyAll({"x", "y"});
  b.ApplyAll({"y", "x"});
  EXPECT_NE(a.digest, b.digest);
}

TEST(LogDigestTest, HistoryKeepsTheLastPositionsAndStartsAgainOnAGap) {
  DigestHistory h(8);
  for (uint64_t p = 1; p <= 20; ++p) h.Add(p, p * 10);
  EXPECT_EQ(h.first(), 13u);
  EXPECT_EQ(h.last(), 20u);
  EXPECT_EQ(h.At(12), std::nullopt);
  EXPECT_EQ(h.At(13), 130u);
  EXPECT_EQ(h.At(20), 200u);
  EXPECT_EQ(h.At(21), std::nullopt);
  h.Add(40, 400);  // Not the next position: only 40 is known now.
  EXPECT_EQ(h.At(20), std::nullopt);
  EXPECT_EQ(h.At(40), 400u);
  h.Clear();
  EXPECT_EQ(h.At(40), std::nullopt);
}

TEST(LogDigestTest, MarksAreTheLastMultiplesOfTheMarkInterval) {
  DigestHistory h;
  for (uint64_t p = 1; p <= 2000; ++p) h.Add(p, p);
  const std::vector<DigestPoint> marks = h.Marks();
  ASSERT_EQ(marks.size(), kDigestMarks);
  EXPECT_EQ(marks.back().position, 1984u);  // 31 * 64
  EXPECT_EQ(marks.front().position, 1984u - (kDigestMarks - 1) * kDigestMarkEvery);
  for (const DigestPoint& m : marks) EXPECT_EQ(m.digest, m.position);
  DigestHistory few;
  for (uint64_t p = 1; p <= 130; ++p) few.Add(p, p);
  EXPECT_THAT(few.Marks(), ElementsAre(DigestPoint{64, 64}, DigestPoint{128, 128}));
}

TEST(LogDigestTest, ReportRoundTripsThroughItsKvValue) {
  Replica a("replica-1");
  a.ApplyAll(Log(200));
  DigestReport r = a.Report();
  r.consumer_from = 17;
  const std::string value = FormatDigestReport(r);
  EXPECT_THAT(value, HasSubstr("cuckood-digest v1 identity=CUCKOOD@"));
  absl::StatusOr<DigestReport> back = ParseDigestReport("replica-1", value);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->applied, 200u);
  EXPECT_EQ(back->digest, a.digest);
  EXPECT_EQ(back->consumer_from, 17u);
  EXPECT_EQ(back->identity, kIdentity);
  EXPECT_EQ(back->marks, r.marks);
  EXPECT_FALSE(back->diverged);
  r.diverged = true;
  EXPECT_TRUE(ParseDigestReport("replica-1", FormatDigestReport(r))->diverged);

  r.digest.reset();
  back = ParseDigestReport("replica-1", FormatDigestReport(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->digest.has_value());
}

TEST(LogDigestTest, MalformedReportsAreRefusedWithTheirKey) {
  for (const char* bad : {"", "cuckood-digest v2 identity=x applied=1 digest=none",
                          "cuckood-digest v1 identity=x applied=one digest=none",
                          "cuckood-digest v1 identity=x applied=1 digest=12",
                          "cuckood-digest v1 applied=1 digest=none",
                          "cuckood-digest v1 identity=x applied=1 digest=none marks=2:zz",
                          "cuckood-digest v1 identity=x applied=1 digest=none "
                          "marks=128:0000000000000001,64:0000000000000002"}) {
    absl::StatusOr<DigestReport> r = ParseDigestReport("r9", bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("\"r9\"")) << bad;
  }
}

TEST(LogDigestTest, ReportsCompareAtTheHighestPositionBothGive) {
  const std::vector<std::string> log = Log(1000);
  Replica a("a"), b("b");
  a.ApplyAll(log);
  b.ApplyAll(std::vector<std::string>(log.begin(), log.begin() + 700));
  DigestComparison c = CompareReports(a.Report(), b.Report());
  EXPECT_EQ(c.relation, DigestRelation::kAgree);
  EXPECT_EQ(c.position, 640u);  // The last mark both passed.
  // a's own history holds b's applied position.
  c = CompareWithHistory(a.history, a.Report(), b.Report());
  EXPECT_EQ(c.relation, DigestRelation::kAgree);
  EXPECT_EQ(c.position, 700u);
  // Nothing in common: unknown.
  Replica c1("c");
  c1.ApplyAll(Log(10));
  EXPECT_EQ(CompareReports(a.Report(), c1.Report()).relation, DigestRelation::kUnknown);
}

TEST(LogDigestTest, AReplicaAloneAgreesWithItself) {
  Replica a("a");
  a.ApplyAll(Log(50));
  const DigestJudgement j = JudgeDigests(a.history, a.Report(), {});
  EXPECT_EQ(j.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(j.verified, 50u);
  EXPECT_EQ(j.voters, 1u);
}

TEST(LogDigestTest, AMajorityVerifiesUpToWhereItAgreed) {
  const std::vector<std::string> log = Log(900);
  Replica a("a"), b("b"), c("c");
  a.ApplyAll(log);
  b.ApplyAll(std::vector<std::string>(log.begin(), log.begin() + 850));
  c.ApplyAll(std::vector<std::string>(log.begin(), log.begin() + 300));
  const DigestJudgement j = JudgeDigests(a.history, a.Report(), {b.Report(), c.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(j.voters, 3u);
  EXPECT_EQ(j.verified, 850u);  // a and b: two of three.
}

TEST(LogDigestTest, TheMinorityThatSkippedAnEntryIsDivergedAndNamesTheMajority) {
  const std::vector<std::string> log = Log(400);
  Replica good1("n1"), good2("n2"), bad("n3");
  good1.ApplyAll(log);
  good2.ApplyAll(log);
  for (size_t i = 0; i < log.size(); ++i) {
    if (i != 200) bad.Apply(log[i]);
  }
  const DigestJudgement j =
      JudgeDigests(bad.history, bad.Report(), {good1.Report(), good2.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kDiverged);
  EXPECT_THAT(j.majority, ElementsAre("n1", "n2"));
  EXPECT_THAT(j.detail, HasSubstr("n1, n2"));
  // The majority's view: it serves, and the minority does not count.
  const DigestJudgement g =
      JudgeDigests(good1.history, good1.Report(), {good2.Report(), bad.Report()});
  EXPECT_EQ(g.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(g.verified, 400u);
}

TEST(LogDigestTest, TwoReplicasThatDisagreeHaveNoMajority) {
  Replica a("a"), b("b");
  a.ApplyAll(Log(100));
  b.ApplyAll(Log(100, 1));
  DigestJudgement j = JudgeDigests(a.history, a.Report(), {b.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kNoMajority);
  EXPECT_THAT(j.detail, HasSubstr("no side is a majority of the 2 replicas"));
  j = JudgeDigests(b.history, b.Report(), {a.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kNoMajority);
  // Three that all disagree: none is a majority either.
  Replica c("c");
  c.ApplyAll(Log(100, 2));
  j = JudgeDigests(a.history, a.Report(), {b.Report(), c.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kNoMajority);
}

TEST(LogDigestTest, PeersWithoutADigestOrOfAnotherLogDoNotVote) {
  Replica a("a"), b("b"), c("c");
  a.ApplyAll(Log(100));
  b.ApplyAll(Log(100, 1));
  c.ApplyAll(Log(100, 1));
  DigestReport no_digest = b.Report();
  no_digest.digest.reset();
  no_digest.marks.clear();
  DigestReport other_log = c.Report();
  other_log.identity = "CUCKOOD@1";
  const DigestJudgement j = JudgeDigests(a.history, a.Report(), {no_digest, other_log});
  EXPECT_EQ(j.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(j.voters, 1u);
}

TEST(LogDigestTest, AReplicaWithoutItsDigestVerifiesNothing) {
  Replica a("a"), b("b");
  a.ApplyAll(Log(100));
  b.ApplyAll(Log(100));
  DigestReport mine = a.Report();
  mine.digest.reset();
  const DigestJudgement j = JudgeDigests(DigestHistory(), mine, {b.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(j.verified, 0u);
  EXPECT_EQ(j.voters, 2u);
}

TEST(LogDigestTest, HistoryKeepsEachPositionsEntryHashWhenKnown) {
  Replica a("a");
  a.ApplyAll(Log(10));
  EXPECT_EQ(a.history.EntryAt(7), LogEntryHash("entry 6"));
  EXPECT_FALSE(a.history.EntryAt(11).has_value());
  // A digest taken without its entry (from a peer's copy): not known.
  a.history.Add(11, 99);
  EXPECT_FALSE(a.history.EntryAt(11).has_value());
  EXPECT_EQ(a.history.At(11), 99u);
}

TEST(LogDigestTest, PeersThatFoundThemselvesDivergedDoNotVote) {
  const std::vector<std::string> log = Log(400);
  Replica good("good"), bad1("bad1"), bad2("bad2");
  good.ApplyAll(log);
  for (size_t i = 0; i < log.size(); ++i) {
    if (i == 250) continue;
    bad1.Apply(log[i]);
    bad2.Apply(log[i]);
  }
  // Outvoted while the other two vote.
  DigestJudgement j = JudgeDigests(good.history, good.Report(), {bad1.Report(), bad2.Report()});
  EXPECT_EQ(j.state, DigestJudgement::State::kDiverged);
  // Once they say they are diverged, they do not: good agrees with itself.
  DigestReport r1 = bad1.Report(), r2 = bad2.Report();
  r1.diverged = r2.diverged = true;
  j = JudgeDigests(good.history, good.Report(), {r1, r2});
  EXPECT_EQ(j.state, DigestJudgement::State::kAgreed);
  EXPECT_EQ(j.voters, 1u);
}

}  // namespace
}  // namespace cuckoo::server
