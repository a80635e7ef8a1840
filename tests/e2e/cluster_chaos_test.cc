// The cluster's promises under failure, on real processes (a 3-node
// nats-server JetStream cluster, 3 cuckood replicas): writers insert and
// delete through every replica with request ids, retrying UNAVAILABLE on
// the next replica, while
//   - a random replica is killed -9 at a random moment and restarted, or
//   - the NATS server leading the stream is killed -9 and restarted;
// for at least 10 rounds each. After every round: no acknowledged write is
// lost on any replica (every key acknowledged INSERTED and not deleted is
// present once the replica has applied the writers' last position), the
// only errors a writer saw were UNAVAILABLE (then retried), and reads were
// answered throughout. At the end, once idle, every replica's tables are
// bit-identical.
//
// Rounds: CUCKOO_CHAOS_ROUNDS (default 10). Long soaks: docs/CLUSTER.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/e2e/cluster_harness.h"

namespace cuckoo::testing {
namespace {

int Rounds() {
  const char* r = std::getenv("CUCKOO_CHAOS_ROUNDS");
  return r != nullptr ? std::max(1, std::atoi(r)) : 10;
}

void CreateFilter(TestCluster& c, Ledger& ledger) {
  v1::CreateFilterRequest req;
  req.set_name("chaos");
  req.set_capacity(2'000'000);
  v1::CreateFilterResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = c.replica(0).stub().CreateFilter(WithDeadline(&ctx), req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ledger.Saw(resp.log_position());
}

// "" while the NATS servers' copies of the stream agree; else `what` and
// the evidence that they differ: nats-server 2.9.10's raft defect
// (docs/CLUSTER.md, "nats-server 2.9.10: copies of the stream can
// diverge"), under which no replica of a log can stay consistent. The test
// then stops and says so (skipped, with the evidence) instead of failing on
// a loss cuckood did not make.
std::string NatsDiverged(TestCluster& c, const std::string& what) {
  const std::string differ = c.nats().CopiesDiffer("TEST");
  if (differ.empty()) return "";
  return absl::StrCat(
      what, ", and the NATS servers' copies of the stream differ: ", differ,
      ". This is nats-server 2.9.10's raft defect (a stream leader killed just after writing an "
      "entry to its own log keeps it after its restart; fixed upstream by nats-io/nats-server "
      "PR #5957), not cuckood's: see docs/CLUSTER.md");
}

// Every replica has every acknowledged key once it has applied the writers'
// last position; the writers saw no error but UNAVAILABLE. A loss found
// while the NATS servers' copies of the stream differ sets *diverged.
void CheckNoAcknowledgedWriteLost(TestCluster& c, Ledger& ledger, const std::string& when,
                                  std::string* diverged = nullptr) {
  {
    std::lock_guard<std::mutex> lock(ledger.errors_mu);
    ASSERT_TRUE(ledger.errors.empty()) << when << ": " << ledger.errors[0];
  }
  std::vector<std::string> keys;
  {
    std::lock_guard<std::mutex> lock(ledger.mu);
    keys.assign(ledger.present.begin(), ledger.present.end());
  }
  const uint64_t position = ledger.max_position.load();
  for (int i = 0; i < c.size(); ++i) {
    if (!c.replica(i).WaitCaughtUp(position)) {
      // A replica that finds the stream shorter than what it applied stops
      // applying (cuckood's own check): with diverged copies, that is the
      // same defect caught before it cost a key.
      if (diverged != nullptr) {
        *diverged = NatsDiverged(
            c, absl::StrFormat("%s: replica %d did not catch up to %d", when, i, position));
        if (!diverged->empty()) return;
      }
      FAIL() << when << ": replica " << i << " did not catch up to " << position << "\n"
             << c.replica(i).process().process().out();
    }
    std::string error;
    std::vector<std::string> missing = Missing(c.replica(i), "chaos", keys, position, &error);
    ASSERT_EQ(error, "") << when << ": replica " << i;
    {
      // The writers go on during the check: a key they started deleting
      // after `keys` was taken has left the ledger, and may be gone.
      std::lock_guard<std::mutex> lock(ledger.mu);
      std::erase_if(missing, [&](const std::string& k) { return !ledger.present.contains(k); });
    }
    if (!missing.empty() && diverged != nullptr) {
      *diverged =
          NatsDiverged(c, absl::StrFormat("%s: replica %d lost %d acknowledged keys (e.g. %s)",
                                          when, i, missing.size(), missing[0]));
      if (!diverged->empty()) return;
    }
    if (!missing.empty()) {
      std::string where;
      for (int j = 0; j < c.size(); ++j) {
        std::string e;
        absl::StrAppend(&where, " replica ", j, " misses ",
                        Missing(c.replica(j), "chaos", missing, position, &e).size(), e, ";");
      }
      const std::vector<std::string> some(missing.begin(),
                                          missing.begin() + std::min<size_t>(missing.size(), 8));
      ADD_FAILURE() << when << ": replica " << i << " lost " << missing.size()
                    << " acknowledged keys of " << keys.size() << ": " << absl::StrJoin(some, " ")
                    << ";" << where << "\nthe writers were told:\n"
                    << ledger.JournalAbout(missing[0].substr(0, missing[0].rfind('-')))
                    << "its log:\n"
                    << c.replica(i).process().process().out();
      return;
    }
  }
  std::lock_guard<std::mutex> lock(ledger.errors_mu);
  ASSERT_TRUE(ledger.errors.empty()) << when << ": " << ledger.errors[0];
}

TEST(ClusterChaosTest, KillingReplicasAtRandomLosesNoAcknowledgedWrite) {
  // Snapshots every second: restarts resume from checkpoints, not from the
  // start of the stream.
  TestCluster c(3, {"--snapshot-interval=1s"});
  Ledger ledger;
  CreateFilter(c, ledger);
  Writer w0(c, ledger, "chaos", 0), w1(c, ledger, "chaos", 1);
  std::mt19937_64 rng(42);
  for (int round = 0; round < Rounds(); ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 1300));
    const int victim = static_cast<int>(rng() % 3);
    c.replica(victim).Kill();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1000));
    c.replica(victim).Start();
    const std::string when = absl::StrFormat("round %d (replica %d killed)", round, victim);
    CheckNoAcknowledgedWriteLost(c, ledger, when);
    if (HasFatalFailure()) return;
  }
  w0.Stop();
  w1.Stop();
  CheckNoAcknowledgedWriteLost(c, ledger, "at the end");
  EXPECT_GT(ledger.acked_writes.load(), static_cast<uint64_t>(10 * Rounds()));
  std::printf("chaos (replicas): %d rounds, %llu acknowledged writes, %llu retries, %zu keys\n",
              Rounds(), static_cast<unsigned long long>(ledger.acked_writes.load()),
              static_cast<unsigned long long>(ledger.retries.load()), ledger.present.size());
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

TEST(ClusterChaosTest, KillingTheStreamLeaderLosesNoAcknowledgedWriteAndReadsGoOn) {
  TestCluster c(3);
  Ledger ledger;
  CreateFilter(c, ledger);
  // Reads throughout, on every replica, without a position: never refused.
  std::atomic<bool> stop_reads{false};
  std::atomic<uint64_t> reads{0};
  std::vector<std::string> read_errors;
  struct Joined {  // Stopped and joined however the test ends.
    std::atomic<bool>* stop;
    std::thread t;
    ~Joined() {
      *stop = true;
      if (t.joinable()) t.join();
    }
  } reader{&stop_reads, {}};
  reader.t = std::thread([&] {
    int i = 0;
    while (!stop_reads) {
      v1::LookupRequest req;
      req.set_filter("chaos");
      for (int k = 0; k < 100; ++k) req.add_keys(absl::StrCat("w0-0-", k));
      v1::LookupResponse resp;
      grpc::ClientContext ctx;
      const grpc::Status s =
          c.replica(i++ % 3).shared_stub()->Lookup(WithDeadline(&ctx), req, &resp);
      if (!s.ok()) read_errors.push_back(s.error_message());
      ++reads;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  Writer w0(c, ledger, "chaos", 0), w1(c, ledger, "chaos", 1);
  std::mt19937_64 rng(7);
  for (int round = 0; round < Rounds(); ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 700));
    const int leader = c.nats().StreamLeader("TEST");
    ASSERT_GE(leader, 0) << "round " << round << ": no stream leader";
    const uint64_t before = ledger.acked_writes.load();
    c.nats().Kill(leader);
    std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 1500));
    c.nats().Start(leader);
    // Writes go through again (a new leader was elected).
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ledger.acked_writes.load() < before + 5 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (ledger.acked_writes.load() < before + 5) {
      std::string why = absl::StrFormat(
          "round %d: writes stalled for 60 s after NATS n%d came back", round, leader);
      {
        std::lock_guard<std::mutex> lock(ledger.errors_mu);
        if (!ledger.errors.empty())
          absl::StrAppend(&why, " (a writer saw: ", ledger.errors[0], ")");
      }
      // Seen with diverged copies: a retry's acknowledgement names its
      // request id's position in the diverged copy, where no replica applied
      // it, so every replica answers UNAVAILABLE.
      if (const std::string diverged = NatsDiverged(c, why); !diverged.empty()) {
        GTEST_SKIP() << diverged;
      }
      // What the failure needs for a diagnosis: NATS's view, and each
      // replica's last words (why it refused the writes).
      absl::StrAppend(&why, "; the NATS copies agree; stream leader now n",
                      c.nats().StreamLeader("TEST"));
      for (int i = 0; i < c.size(); ++i) {
        absl::StrAppend(&why, "\nreplica ", i, "'s log ends:\n",
                        Tail(c.replica(i).process().process().out(), 3000));
      }
      FAIL() << why;
    }
    std::string diverged;
    CheckNoAcknowledgedWriteLost(
        c, ledger, absl::StrFormat("round %d (NATS n%d killed)", round, leader), &diverged);
    if (!diverged.empty()) GTEST_SKIP() << diverged;
    if (HasFatalFailure()) break;
  }
  w0.Stop();
  w1.Stop();
  stop_reads = true;
  reader.t.join();
  EXPECT_TRUE(read_errors.empty())
      << read_errors.size() << " reads failed, e.g. " << read_errors[0];
  EXPECT_GT(reads.load(), 100u);
  std::string diverged;
  CheckNoAcknowledgedWriteLost(c, ledger, "at the end", &diverged);
  if (!diverged.empty()) GTEST_SKIP() << diverged;
  // A divergence can also cost a write the ledger does not follow (a
  // delete) or apply one twice: then the replicas' tables differ.
  if (diverged = NatsDiverged(c, "no acknowledged insert was lost"); !diverged.empty()) {
    GTEST_SKIP() << diverged;
  }
  std::printf(
      "chaos (NATS leader): %d rounds, %llu acknowledged writes, %llu retries, %llu reads\n",
      Rounds(), static_cast<unsigned long long>(ledger.acked_writes.load()),
      static_cast<unsigned long long>(ledger.retries.load()),
      static_cast<unsigned long long>(reads.load()));
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

}  // namespace
}  // namespace cuckoo::testing
