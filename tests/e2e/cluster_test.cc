// Cluster mode on real processes: a 3-node nats-server JetStream cluster and
// cuckood replicas started with --nats. Writes through any replica are
// applied by every replica, identically; reads wait for min_log_position;
// a request id is applied once whichever replica a retry reaches; with NATS
// gone, writes fail UNAVAILABLE and reads go on; a new, empty replica
// rebuilds itself from the stream. (The kill -9 loops are in
// cluster_chaos_test.cc.)
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/snapshot.h"
#include "tests/e2e/cluster_harness.h"
#include "tests/util/keys.h"

namespace cuckoo::testing {
namespace {

v1::CreateFilterResponse Create(Replica& r, const std::string& name, uint64_t capacity) {
  v1::CreateFilterRequest req;
  req.set_name(name);
  req.set_capacity(capacity);
  v1::CreateFilterResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = r.stub().CreateFilter(WithDeadline(&ctx), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

v1::InsertResponse Insert(Replica& r, const std::string& filter,
                          const std::vector<std::string>& keys, const std::string& request_id = "",
                          uint64_t min_position = 0) {
  v1::InsertRequest req;
  req.set_filter(filter);
  req.set_request_id(request_id);
  req.set_min_log_position(min_position);
  for (const std::string& k : keys) req.add_keys(k);
  v1::InsertResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = r.stub().Insert(WithDeadline(&ctx), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return resp;
}

grpc::Status Delete(Replica& r, const std::string& filter, const std::vector<std::string>& keys,
                    const std::string& request_id, v1::DeleteResponse* resp) {
  v1::DeleteRequest req;
  req.set_filter(filter);
  req.set_request_id(request_id);
  for (const std::string& k : keys) req.add_keys(k);
  grpc::ClientContext ctx;
  return r.stub().Delete(WithDeadline(&ctx), req, resp);
}

std::vector<uint32_t> Count(Replica& r, const std::string& filter,
                            const std::vector<std::string>& keys, uint64_t min_position) {
  v1::CountRequest req;
  req.set_filter(filter);
  req.set_min_log_position(min_position);
  for (const std::string& k : keys) req.add_keys(k);
  v1::CountResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = r.stub().Count(WithDeadline(&ctx), req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_code() << " " << s.error_message();
  return {resp.counts().begin(), resp.counts().end()};
}

TEST(ClusterTest, WritesThroughAnyReplicaAreAppliedByEveryReplicaIdentically) {
  TestCluster c(3);
  const v1::CreateFilterResponse created = Create(c.replica(0), "users", 50'000);
  ASSERT_TRUE(created.created());
  ASSERT_GT(created.log_position(), 0u);
  // Through replica 1, which may not have applied the creation yet: the
  // position makes it wait.
  const std::vector<std::string> keys =
      NumberedKeys("user-", 60'000);  // Past full: FULL answers too.
  const v1::InsertResponse a = Insert(c.replica(1), "users", {keys.begin(), keys.begin() + 30'000},
                                      "", created.log_position());
  const v1::InsertResponse b =
      Insert(c.replica(2), "users", {keys.begin() + 30'000, keys.end()}, "", a.log_position());
  EXPECT_GT(b.log_position(), a.log_position());
  EXPECT_EQ(a.inserted() + b.inserted() + b.full(), 60'000u);
  EXPECT_GT(b.full(), 0u) << "the filter was meant to fill up";
  // Every replica answers the same, once it has applied b's position.
  for (int i = 0; i < 3; ++i) {
    std::string error;
    std::vector<std::string> inserted;
    for (int k = 0; k < b.results_size(); ++k) {
      if (b.results(k) == v1::INSERT_RESULT_INSERTED) inserted.push_back(keys[30'000 + k]);
    }
    EXPECT_TRUE(Missing(c.replica(i), "users", inserted, b.log_position(), &error).empty()) << i;
    EXPECT_EQ(error, "");
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(b.log_position())) << i;
  ExpectIdenticalReplicas(c, {0, 1, 2});
  // GetServerInfo and /metrics tell the mode and the position.
  grpc::ClientContext ctx;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(c.replica(2).stub().GetServerInfo(WithDeadline(&ctx), {}, &info).ok());
  EXPECT_EQ(info.mode(), "cluster");
  EXPECT_EQ(info.cluster().replica_id(), "r2");
  EXPECT_EQ(info.cluster().stream(), "TEST");
  EXPECT_EQ(info.cluster().stream_replicas(), 3u);
  EXPECT_EQ(info.cluster().nats_status(), "connected");
  EXPECT_GE(info.applied_log_position(), b.log_position());
  EXPECT_NE(c.replica(2).Metrics().find("cuckood_cluster_applied_position"), std::string::npos);
  // The digest reports' bucket is stored in files, as the stream is: a
  // memory-storage copy comes back empty from its NATS server's restart
  // (docs/CLUSTER.md, "Checking the log end to end").
  EXPECT_EQ(c.nats().StreamStorage("KV_TEST_digests"), "file");
  EXPECT_EQ(c.nats().StreamStorage("TEST"), "file");
}

TEST(ClusterTest, ARequestIdIsAppliedOnceWhicheverReplicaTheRetryReaches) {
  TestCluster c(3);
  const uint64_t p = Create(c.replica(0), "ids", 10'000).log_position();
  // Two copies of each key.
  const std::vector<std::string> keys = NumberedKeys("k", 50);
  Insert(c.replica(0), "ids", keys, "", p);
  const uint64_t twice = Insert(c.replica(0), "ids", keys).log_position();
  // The same Delete three times, through three replicas: one copy goes.
  v1::DeleteResponse first, second, third;
  ASSERT_TRUE(Delete(c.replica(0), "ids", keys, "del-1", &first).ok());
  ASSERT_TRUE(Delete(c.replica(1), "ids", keys, "del-1", &second).ok());
  ASSERT_TRUE(Delete(c.replica(2), "ids", keys, "del-1", &third).ok());
  EXPECT_EQ(first.deleted(), 50u);
  EXPECT_EQ(second.deleted(), 50u);                        // The first one's results...
  EXPECT_EQ(second.log_position(), first.log_position());  // ...and position.
  EXPECT_EQ(third.log_position(), first.log_position());
  EXPECT_GT(first.log_position(), twice);
  for (int i = 0; i < 3; ++i) {
    for (uint32_t n : Count(c.replica(i), "ids", keys, first.log_position())) {
      EXPECT_EQ(n, 1u) << "replica " << i;
    }
  }
  // Another id, or the same id with other keys, is another request.
  v1::DeleteResponse again;
  ASSERT_TRUE(Delete(c.replica(1), "ids", keys, "del-2", &again).ok());
  EXPECT_EQ(again.deleted(), 50u);
  v1::DeleteResponse other;
  ASSERT_TRUE(Delete(c.replica(2), "ids", {"not-there"}, "del-1", &other).ok());
  EXPECT_EQ(other.not_found(), 1u);
  for (uint32_t n : Count(c.replica(0), "ids", keys, again.log_position())) EXPECT_EQ(n, 0u);
  // Concurrent repeats on one replica share the first's answer too.
  std::vector<std::thread> threads;
  std::vector<v1::InsertResponse> answers(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { answers[t] = Insert(c.replica(0), "ids", {"x", "y"}, "ins-x"); });
  }
  for (std::thread& t : threads) t.join();
  for (const v1::InsertResponse& a : answers) {
    EXPECT_EQ(a.log_position(), answers[0].log_position());
    EXPECT_EQ(a.inserted(), 2u);
  }
  for (uint32_t n : Count(c.replica(1), "ids", {"x", "y"}, answers[0].log_position())) {
    EXPECT_EQ(n, 1u);
  }
}

TEST(ClusterTest, FilterCreatedAndDroppedThroughTheLogIsGoneEverywhereAndItsNameReusable) {
  TestCluster c(2);
  const uint64_t p = Create(c.replica(0), "tmp", 1000).log_position();
  Insert(c.replica(1), "tmp", NumberedKeys("a", 10), "", p);
  v1::DropFilterRequest drop;
  drop.set_name("tmp");
  v1::DropFilterResponse dropped;
  grpc::ClientContext ctx;
  ASSERT_TRUE(c.replica(1).stub().DropFilter(WithDeadline(&ctx), drop, &dropped).ok());
  EXPECT_GT(dropped.freed_bytes(), 0u);
  v1::GetFilterRequest get;
  get.set_name("tmp");
  get.set_min_log_position(dropped.log_position());
  v1::GetFilterResponse info;
  grpc::ClientContext ctx2;
  EXPECT_EQ(c.replica(0).stub().GetFilter(WithDeadline(&ctx2), get, &info).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Created again, smaller: a new filter, empty, on both.
  const v1::CreateFilterResponse again = Create(c.replica(1), "tmp", 500);
  EXPECT_TRUE(again.created());
  EXPECT_EQ(again.filter().items(), 0u);
  EXPECT_EQ(Count(c.replica(0), "tmp", {"a1"}, again.log_position())[0], 0u);
  // Creating it again without if_not_exists is ALREADY_EXISTS; with it, the
  // same filter.
  v1::CreateFilterRequest req;
  req.set_name("tmp");
  req.set_capacity(500);
  v1::CreateFilterResponse resp;
  grpc::ClientContext ctx3;
  EXPECT_EQ(c.replica(0).stub().CreateFilter(WithDeadline(&ctx3), req, &resp).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  req.set_if_not_exists(true);
  grpc::ClientContext ctx4;
  ASSERT_TRUE(c.replica(0).stub().CreateFilter(WithDeadline(&ctx4), req, &resp).ok());
  EXPECT_FALSE(resp.created());
  ExpectIdenticalReplicas(c, {0, 1});
}

// Filter expiry through the log: an expiry entry naming the filter's id,
// and at its time one drop entry (every replica's timer may publish one:
// the first applies, the others name an id that is gone), so every replica
// drops the same filter at the same position and the log digests agree.
TEST(ClusterTest, AnExpiredFilterIsDroppedByOneLoggedDropAtTheSamePositionEverywhere) {
  TestCluster c(3);
  const uint64_t p = Create(c.replica(0), "daily", 1000).log_position();
  Create(c.replica(1), "kept", 1000);
  Insert(c.replica(1), "daily", NumberedKeys("a", 10), "", p);
  v1::SetFilterExpiryRequest req;
  req.set_name("daily");
  const int64_t at = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count() +
                     700;
  req.mutable_expire_at()->set_seconds(at / 1000);
  req.mutable_expire_at()->set_nanos(static_cast<int32_t>(at % 1000) * 1'000'000);
  v1::SetFilterExpiryResponse set;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = c.replica(2).stub().SetFilterExpiry(WithDeadline(&ctx), req, &set);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_TRUE(set.changed());
  // Every replica has the expiry once it applied the entry.
  for (int i = 0; i < 3; ++i) {
    v1::GetFilterRequest get;
    get.set_name("daily");
    get.set_min_log_position(set.log_position());
    v1::GetFilterResponse info;
    grpc::ClientContext ctx;
    ASSERT_TRUE(c.replica(i).stub().GetFilter(WithDeadline(&ctx), get, &info).ok()) << i;
    EXPECT_EQ(
        info.filter().expire_at().seconds() * 1000 + info.filter().expire_at().nanos() / 1'000'000,
        at)
        << i;
  }
  // Gone everywhere: dropped through the log.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const uint64_t end = c.replica(0).Applied();
  uint64_t digest = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.replica(i).WaitCaughtUp(end)) << i;
    v1::GetFilterRequest get;
    get.set_name("daily");
    v1::GetFilterResponse info;
    grpc::ClientContext ctx;
    EXPECT_EQ(c.replica(i).stub().GetFilter(WithDeadline(&ctx), get, &info).error_code(),
              grpc::StatusCode::NOT_FOUND)
        << i;
    // The drop and nothing after it: every replica at the same position
    // with the same digest.
    v1::GetServerInfoResponse server;
    grpc::ClientContext ctx2;
    ASSERT_TRUE(c.replica(i).stub().GetServerInfo(WithDeadline(&ctx2), {}, &server).ok());
    EXPECT_EQ(server.applied_log_position(), end) << i;
    EXPECT_EQ(server.filters(), 1u) << i << ": the expired filter is still held";
    ASSERT_TRUE(server.cluster().log_digest_known()) << i;
    EXPECT_EQ(server.cluster().log_digest_position(), end) << i;
    if (i == 0) digest = server.cluster().log_digest();
    EXPECT_EQ(server.cluster().log_digest(), digest) << i;
  }
  // One create, one create, one insert, one expiry, then the drop(s): the
  // first applied, any later one (another replica's timer) naming a filter
  // gone (applied as nothing).
  EXPECT_GE(end, set.log_position() + 1);
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

grpc::Status Rename(Replica& r, const std::string& from, const std::string& to, bool replace,
                    v1::RenameFilterResponse* resp) {
  v1::RenameFilterRequest req;
  req.set_name(from);
  req.set_new_name(to);
  req.set_replace(replace);
  grpc::ClientContext ctx;
  return r.stub().RenameFilter(WithDeadline(&ctx), req, resp);
}

// A rename is one log entry: every replica renames, and drops the filter it
// replaces, at the same position, so they hold the same filters under the
// same names with identical tables, and their log digests agree at that
// position; a restarted replica replays it from its checkpoint to the same
// state.
TEST(ClusterTest, RenamesThroughAnyReplicaAreAppliedByEveryReplicaAtTheSamePosition) {
  TestCluster c(3, {"--snapshot-interval=1s"});
  uint64_t p = Create(c.replica(0), "seen:today", 10'000).log_position();
  Create(c.replica(1), "seen:yesterday", 10'000);
  const std::vector<std::string> today = NumberedKeys("t", 500);
  p = Insert(c.replica(2), "seen:today", today, "", p).log_position();
  p = Insert(c.replica(0), "seen:yesterday", {"old-day"}, "", p).log_position();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  v1::RenameFilterResponse r;
  // RENAMENX onto a taken name: refused, nothing changes.
  EXPECT_EQ(Rename(c.replica(1), "seen:today", "seen:yesterday", false, &r).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Rename(c.replica(1), "seen:nope", "x", true, &r).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // RENAME through replica 1, replacing.
  ASSERT_TRUE(Rename(c.replica(1), "seen:today", "seen:yesterday", true, &r).ok());
  EXPECT_TRUE(r.replaced());
  EXPECT_GT(r.replaced_freed_bytes(), 0u);
  p = r.log_position();
  // The old name is free again: rotation creates it through replica 2.
  p = Create(c.replica(2), "seen:today", 10'000).log_position();
  p = Insert(c.replica(0), "seen:today", {"new-day"}, "", p).log_position();
  uint64_t digest = 0, at = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
    std::string error;
    EXPECT_TRUE(Missing(c.replica(i), "seen:yesterday", today, p, &error).empty()) << i << error;
    EXPECT_EQ(Count(c.replica(i), "seen:yesterday", {"old-day", "new-day"}, p),
              (std::vector<uint32_t>{0, 0}))
        << i;
    EXPECT_EQ(Count(c.replica(i), "seen:today", {"new-day", today[0]}, p),
              (std::vector<uint32_t>{1, 0}))
        << i;
    grpc::ClientContext ctx;
    v1::GetServerInfoResponse info;
    ASSERT_TRUE(c.replica(i).stub().GetServerInfo(WithDeadline(&ctx), {}, &info).ok());
    ASSERT_TRUE(info.cluster().log_digest_known()) << i;
    ASSERT_EQ(info.cluster().log_digest_position(), p) << i;
    if (i == 0) {
      digest = info.cluster().log_digest();
      at = info.cluster().log_digest_position();
    }
    EXPECT_EQ(info.cluster().log_digest(), digest) << "replica " << i << " at " << at;
  }
  ExpectIdenticalReplicas(c, {0, 1, 2});
  // A replica restarted replays from its checkpoint to the same state.
  ASSERT_EQ(c.replica(2).Stop(), 0);
  c.replica(2).Start();
  ASSERT_TRUE(c.replica(2).WaitCaughtUp(p));
  std::string error;
  EXPECT_TRUE(Missing(c.replica(2), "seen:yesterday", today, p, &error).empty()) << error;
  EXPECT_EQ(Count(c.replica(2), "seen:today", {"new-day"}, p)[0], 1u);
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

TEST(ClusterTest, ReadForAPositionNotYetReachableFailsUnavailableAfterTheWait) {
  TestCluster c(1, {"--max-read-wait=300ms"});
  const uint64_t p = Create(c.replica(0), "f", 1000).log_position();
  v1::LookupRequest req;
  req.set_filter("f");
  req.add_keys("a");
  req.set_min_log_position(p + 1000);
  v1::LookupResponse resp;
  grpc::ClientContext ctx;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status s = c.replica(0).stub().Lookup(WithDeadline(&ctx), req, &resp);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("min_log_position"), std::string::npos) << s.error_message();
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(ClusterTest, WithoutNatsWritesFailUnavailableAndReadsAreStillServed) {
  TestCluster c(2);
  const uint64_t p = Create(c.replica(0), "f", 10'000).log_position();
  const std::vector<std::string> keys = NumberedKeys("k", 100);
  const uint64_t q = Insert(c.replica(0), "f", keys, "", p).log_position();
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(q));
  for (int i = 0; i < 3; ++i) c.nats().Kill(i);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::InsertRequest ins;
  ins.set_filter("f");
  ins.add_keys("new");
  ins.set_request_id("during-outage");
  v1::InsertResponse ins_resp;
  grpc::ClientContext ctx;
  const grpc::Status s = c.replica(1).stub().Insert(WithDeadline(&ctx), ins, &ins_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  std::string error;
  EXPECT_TRUE(Missing(c.replica(1), "f", keys, 0, &error).empty());
  EXPECT_EQ(error, "");
  // Still ready: it serves what it has; the metrics say NATS is away.
  EXPECT_EQ(c.replica(1).ReadyzStatus(), 200);
  EXPECT_NE(c.replica(1).Metrics().find("cuckood_cluster_nats_connected{state=\"reconnecting\"} 0"),
            std::string::npos)
      << c.replica(1).Metrics();
  // NATS back (the same store): the retry goes through, once.
  for (int i = 0; i < 3; ++i) c.nats().Start(i);
  grpc::Status retried;
  for (int attempt = 0; attempt < 300; ++attempt) {
    grpc::ClientContext retry_ctx;
    retried = c.replica(1).stub().Insert(WithDeadline(&retry_ctx), ins, &ins_resp);
    if (retried.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(retried.ok()) << retried.error_message();
  EXPECT_EQ(Count(c.replica(0), "f", {"new"}, ins_resp.log_position())[0], 1u);
  ASSERT_TRUE(c.replica(0).WaitCaughtUp(ins_resp.log_position()));
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(ins_resp.log_position()));
}

TEST(ClusterTest, NewEmptyReplicaBootstrapsFromAPeerAndResumesFromItsCheckpoint) {
  TestCluster c(2, {"--snapshot-interval=1s"});
  uint64_t p = Create(c.replica(0), "a", 20'000).log_position();
  p = Create(c.replica(1), "b", 20'000).log_position();
  p = Insert(c.replica(0), "a", NumberedKeys("x", 15'000), "", p).log_position();
  p = Insert(c.replica(1), "b", NumberedKeys("y", 15'000), "", p).log_position();
  v1::DeleteResponse del;
  ASSERT_TRUE(Delete(c.replica(0), "a", NumberedKeys("x", 100), "d", &del).ok());
  p = del.log_position();
  Replica& fresh = c.AddReplica();
  ASSERT_TRUE(fresh.WaitCaughtUp(p));
  ASSERT_TRUE(c.replica(0).WaitCaughtUp(p));
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(p));
  ExpectIdenticalReplicas(c, {0, 1, 2});
  // It copied a peer (the stream still held everything, but a copy beats
  // replaying a long stream).
  EXPECT_NE(fresh.process().process().out().find("cluster: bootstrapped from peer r"),
            std::string::npos)
      << fresh.process().process().out();
  std::string error;
  EXPECT_TRUE(Missing(fresh, "b", NumberedKeys("y", 15'000), p, &error).empty()) << error;
  // Restarted, it resumes from its checkpoint, not from the beginning.
  ASSERT_EQ(fresh.Stop(), 0);
  EXPECT_NE(ReadFile(fresh.data_dir() + "/CHECKPOINT").find("resume_from"), std::string::npos);
  fresh.Start();
  ASSERT_TRUE(fresh.WaitCaughtUp(p));
  EXPECT_NE(fresh.process().process().out().find(absl::StrCat("applying from log position")),
            std::string::npos);
  EXPECT_EQ(fresh.process().process().out().find("applying from log position 1\n"),
            std::string::npos)
      << fresh.process().process().out();
  ExpectIdenticalReplicas(c, {0, 2});
}

// The end-to-end check of the log (docs/CLUSTER.md): two replicas whose
// digests disagree have no majority, so neither serves (reads and writes
// UNAVAILABLE naming the position, /readyz 503, the metric); a third
// replica, rebuilt from the stream, agrees with one of them: that one
// serves again, and the other, diverged, heals by copying the majority.
// The divergence is made by hand in the checkpoint's digest: to the check,
// the same as a replica that applied another copy of the log.
TEST(ClusterTest, ReplicasWhoseLogsDisagreeServeNothingUntilAMajorityDecidesAndTheMinorityHeals) {
  TestCluster c(2, {"--snapshot-interval=1s"});
  uint64_t p = Create(c.replica(0), "f", 20'000).log_position();
  const std::vector<std::string> keys = NumberedKeys("k", 5'000);
  p = Insert(c.replica(0), "f", keys, "", p).log_position();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  ASSERT_EQ(c.replica(1).Stop(), 0);
  const std::string checkpoint_path = c.replica(1).data_dir() + "/CHECKPOINT";
  std::string checkpoint = ReadFile(checkpoint_path);
  EXPECT_NE(checkpoint.find("cuckood cluster checkpoint v2\n"), std::string::npos) << checkpoint;
  const size_t at = checkpoint.find("digest ");
  ASSERT_NE(at, std::string::npos) << checkpoint;
  const size_t hex = checkpoint.find(' ', at + 7) + 1;
  checkpoint[hex] = checkpoint[hex] == '0' ? '1' : '0';
  WriteFile(checkpoint_path, checkpoint);
  c.replica(1).Start();

  auto lookup = [&](int i) {
    v1::LookupRequest req;
    req.set_filter("f");
    req.add_keys(keys[0]);
    v1::LookupResponse resp;
    grpc::ClientContext ctx;
    return c.replica(i).stub().Lookup(WithDeadline(&ctx), req, &resp);
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  grpc::Status s0, s1;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s0 = lookup(0);
    s1 = lookup(1);
  } while ((s0.ok() || s1.ok()) && std::chrono::steady_clock::now() < until);
  for (const grpc::Status& s : {s0, s1}) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_NE(
        s.error_message().find(absl::StrCat("disagrees with another replica's at position ", p)),
        std::string::npos)
        << s.error_message();
    EXPECT_NE(s.error_message().find("no side is a majority"), std::string::npos);
  }
  v1::InsertRequest ins;
  ins.set_filter("f");
  ins.add_keys("refused");
  v1::InsertResponse ins_resp;
  grpc::ClientContext ctx;
  EXPECT_EQ(c.replica(0).stub().Insert(WithDeadline(&ctx), ins, &ins_resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(c.replica(i).ReadyzStatus(), 503);
    EXPECT_NE(c.replica(i).Metrics().find("cuckood_cluster_log_check{state=\"no majority\"} 1"),
              std::string::npos)
        << c.replica(i).Metrics();
  }

  // A third replica, from an empty directory: no peer serves, so it
  // replays the stream, and agrees with replica 0.
  Replica& third = c.AddReplica();
  ASSERT_TRUE(third.WaitCaughtUp(p));
  ASSERT_TRUE(c.replica(0).WaitCaughtUp(p));
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(p, std::chrono::seconds(90)))
      << c.replica(1).process().process().out();
  const std::string out = c.replica(1).process().process().out();
  EXPECT_NE(out.find("differs from the majority's at position"), std::string::npos) << out;
  EXPECT_NE(out.find("cluster: bootstrapped from peer r"), std::string::npos) << out;
  grpc::ClientContext info_ctx;
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(c.replica(1).stub().GetServerInfo(WithDeadline(&info_ctx), {}, &info).ok());
  EXPECT_EQ(info.cluster().log_check(), "agreed");
  EXPECT_EQ(info.cluster().divergences(), 2u);  // No majority, then diverged.
  EXPECT_EQ(info.cluster().digest_replicas(), 3u);
  // Restarted before anything else is written, it resumes from the
  // checkpoint its copy wrote (the copy's positions and digest, not those
  // of the copy of the log it dropped): agreed at once, nothing copied
  // again.
  ASSERT_EQ(c.replica(1).Stop(), 0);
  c.replica(1).Start();
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(p));
  const std::string again = c.replica(1).process().process().out();
  EXPECT_EQ(again.find("bootstrap"), std::string::npos) << again;
  EXPECT_EQ(again.find("differs from the majority's"), std::string::npos) << again;
  // Writes and reads everywhere again; nothing missing, tables identical.
  p = Insert(c.replica(1), "f", NumberedKeys("after", 1'000), "", p).log_position();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
    std::string error;
    EXPECT_TRUE(Missing(c.replica(i), "f", keys, p, &error).empty()) << i << error;
  }
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

// Data directories of a cuckood before the end-to-end check (checkpoints of
// version 1, no digest): replicas upgraded together agree on one of them
// (the lowest id) to start the digests from its position, and the others
// copy it; then all serve, nothing missing.
TEST(ClusterTest, ReplicasUpgradedFromCheckpointsWithoutADigestStartOneAndCopyIt) {
  TestCluster c(2, {"--snapshot-interval=1s"});
  uint64_t p = Create(c.replica(0), "f", 20'000).log_position();
  const std::vector<std::string> keys = NumberedKeys("k", 3'000);
  p = Insert(c.replica(1), "f", keys, "", p).log_position();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(c.replica(i).Stop(), 0);
    const std::string path = c.replica(i).data_dir() + "/CHECKPOINT";
    std::string checkpoint = ReadFile(path);
    const size_t digest = checkpoint.find("digest ");
    ASSERT_NE(digest, std::string::npos) << checkpoint;
    checkpoint.erase(digest);
    checkpoint.replace(checkpoint.find("v2"), 2, "v1");
    WriteFile(path, checkpoint);
  }
  c.replica(1).Start();
  c.replica(0).Start();
  // Each serves what it has meanwhile (no replica with a digest: nothing to
  // disagree with), until both have one.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int i = 0; i < 2; ++i) {
    v1::GetServerInfoResponse info;
    do {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      grpc::ClientContext ctx;
      info.Clear();
      (void)c.replica(i).stub().GetServerInfo(WithDeadline(&ctx), {}, &info);
    } while ((!info.cluster().log_digest_known() || info.cluster().log_check() != "agreed") &&
             std::chrono::steady_clock::now() < until);
    EXPECT_TRUE(info.cluster().log_digest_known()) << c.replica(i).process().process().out();
    ASSERT_TRUE(c.replica(i).WaitCaughtUp(p)) << c.replica(i).process().process().out();
  }
  const std::string r0 = c.replica(0).process().process().out();
  const std::string r1 = c.replica(1).process().process().out();
  EXPECT_NE(r0.find("the checkpoint records no digest of the log"), std::string::npos) << r0;
  EXPECT_NE(r0.find("this one starts the digests at position"), std::string::npos) << r0;
  EXPECT_NE(r1.find("cluster: bootstrapped from peer r0"), std::string::npos) << r1;
  for (int i = 0; i < 2; ++i) {
    std::string error;
    EXPECT_TRUE(Missing(c.replica(i), "f", keys, p, &error).empty()) << i << error;
    EXPECT_NE(ReadFile(c.replica(i).data_dir() + "/CHECKPOINT").find("digest "), std::string::npos);
  }
  p = Insert(c.replica(1), "f", NumberedKeys("after", 100), "", p).log_position();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  ExpectIdenticalReplicas(c, {0, 1});
}

// The stream keeps only what the replicas still need: once a replica has
// been away longer than --replica-expiry, the others' checkpoints purge the
// stream past its position (an idle filter does not hold them back), and
// when it returns it copies a peer and catches up, with no false negative.
TEST(ClusterTest, AReplicaAwayPastTheRetentionBootstrapsFromAPeer) {
  TestCluster c(3, {"--snapshot-interval=1s", "--replica-expiry=4s", "--dedup-window=1s"});
  uint64_t p = Create(c.replica(0), "busy", 50'000).log_position();
  p = Create(c.replica(1), "idle", 10'000).log_position();
  p = Insert(c.replica(1), "idle", NumberedKeys("i", 2'000), "", p).log_position();
  p = Insert(c.replica(0), "busy", NumberedKeys("b0-", 5'000), "", p).log_position();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  ASSERT_EQ(c.replica(2).Stop(), 0);
  const std::string checkpoint = ReadFile(c.replica(2).data_dir() + "/CHECKPOINT");
  const size_t at = checkpoint.find("resume_from ");
  ASSERT_NE(at, std::string::npos) << checkpoint;
  const uint64_t needed = std::stoull(checkpoint.substr(at + 12));

  // Writes go on without it, and the stream moves past what it needs.
  uint64_t first = 0;
  for (int round = 0; round < 120 && first <= needed; ++round) {
    p = Insert(c.replica(round % 2), "busy", NumberedKeys(absl::StrCat("b", round + 1, "-"), 200),
               "", p)
            .log_position();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    grpc::ClientContext ctx;
    v1::GetServerInfoResponse info;
    ASSERT_TRUE(c.replica(0).stub().GetServerInfo(WithDeadline(&ctx), {}, &info).ok());
    first = info.cluster().stream_first_position();
  }
  ASSERT_GT(first, needed) << "the stream was never purged past position " << needed;
  EXPECT_NE(c.replica(0).Metrics().find("cuckood_cluster_stream_purges_total"), std::string::npos);

  c.replica(2).Start();
  ASSERT_TRUE(c.replica(2).WaitCaughtUp(p));
  const std::string out = c.replica(2).process().process().out();
  EXPECT_NE(out.find("bootstrapping from a peer replica"), std::string::npos) << out;
  EXPECT_NE(out.find("cluster: bootstrapped from peer r"), std::string::npos) << out;
  std::string error;
  EXPECT_TRUE(Missing(c.replica(2), "idle", NumberedKeys("i", 2'000), p, &error).empty()) << error;
  EXPECT_TRUE(Missing(c.replica(2), "busy", NumberedKeys("b0-", 5'000), p, &error).empty())
      << error;
  EXPECT_TRUE(Missing(c.replica(2), "busy", NumberedKeys("b1-", 200), p, &error).empty()) << error;
  // Writes through it go on, and every replica ends identical.
  p = Insert(c.replica(2), "busy", NumberedKeys("after", 500), "", p).log_position();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  ExpectIdenticalReplicas(c, {0, 1, 2});
}

// A replica whose data directory is lost copies a peer while writes,
// creations and drops go on through the others: what happened during the
// copy comes from the stream, and it ends identical to them, every
// acknowledged key present.
TEST(ClusterTest, AReplicaBootstrapsWhileWritesGoOnAndMissesNothing) {
  TestCluster c(3, {"--snapshot-interval=1s"});
  uint64_t p = Create(c.replica(0), "a", 200'000).log_position();
  p = Create(c.replica(0), "doomed", 10'000).log_position();
  p = Insert(c.replica(1), "a", NumberedKeys("before", 20'000), "", p).log_position();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  ASSERT_EQ(c.replica(2).Stop(), 0);
  fs::remove_all(c.replica(2).data_dir());
  fs::create_directories(c.replica(2).data_dir());

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last{p};
  std::vector<std::string> acked;
  std::thread writer([&] {
    std::shared_ptr<v1::FilterService::Stub> stubs[] = {c.replica(0).shared_stub(),
                                                        c.replica(1).shared_stub()};
    // At most 120,000 keys: all fit (FULL answers would not be acked keys).
    for (int batch = 0; (!stop.load() || batch < 20) && batch < 240; ++batch) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      v1::InsertRequest req;
      req.set_filter("a");
      std::vector<std::string> keys = NumberedKeys(absl::StrCat("during", batch, "-"), 500);
      for (const std::string& k : keys) req.add_keys(k);
      v1::InsertResponse resp;
      grpc::ClientContext ctx;
      if (stubs[batch % 2]->Insert(WithDeadline(&ctx), req, &resp).ok()) {
        for (size_t i = 0; i < keys.size(); ++i) {
          EXPECT_EQ(resp.results(static_cast<int>(i)), v1::INSERT_RESULT_INSERTED) << keys[i];
        }
        acked.insert(acked.end(), keys.begin(), keys.end());
        last.store(std::max(last.load(), resp.log_position()));
      }
      if (batch == 5) {
        grpc::ClientContext drop_ctx;
        v1::DropFilterRequest drop;
        drop.set_name("doomed");
        v1::DropFilterResponse dropped;
        EXPECT_TRUE(stubs[0]->DropFilter(WithDeadline(&drop_ctx), drop, &dropped).ok());
      }
      if (batch == 10) {
        last.store(std::max(last.load(), Create(c.replica(1), "late", 10'000).log_position()));
      }
    }
  });
  c.replica(2).Start();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  stop.store(true);
  writer.join();
  p = last.load();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.replica(i).WaitCaughtUp(p));
  const std::string out = c.replica(2).process().process().out();
  const size_t resumed = out.find("; applying the stream from position ");
  ASSERT_NE(resumed, std::string::npos) << out;
  // The copy ended while writes went on: later ones came from the stream.
  EXPECT_LT(std::stoull(out.substr(resumed + 36)), p);
  ASSERT_GE(acked.size(), 10'000u);
  std::string error;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string> missing = Missing(c.replica(i), "a", acked, p, &error);
    EXPECT_TRUE(missing.empty()) << "replica " << i << ": " << missing.size() << " of "
                                 << acked.size() << " missing, first "
                                 << (missing.empty() ? "" : missing[0]) << error;
  }
  EXPECT_TRUE(Missing(c.replica(2), "a", NumberedKeys("before", 20'000), p, &error).empty())
      << error;
  ExpectIdenticalReplicas(c, {0, 1, 2});
  grpc::ClientContext ctx;
  v1::ListFiltersResponse list;
  ASSERT_TRUE(c.replica(2).stub().ListFilters(WithDeadline(&ctx), {}, &list).ok());
  std::vector<std::string> names;
  for (const v1::FilterInfo& f : list.filters()) names.push_back(f.name());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "late"}));
}

// A replica exports its copy of a filter while the cluster serves: the file
// records the filter's id (its creation's stream position) and the shards'
// stream positions. Imports are refused: a replica changes only through the
// log.
TEST(ClusterTest, AReplicaExportsItsCopyWithStreamPositionsAndRefusesImports) {
  TestCluster c(2);
  const uint64_t created = Create(c.replica(0), "a", 20'000).log_position();
  const uint64_t p = Insert(c.replica(0), "a", NumberedKeys("x", 5000), "", created).log_position();
  ASSERT_TRUE(c.replica(1).WaitCaughtUp(p));
  grpc::ClientContext ctx;
  v1::ExportFilterRequest req;
  req.set_name("a");
  auto reader = c.replica(1).stub().ExportFilter(WithDeadline(&ctx), req);
  std::string bytes;
  v1::ExportFilterChunk chunk, first;
  for (bool got_first = false; reader->Read(&chunk); got_first = true) {
    if (!got_first) first = chunk;
    bytes += chunk.data();
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(first.total_bytes(), bytes.size());
  EXPECT_EQ(first.items(), 5000u);
  EXPECT_GE(first.log_position(), p);
  EXPECT_EQ(first.filter_id(), created);
  absl::StatusOr<LoadedSnapshot> parsed = ParseSnapshot(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      "export", "a");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->filter_id, created);
  EXPECT_EQ(parsed->max_position, p);

  grpc::ClientContext import_ctx;
  v1::ImportFilterResponse resp;
  auto writer = c.replica(0).stub().ImportFilter(WithDeadline(&import_ctx), &resp);
  v1::ImportFilterChunk in;
  in.set_name("b");
  in.set_data(bytes);
  writer->Write(in);
  writer->WritesDone();
  const grpc::Status refused = writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("import into a cluster is not supported yet"),
            std::string::npos)
      << refused.error_message();
}

// --- Identity: a data directory follows one log; a replica refuses, at
// start-up, a directory of another log, and serves nothing once its stream
// turns out to be another log.

// The identity line of a data directory's CHECKPOINT or IDENTITY.
std::string IdentityIn(const std::string& file) {
  const std::string text = ReadFile(file);
  const size_t at = text.find("\nidentity ");
  return at == std::string::npos ? "" : text.substr(at + 10, text.find('\n', at + 1) - at - 10);
}

// The flags of a replica of `c`'s stream, as TestCluster gives its own.
std::vector<std::string> ReplicaFlags(TestCluster& c, const std::string& id) {
  return {"--nats=" + c.nats().Urls(), "--replica-id=" + id, "--nats-stream=TEST"};
}

TEST(ClusterTest, ReplicaStartedOnASingleNodesSnapshotsRefusesToStart) {
  TestCluster c(1);
  // A single node's snapshot...
  TempDir single;
  {
    Cuckood node(single.path());
    ASSERT_TRUE(node.ready()) << node.process().out() << node.process().err();
    auto stub = v1::FilterService::NewStub(
        grpc::CreateChannel(node.address(), grpc::InsecureChannelCredentials()));
    v1::CreateFilterRequest req;
    req.set_name("users");
    req.set_capacity(10'000);
    v1::CreateFilterResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->CreateFilter(WithDeadline(&ctx), req, &resp).ok());
    node.process().Signal(SIGTERM);
    ASSERT_EQ(node.process().Wait(), 0);
  }
  const std::string node_log = IdentityIn(single.path() + "/IDENTITY");
  ASSERT_EQ(node_log.rfind("node-", 0), 0u) << node_log;
  // ...copied into an empty directory, started as a replica.
  TempDir dir;
  const std::string data = dir.path() + "/replica";
  fs::create_directory(data);
  fs::copy_file(SnapshotPath(single.path(), "users"), data + "/users.cuckoo");
  Cuckood replica(data, ReplicaFlags(c, "r9"));
  EXPECT_FALSE(replica.ready());
  EXPECT_NE(replica.process().Wait(), 0);
  const std::string log = replica.process().out() + replica.process().err();
  EXPECT_NE(log.find("data directory " + data +
                     " holds snapshots (users.cuckoo) but no CHECKPOINT, "
                     "and " +
                     data + "/users.cuckoo belongs to the log " + node_log +
                     ", so they do not follow stream TEST"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("start it with an empty --data-dir: it bootstraps from a peer replica"),
            std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(data + "/users.cuckoo")) << "nothing deleted";
  EXPECT_FALSE(fs::exists(data + "/CHECKPOINT"));
  // As the message says: an empty directory bootstraps.
  fs::remove(data + "/users.cuckoo");
  Cuckood fresh(data, ReplicaFlags(c, "r9"));
  ASSERT_TRUE(fresh.ready()) << fresh.process().out();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (HttpGet(fresh.admin_port(), "/readyz").status != 200) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << fresh.process().out();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TEST(ClusterTest, AReplicaOfAnotherIncarnationOfItsStreamRefusesToStartNamingBoth) {
  TempDir saved;
  const std::string data = saved.path() + "/r0";
  std::string old_log;
  {
    TestCluster old(1);
    const uint64_t p = Create(old.replica(0), "users", 10'000).log_position();
    Insert(old.replica(0), "users", NumberedKeys("u", 100), "", p);
    ASSERT_EQ(old.replica(0).Stop(), 0);  // The final snapshot writes the checkpoint.
    old_log = IdentityIn(old.replica(0).data_dir() + "/CHECKPOINT");
    ASSERT_EQ(old_log.rfind("TEST@", 0), 0u) << old_log;
    fs::copy(old.replica(0).data_dir(), data, fs::copy_options::recursive);
  }
  // A stream of the same name, created again (another NATS cluster's).
  TestCluster c(1);
  const std::string checkpoint = ReadFile(data + "/CHECKPOINT");
  Cuckood replica(data, ReplicaFlags(c, "r0"));
  // It starts serving what its directory holds, then reads the stream.
  EXPECT_EQ(replica.process().Wait(std::chrono::seconds(60)), 4) << replica.process().out();
  const std::string log = replica.process().out() + replica.process().err();
  const size_t refused = log.find("cannot start: the data directory " + data + " follows the log " +
                                  old_log + ", but stream TEST is now the log TEST@");
  ASSERT_NE(refused, std::string::npos) << log;
  const size_t now = log.find("is now the log ", refused) + 15;
  EXPECT_NE(log.substr(now, log.find(' ', now) - now), old_log) << log;
  EXPECT_NE(
      log.find("start it with an empty --data-dir: it bootstraps from a peer replica", refused),
      std::string::npos)
      << log;
  EXPECT_EQ(ReadFile(data + "/CHECKPOINT"), checkpoint) << "nothing written";
  EXPECT_TRUE(fs::exists(SnapshotPath(data, "users")));
}

// A stream deleted and created again under a running replica: the replica's
// filters are another log's, so it refuses reads as well as writes.
TEST(ClusterTest, AReplicaWhoseStreamIsReplacedWhileItRunsServesNothing) {
  TestCluster c(1);
  const uint64_t p = Create(c.replica(0), "f", 10'000).log_position();
  const std::vector<std::string> keys = NumberedKeys("k", 100);
  const uint64_t q = Insert(c.replica(0), "f", keys, "", p).log_position();
  ASSERT_TRUE(c.replica(0).WaitCaughtUp(q));
  std::string error;
  ASSERT_TRUE(Missing(c.replica(0), "f", keys, 0, &error).empty());
  ASSERT_EQ(error, "");
  // The stream goes with every server's store; the replica creates it again.
  for (int i = 0; i < 3; ++i) c.nats().Kill(i);
  for (int i = 0; i < 3; ++i) c.nats().RemoveStore(i);
  for (int i = 0; i < 3; ++i) c.nats().Start(i);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (error.find("stream TEST is now the log") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "last read: " << error << "\n"
                                                       << c.replica(0).process().process().out();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    error.clear();
    Missing(c.replica(0), "f", keys, 0, &error);
  }
  EXPECT_EQ(error.rfind(absl::StrCat(grpc::StatusCode::UNAVAILABLE, " "), 0), 0u) << error;
  EXPECT_NE(error.find("follows the log TEST@"), std::string::npos) << error;
  EXPECT_NE(error.find("so this replica serves nothing"), std::string::npos) << error;
  EXPECT_EQ(c.replica(0).ReadyzStatus(), 503);
  v1::InsertRequest ins;
  ins.set_filter("f");
  ins.add_keys("new");
  v1::InsertResponse ins_resp;
  grpc::ClientContext ctx;
  const grpc::Status s = c.replica(0).stub().Insert(WithDeadline(&ctx), ins, &ins_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

}  // namespace
}  // namespace cuckoo::testing
