// The cluster's promises under failure, on real processes (a 3-node
// nats-server JetStream cluster, 3 cuckood replicas): writers insert and
// delete through every replica with request ids, retrying UNAVAILABLE on
// the next replica, while
//   - a random replica is killed -9 at a random moment and restarted, or
//   - the NATS server leading the stream is killed -9 and restarted;
// for at least 10 rounds each, and a checker looks up acknowledged keys on
// every replica throughout. The promises, as a user sees them:
//   - no replica that answers (serves) ever answers "absent" for a key
//     acknowledged INSERTED and not deleted (replicas that are out of
//     service answer UNAVAILABLE, and the checker moves on: that is allowed);
//   - after every round, every replica is ready again and holds every such
//     key once it has applied the writers' last position;
//   - the only errors a writer saw were UNAVAILABLE (then retried);
//   - at the end, once idle, every replica's tables are bit-identical.
// A NATS server whose copy of the stream diverges (nats-server 2.9.10's
// raft defect, docs/CLUSTER.md) is not an excuse: the replicas' end-to-end
// check of the log must catch it (the replica stops serving and heals). The
// test prints the divergences the replicas caught and whether the NATS
// copies differed.
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

// CUCKOO_CHAOS_SEED varies the kills' timing between soak runs.
uint64_t ChaosSeed(uint64_t fallback) {
  const char* s = std::getenv("CUCKOO_CHAOS_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : fallback;
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

// What a replica says of its check of the log, for failure messages.
std::string CheckState(Replica& r) {
  grpc::ClientContext ctx;
  v1::GetServerInfoResponse info;
  const grpc::Status s =
      r.shared_stub()->GetServerInfo(WithDeadline(&ctx, std::chrono::seconds(5)), {}, &info);
  if (!s.ok()) return absl::StrCat("GetServerInfo: ", s.error_message());
  return absl::StrFormat(
      "log_check %s, applied %d, verified %d, consumer from %d%s%s", info.cluster().log_check(),
      info.applied_log_position(), info.cluster().verified_log_position(),
      info.cluster().consumer_from_position(),
      info.cluster().problem().empty() ? "" : ", problem: ", info.cluster().problem());
}

std::string NatsCopies(TestCluster& c) {
  const std::string differ = c.nats().CopiesDiffer("TEST");
  return differ.empty() ? "agree" : absl::StrCat("differ (", differ, ")");
}

// Every replica is ready again (it has applied the writers' last position
// and serves), within `budget` (a replica that caught a divergence heals
// first), and holds every acknowledged key; the writers saw no error but
// UNAVAILABLE.
void CheckNoAcknowledgedWriteLost(TestCluster& c, Ledger& ledger, const std::string& when,
                                  std::chrono::seconds budget = std::chrono::seconds(120)) {
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
    if (!c.replica(i).WaitCaughtUp(position, budget)) {
      FAIL() << when << ": replica " << i << " was not ready at position " << position << " within "
             << budget.count() << " s: " << CheckState(c.replica(i))
             << "; the NATS copies: " << NatsCopies(c) << "\n"
             << Tail(c.replica(i).process().process().out(), 6000);
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
    if (!missing.empty()) {
      std::string where;
      for (int j = 0; j < c.size(); ++j) {
        std::string e;
        absl::StrAppend(&where, " replica ", j, " misses ",
                        Missing(c.replica(j), "chaos", missing, position, &e).size(), e, " (",
                        CheckState(c.replica(j)), ");");
      }
      const std::vector<std::string> some(missing.begin(),
                                          missing.begin() + std::min<size_t>(missing.size(), 8));
      ADD_FAILURE() << when << ": replica " << i << ", ready, lost " << missing.size()
                    << " acknowledged keys of " << keys.size() << ": " << absl::StrJoin(some, " ")
                    << ";" << where << " the NATS copies: " << NatsCopies(c)
                    << "\nthe writers were told:\n"
                    << ledger.JournalAbout(missing[0].substr(0, missing[0].rfind('-')))
                    << "its log:\n"
                    << c.replica(i).process().process().out();
      return;
    }
  }
  std::lock_guard<std::mutex> lock(ledger.errors_mu);
  ASSERT_TRUE(ledger.errors.empty()) << when << ": " << ledger.errors[0];
}

// Looks up acknowledged keys on every replica in turn, at the writers'
// position, until destroyed: an answer "absent" from a replica that serves
// is the failure this test exists for; UNAVAILABLE (out of service) is not.
class Checker {
 public:
  Checker(TestCluster& c, Ledger& ledger) : c_(c), ledger_(ledger) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Checker() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t answered() const { return answered_.load(); }
  uint64_t refused() const { return refused_.load(); }
  std::vector<std::string> violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }

 private:
  void Run() {
    std::mt19937_64 rng(99);
    std::vector<std::string> sample;
    uint64_t position = 0;
    auto last_copy = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    int i = 0;
    while (!stop_) {
      if (std::chrono::steady_clock::now() - last_copy > std::chrono::milliseconds(200)) {
        std::lock_guard<std::mutex> lock(ledger_.mu);
        sample.assign(ledger_.present.begin(), ledger_.present.end());
        // Every key in the set was acknowledged at or before this.
        position = ledger_.max_position.load();
        last_copy = std::chrono::steady_clock::now();
      }
      if (sample.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      const int replica = i++ % c_.size();
      v1::LookupRequest req;
      req.set_filter("chaos");
      req.set_min_log_position(position);
      std::vector<std::string> keys;
      for (int k = 0; k < 50; ++k) keys.push_back(sample[rng() % sample.size()]);
      for (const std::string& k : keys) req.add_keys(k);
      v1::LookupResponse resp;
      grpc::ClientContext ctx;
      const grpc::Status s =
          c_.replica(replica).shared_stub()->Lookup(WithDeadline(&ctx), req, &resp);
      if (!s.ok()) {
        // Out of service, restarting, or cut off: another replica answers.
        ++refused_;
        continue;
      }
      ++answered_;
      for (int k = 0; k < resp.present_size(); ++k) {
        if (resp.present(k)) continue;
        {
          std::lock_guard<std::mutex> lock(ledger_.mu);
          if (!ledger_.present.contains(keys[k])) continue;  // Deleted since.
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (violations_.size() < 20) {
          violations_.push_back(absl::StrFormat(
              "%s: replica %d answered \"absent\" for %s, acknowledged by position %d (its "
              "check now: %s)",
              Now(), replica, keys[k], position, CheckState(c_.replica(replica))));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  TestCluster& c_;
  Ledger& ledger_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> answered_{0}, refused_{0};
  std::mutex mu_;
  std::vector<std::string> violations_;
  std::thread thread_;
};

// The divergences the replicas caught (their counters: since their last
// start).
uint64_t DivergencesCaught(TestCluster& c) {
  uint64_t n = 0;
  for (int i = 0; i < c.size(); ++i) {
    grpc::ClientContext ctx;
    v1::GetServerInfoResponse info;
    if (c.replica(i).shared_stub()->GetServerInfo(WithDeadline(&ctx), {}, &info).ok()) {
      n += info.cluster().divergences();
    }
  }
  return n;
}

// How many times the replicas' logs say `what`.
uint64_t ReplicaLogCount(TestCluster& c, const std::string& what) {
  uint64_t n = 0;
  for (int i = 0; i < c.size(); ++i) {
    const std::string out = c.replica(i).process().process().out();
    for (size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
  }
  return n;
}

void ExpectNoViolation(Checker& checker) {
  const std::vector<std::string> v = checker.violations();
  EXPECT_TRUE(v.empty()) << v.size() << " answers \"absent\" for acknowledged keys from serving "
                         << "replicas:\n"
                         << absl::StrJoin(v, "\n");
  EXPECT_GT(checker.answered(), 100u);
}

TEST(ClusterChaosTest, KillingReplicasAtRandomLosesNoAcknowledgedWrite) {
  // Snapshots every second: restarts resume from checkpoints, not from the
  // start of the stream.
  TestCluster c(3, {"--snapshot-interval=1s"});
  Ledger ledger;
  CreateFilter(c, ledger);
  Writer w0(c, ledger, "chaos", 0), w1(c, ledger, "chaos", 1);
  Checker checker(c, ledger);
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
  checker.Stop();
  ExpectNoViolation(checker);
  EXPECT_GT(ledger.acked_writes.load(), static_cast<uint64_t>(10 * Rounds()));
  std::printf(
      "chaos (replicas): %d rounds, %llu acknowledged writes, %llu retries, %zu keys, %llu "
      "lookups answered, %llu refused\n",
      Rounds(), static_cast<unsigned long long>(ledger.acked_writes.load()),
      static_cast<unsigned long long>(ledger.retries.load()), ledger.present.size(),
      static_cast<unsigned long long>(checker.answered()),
      static_cast<unsigned long long>(checker.refused()));
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

TEST(ClusterChaosTest, KillingTheStreamLeaderLosesNoAcknowledgedWriteAndReadsGoOn) {
  TestCluster c(3);
  Ledger ledger;
  CreateFilter(c, ledger);
  Writer w0(c, ledger, "chaos", 0), w1(c, ledger, "chaos", 1);
  Checker checker(c, ledger);
  std::mt19937_64 rng(ChaosSeed(7));
  int stalls = 0;
  for (int round = 0; round < Rounds(); ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng() % 700));
    const int leader = c.nats().StreamLeader("TEST");
    ASSERT_GE(leader, 0) << "round " << round << ": no stream leader";
    const uint64_t before = ledger.acked_writes.load();
    const uint64_t answered = checker.answered();
    c.nats().Kill(leader);
    std::this_thread::sleep_for(std::chrono::milliseconds(500 + rng() % 1500));
    c.nats().Start(leader);
    // Writes go through again (a new leader was elected), and reads are
    // answered by some replica.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((ledger.acked_writes.load() < before + 5 || checker.answered() <= answered) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_GT(checker.answered(), answered)
        << "round " << round << ": no replica answered a lookup for 60 s after NATS n" << leader
        << " came back";
    if (ledger.acked_writes.load() < before + 5) {
      std::string why = absl::StrFormat(
          "round %d: writes stalled for 60 s after NATS n%d came back", round, leader);
      {
        std::lock_guard<std::mutex> lock(ledger.errors_mu);
        if (!ledger.errors.empty())
          absl::StrAppend(&why, " (a writer saw: ", ledger.errors[0], ")");
      }
      // Seen with diverged copies: while the NATS server with the differing
      // copy leads, its acknowledgements name positions of its own copy,
      // where the replicas (which caught and left that copy) applied
      // other entries; the writes are refused (UNAVAILABLE, never a wrong
      // answer) until another server leads. The next kill moves it.
      if (const std::string copies = NatsCopies(c); copies != "agree") {
        std::printf("chaos (NATS leader): %s; the NATS copies %s\n", why.c_str(), copies.c_str());
        ++stalls;
        continue;
      }
      absl::StrAppend(&why, "; the NATS copies agree; stream leader now n",
                      c.nats().StreamLeader("TEST"));
      for (int i = 0; i < c.size(); ++i) {
        absl::StrAppend(&why, "\nreplica ", i, " (", CheckState(c.replica(i)), ")'s log ends:\n",
                        Tail(c.replica(i).process().process().out(), 3000));
      }
      FAIL() << why;
    }
    CheckNoAcknowledgedWriteLost(c, ledger,
                                 absl::StrFormat("round %d (NATS n%d killed)", round, leader));
    if (HasFatalFailure()) break;
  }
  w0.Stop();
  w1.Stop();
  CheckNoAcknowledgedWriteLost(c, ledger, "at the end");
  checker.Stop();
  ExpectNoViolation(checker);
  // The continuity check (docs/CLUSTER.md): consumers lost with their NATS
  // server were made again by the replicas, each checked; one that
  // delivered another entry than the replica applied was refused.
  const uint64_t rechecked = ReplicaLogCount(c, "making one that checks the copy it reads first");
  const uint64_t discontinuous = ReplicaLogCount(c, "numbers the entries differently");
  std::printf(
      "chaos (NATS leader): %d rounds, %llu acknowledged writes, %llu retries, %llu lookups "
      "answered, %llu refused; divergences caught by the replicas: %llu; write stalls: %d; "
      "consumers checked after a NATS loss: %llu, refused for another numbering: %llu; the NATS "
      "copies %s\n",
      Rounds(), static_cast<unsigned long long>(ledger.acked_writes.load()),
      static_cast<unsigned long long>(ledger.retries.load()),
      static_cast<unsigned long long>(checker.answered()),
      static_cast<unsigned long long>(checker.refused()),
      static_cast<unsigned long long>(DivergencesCaught(c)), stalls,
      static_cast<unsigned long long>(rechecked), static_cast<unsigned long long>(discontinuous),
      NatsCopies(c).c_str());
  // Over several kills of the server leading the stream, some replica's
  // consumer sat on it (placement is random among the stream's servers).
  if (Rounds() >= 5) {
    EXPECT_GT(rechecked, 0u);
  }
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

}  // namespace
}  // namespace cuckoo::testing
