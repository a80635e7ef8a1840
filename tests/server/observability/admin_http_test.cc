// The admin HTTP server (/metrics, /healthz, /readyz) of an in-process
// cuckood, over plain sockets: status codes, headers, bad requests, slow
// clients, and that the metrics move by exactly the traffic sent. Then
// HTTPS (--admin-tls), with a Beast client: certificates, rotation, and
// clients that never finish their handshake.
#include "server/observability/admin_http.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/x509.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/time/clock.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/ssl.hpp"
#include "cuckoo_version.h"
#include "tests/util/http.h"
#include "tests/util/keys.h"
#include "tests/util/test_pki.h"
#include "tests/util/test_server.h"

namespace cuckoo {
namespace {

using ::testing::HasSubstr;
using testing::HttpConnection;
using testing::HttpGet;
using testing::HttpRequest;
using testing::HttpResponse;
using testing::MetricValue;
using testing::NumberedKeys;
using ::testing::Optional;
using testing::ParseHttpResponse;
using testing::Sample;
using testing::Scrape;
using Labels = std::map<std::string, std::string>;

class AdminHttpTest : public testing::ServerTest {
 protected:
  int port() const { return server_->admin_port(); }

  grpc::Status Create(const std::string& name, uint64_t capacity = 1000) {
    v1::CreateFilterRequest req;
    req.set_name(name);
    req.set_capacity(capacity);
    req.set_seed(7);
    v1::CreateFilterResponse resp;
    grpc::ClientContext ctx;
    return stub_->CreateFilter(&ctx, req, &resp);
  }
  grpc::Status Insert(const std::string& filter, const std::vector<std::string>& keys) {
    v1::InsertRequest req;
    req.set_filter(filter);
    for (const auto& k : keys) req.add_keys(k);
    v1::InsertResponse resp;
    grpc::ClientContext ctx;
    return stub_->Insert(&ctx, req, &resp);
  }
  grpc::Status Lookup(const std::string& filter, const std::vector<std::string>& keys) {
    v1::LookupRequest req;
    req.set_filter(filter);
    for (const auto& k : keys) req.add_keys(k);
    v1::LookupResponse resp;
    grpc::ClientContext ctx;
    return stub_->Lookup(&ctx, req, &resp);
  }
  grpc::Status Drop(const std::string& name) {
    v1::DropFilterRequest req;
    req.set_name(name);
    v1::DropFilterResponse resp;
    grpc::ClientContext ctx;
    return stub_->DropFilter(&ctx, req, &resp);
  }
  v1::FilterInfo Info(const std::string& name) {
    v1::GetFilterRequest req;
    req.set_name(name);
    v1::GetFilterResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->GetFilter(&ctx, req, &resp).ok());
    return resp.filter();
  }

  // A sample's value, 0 when it is absent (a counter not yet moved).
  static double Value(const std::vector<Sample>& samples, const std::string& name,
                      const Labels& labels = {}) {
    return MetricValue(samples, name, labels).value_or(0);
  }
  static Labels Rpc(const std::string& method, const std::string& code = "OK") {
    return {{"method", method}, {"code", code}};
  }
};

TEST_F(AdminHttpTest, HealthzAndReadyzAreOkWhileServing) {
  ASSERT_GT(port(), 0);
  EXPECT_TRUE(server_->ready());
  HttpResponse health = HttpGet(port(), "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  EXPECT_EQ(health.headers["content-type"], "text/plain; charset=utf-8");
  HttpResponse ready = HttpGet(port(), "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ready\n");
  // A query string does not change the path.
  EXPECT_EQ(HttpGet(port(), "/healthz?verbose=1").status, 200);
  // The same, as a metric (CuckoodNotReady).
  EXPECT_THAT(MetricValue(Scrape(port()), "cuckood_ready"), Optional(1.0));
}

TEST_F(AdminHttpTest, OtherPathsAre404AndOtherMethods405) {
  EXPECT_EQ(HttpGet(port(), "/").status, 404);
  EXPECT_EQ(HttpGet(port(), "/metricsz").status, 404);
  EXPECT_EQ(HttpRequest(port(), "POST", "/nope").status, 404);
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    HttpResponse r = HttpRequest(port(), method, "/metrics");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  }
  // HEAD: the GET's headers, no body.
  HttpResponse head = HttpRequest(port(), "HEAD", "/healthz");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.headers["content-length"], "3");
  EXPECT_EQ(head.body, "");
}

TEST_F(AdminHttpTest, MetricsAreThePrometheusTextFormat) {
  HttpResponse r = HttpGet(port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(r.body, HasSubstr("# TYPE cuckood_rpc_requests_total counter\n"));
  EXPECT_THAT(r.body, HasSubstr("# TYPE cuckood_rpc_duration_seconds histogram\n"));
  EXPECT_THAT(r.body, HasSubstr("# TYPE cuckood_filter_items gauge\n"));
  EXPECT_EQ(r.body.back(), '\n');
  std::vector<Sample> m = testing::ParseMetrics(r.body);
  EXPECT_THAT(MetricValue(m, "cuckood_build_info", {{"version", kVersion}}), Optional(1.0));
  EXPECT_GT(Value(m, "process_resident_memory_bytes"), 1e6);
  EXPECT_GT(Value(m, "process_start_time_seconds"), 1.6e9);
  EXPECT_THAT(MetricValue(m, "cuckood_memory_budget_bytes"), Optional(double{64 << 20}));
  EXPECT_THAT(MetricValue(m, "cuckood_memory_used_bytes"), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filters"), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_max_filters"), Optional(4.0));
  EXPECT_THAT(MetricValue(m, "cuckood_snapshot_loaded_filters"), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_snapshot_quarantined_files"), Optional(0.0));
  // Every method's OK series is there from the start.
  for (const char* method : {"Insert", "Lookup", "Delete", "Count", "CreateFilter", "GetFilter",
                             "ListFilters", "DropFilter", "GetServerInfo", "Snapshot",
                             "ExportFilter", "ImportFilter", "SetFilterExpiry", "RenameFilter"}) {
    EXPECT_THAT(MetricValue(m, "cuckood_rpc_requests_total", Rpc(method)), Optional(0.0)) << method;
    EXPECT_THAT(
        MetricValue(m, "cuckood_rpc_duration_seconds_bucket", {{"method", method}, {"le", "+Inf"}}),
        Optional(0.0))
        << method;
  }
}

TEST_F(AdminHttpTest, RpcCountersMoveByExactlyTheCallsAndKeys) {
  ASSERT_TRUE(Create("f").ok());
  const std::vector<Sample> before = Scrape(port());
  ASSERT_FALSE(before.empty());
  ASSERT_TRUE(Insert("f", NumberedKeys("a", 5)).ok());
  ASSERT_TRUE(Insert("f", NumberedKeys("b", 7)).ok());
  ASSERT_TRUE(Insert("f", NumberedKeys("c", 9)).ok());
  ASSERT_TRUE(Lookup("f", NumberedKeys("a", 4)).ok());
  ASSERT_TRUE(Lookup("f", NumberedKeys("z", 200)).ok());
  const std::vector<Sample> after = Scrape(port());
  auto delta = [&](const std::string& name, const Labels& labels) {
    return Value(after, name, labels) - Value(before, name, labels);
  };
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Insert")), 3);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Lookup")), 2);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("CreateFilter")), 0);
  EXPECT_EQ(Value(after, "cuckood_rpc_requests_total", Rpc("CreateFilter")), 1);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Insert"}}), 21);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Lookup"}}), 204);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Delete"}}), 0);
  EXPECT_EQ(delta("cuckood_rpc_duration_seconds_count", {{"method", "Insert"}}), 3);
  EXPECT_GT(delta("cuckood_rpc_duration_seconds_sum", {{"method", "Insert"}}), 0);
  EXPECT_EQ(delta("cuckood_rpc_duration_seconds_bucket", {{"method", "Insert"}, {"le", "10"}}), 3);
  EXPECT_EQ(delta("cuckood_batch_keys_count", {{"method", "Insert"}}), 3);
  EXPECT_EQ(delta("cuckood_batch_keys_sum", {{"method", "Insert"}}), 21);
  // Batches of 5, 7 and 9 keys: one of at most 5, all three of at most 10.
  EXPECT_EQ(delta("cuckood_batch_keys_bucket", {{"method", "Insert"}, {"le", "5"}}), 1);
  EXPECT_EQ(delta("cuckood_batch_keys_bucket", {{"method", "Insert"}, {"le", "10"}}), 3);
  EXPECT_EQ(delta("cuckood_batch_keys_bucket", {{"method", "Lookup"}, {"le", "100"}}), 1);
  EXPECT_EQ(delta("cuckood_batch_keys_bucket", {{"method", "Lookup"}, {"le", "500"}}), 2);
  EXPECT_EQ(delta("cuckood_batch_keys_bucket", {{"method", "Lookup"}, {"le", "+Inf"}}), 2);
  // (A call is in flight until gRPC has sent its response, so not 0 here.)
  EXPECT_TRUE(MetricValue(after, "cuckood_rpc_in_flight").has_value());
}

TEST_F(AdminHttpTest, FailedCallsAreCountedWithTheirCodeAndNoKeys) {
  ASSERT_TRUE(Create("f").ok());
  const std::vector<Sample> before = Scrape(port());
  // A name over 512 bytes (any other is a Redis-style key).
  EXPECT_EQ(Insert(std::string(513, 'n'), {"k"}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("f", {std::string(65, 'x')}).error_code(),  // Over --max-key-bytes.
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Insert("missing", {"k"}).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Create("f").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Lookup("f", NumberedKeys("k", 1001)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::vector<Sample> after = Scrape(port());
  auto delta = [&](const std::string& name, const Labels& labels) {
    return Value(after, name, labels) - Value(before, name, labels);
  };
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Insert", "INVALID_ARGUMENT")), 2);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Insert", "NOT_FOUND")), 1);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Insert", "OK")), 0);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("CreateFilter", "ALREADY_EXISTS")), 1);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", Rpc("Lookup", "INVALID_ARGUMENT")), 1);
  EXPECT_EQ(delta("cuckood_rpc_duration_seconds_count", {{"method", "Insert"}}), 3);
  // Rejected calls applied nothing.
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Insert"}}), 0);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Lookup"}}), 0);
  EXPECT_EQ(delta("cuckood_batch_keys_count", {{"method", "Lookup"}}), 0);
}

TEST_F(AdminHttpTest, PerFilterGaugesFollowCreateSnapshotAndDrop) {
  ASSERT_TRUE(Create("a", 1000).ok());
  ASSERT_TRUE(Create("b", 2000).ok());
  ASSERT_TRUE(Insert("a", NumberedKeys("k", 10)).ok());
  std::vector<Sample> m = Scrape(port());
  const v1::FilterInfo a = Info("a");
  const Labels fa = {{"filter", "a"}}, fb = {{"filter", "b"}};
  EXPECT_THAT(MetricValue(m, "cuckood_filter_items", fa), Optional(10.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_items", fb), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_capacity", fa), Optional(1000.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_capacity", fb), Optional(2000.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_memory_bytes", fa),
              Optional(static_cast<double>(a.memory_bytes())));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_load_factor", fa),
              Optional(::testing::DoubleNear(a.load_factor(), 1e-12)));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_expected_false_positive_rate", fa),
              Optional(::testing::DoubleNear(a.expected_false_positive_rate(), 1e-15)));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_unsnapshotted_changes", fa), Optional(10.0));
  // Never snapshotted: no age.
  EXPECT_EQ(MetricValue(m, "cuckood_filter_last_snapshot_age_seconds", fa), std::nullopt);
  EXPECT_THAT(MetricValue(m, "cuckood_filters"), Optional(2.0));
  EXPECT_EQ(Value(m, "cuckood_memory_used_bytes"),
            static_cast<double>(a.memory_bytes() + Info("b").memory_bytes()));

  // A snapshot of both: counted per file, with the bytes the RPC reports.
  const double snapshots_before = Value(m, "cuckood_snapshots_total", {{"result", "ok"}});
  const double bytes_before = Value(m, "cuckood_snapshot_bytes_total");
  v1::SnapshotRequest req;
  v1::SnapshotResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->Snapshot(&ctx, req, &resp).ok());
  m = Scrape(port());
  EXPECT_EQ(Value(m, "cuckood_snapshots_total", {{"result", "ok"}}) - snapshots_before, 2);
  EXPECT_THAT(MetricValue(m, "cuckood_snapshots_total", {{"result", "error"}}), Optional(0.0));
  EXPECT_EQ(Value(m, "cuckood_snapshot_bytes_total") - bytes_before,
            static_cast<double>(resp.bytes()));
  EXPECT_EQ(Value(m, "cuckood_snapshot_duration_seconds_count"), 2);
  EXPECT_THAT(MetricValue(m, "cuckood_rpc_requests_total", Rpc("Snapshot")), Optional(1.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_unsnapshotted_changes", fa), Optional(0.0));
  std::optional<double> age = MetricValue(m, "cuckood_filter_last_snapshot_age_seconds", fa);
  ASSERT_TRUE(age.has_value());
  EXPECT_GE(*age, 0);
  EXPECT_LT(*age, 60);

  // Dropped: every series of "a" is gone, "b"'s stay.
  ASSERT_TRUE(Drop("a").ok());
  m = Scrape(port());
  for (const Sample& s : m) {
    auto it = s.labels.find("filter");
    EXPECT_FALSE(it != s.labels.end() && it->second == "a") << s.name;
  }
  EXPECT_THAT(MetricValue(m, "cuckood_filter_items", fb), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filters"), Optional(1.0));
}

// What the capacity and false-positive alerts (deploy/monitoring) compare
// against: the rate each filter is made for, the keys it can come to hold,
// and whether it grows.
TEST_F(AdminHttpTest, PerFilterTargetsSayWhatEachFilterIsMadeFor) {
  ASSERT_TRUE(Create("fixed", 1000).ok());
  v1::CreateFilterRequest req;
  req.set_name("growing");
  req.set_capacity(1000);
  req.set_false_positive_rate(0.001);
  req.set_growth_factor(2);
  req.set_max_capacity(50000);
  v1::CreateFilterResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->CreateFilter(&ctx, req, &resp).ok());
  const std::vector<Sample> m = Scrape(port());
  const v1::FilterInfo fixed = Info("fixed"), growing = Info("growing");
  const Labels ff = {{"filter", "fixed"}}, fg = {{"filter", "growing"}};
  // A fixed filter: its rate at capacity (past it the rate climbs), the
  // capacity, no growth.
  EXPECT_THAT(MetricValue(m, "cuckood_filter_false_positive_target", ff),
              Optional(::testing::DoubleNear(fixed.false_positive_rate_at_capacity(), 1e-15)));
  EXPECT_GT(fixed.false_positive_rate_at_capacity(), 0);
  EXPECT_THAT(MetricValue(m, "cuckood_filter_reachable_capacity", ff),
              Optional(static_cast<double>(fixed.reachable_capacity())));
  EXPECT_GE(fixed.reachable_capacity(), 1000u);
  EXPECT_THAT(MetricValue(m, "cuckood_filter_growth_factor", ff), Optional(0.0));
  // A growing one: the rate it was created with (all generations stay
  // under it), its ceiling, its factor.
  EXPECT_THAT(MetricValue(m, "cuckood_filter_false_positive_target", fg), Optional(0.001));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_reachable_capacity", fg), Optional(50000.0));
  EXPECT_EQ(growing.reachable_capacity(), 50000u);
  EXPECT_THAT(MetricValue(m, "cuckood_filter_growth_factor", fg), Optional(2.0));
}

TEST_F(AdminHttpTest, BadRequestsGetAnErrorStatusAndTheServerGoesOn) {
  auto raw = [&](const std::string& request) {
    HttpConnection c(port());
    EXPECT_TRUE(c.connected());
    c.Send(request);
    return ParseHttpResponse(c.ReadToEnd());
  };
  EXPECT_EQ(raw("GARBAGE\r\n\r\n").status, 400);
  EXPECT_EQ(raw("GET /metrics HTTX/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(raw("GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n").status, 400);
  EXPECT_EQ(
      raw("GET /healthz HTTP/1.1\r\nX-Big: " + std::string(16 << 10, 'x') + "\r\n\r\n").status,
      431);
  EXPECT_EQ(raw("POST /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n").status, 413);
  {
    // Half a request, then the client goes away.
    HttpConnection c(port());
    c.Send("GET /metr");
  }
  // Binary noise.
  EXPECT_EQ(raw(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 15)).status,
            400);
  EXPECT_EQ(HttpGet(port(), "/healthz").status, 200);
  EXPECT_EQ(HttpGet(port(), "/metrics").status, 200);
}

TEST_F(AdminHttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  HttpConnection c(port());
  ASSERT_TRUE(c.connected());
  // Two pipelined, then one more after the answers.
  c.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  HttpResponse first = ParseHttpResponse(c.ReadResponse());
  HttpResponse second = ParseHttpResponse(c.ReadResponse());
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "ok\n");
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.body, "ready\n");
  c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  HttpResponse third = ParseHttpResponse(c.ReadResponse());
  EXPECT_EQ(third.status, 200);
  EXPECT_THAT(third.body, HasSubstr("cuckood_build_info"));
  // HTTP/1.0 without keep-alive: the server closes after the answer.
  HttpConnection old(port());
  old.Send("GET /healthz HTTP/1.0\r\n\r\n");
  const std::string all = old.ReadToEnd(std::chrono::seconds(5));
  EXPECT_THAT(all, HasSubstr("HTTP/1.0 200 OK"));
  EXPECT_THAT(all, ::testing::EndsWith("ok\n"));
}

TEST_F(AdminHttpTest, StalledClientsDoNotBlockOthers) {
  std::vector<std::unique_ptr<HttpConnection>> stalled;
  for (int i = 0; i < 8; ++i) {
    stalled.push_back(std::make_unique<HttpConnection>(port()));
    stalled.back()->Send("GET /metrics HTTP/1.1\r\nHost: x\r\n");  // Never finished.
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(HttpGet(port(), "/healthz").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// 128 idle connections held every slot for 30 s at a time: probes were
// refused, and an orchestrator restarted a healthy server.
TEST_F(AdminHttpTest, IdleConnectionsFromOnePeerCannotLockProbesOut) {
  std::vector<std::unique_ptr<HttpConnection>> idle;
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<HttpConnection>(port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  for (int i = 0; i < 5; ++i) EXPECT_EQ(HttpGet(port(), "/healthz").status, 200);
  // One peer holds at most 16: the oldest of the others were closed.
  EXPECT_TRUE(idle.front()->ClosedByPeer(std::chrono::seconds(5)));
  EXPECT_FALSE(idle.back()->ClosedByPeer(std::chrono::milliseconds(100)));
}

int OpenDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// An evicted connection used to linger for 2 s, its descriptor held, while
// the new one took its slot: a peer opening connections fast kept far more
// than its 16 open, toward the process's descriptor limit.
TEST_F(AdminHttpTest, AnEvictedConnectionsDescriptorIsClosedAtOnce) {
  const int before = OpenDescriptors();
  std::vector<std::unique_ptr<HttpConnection>> idle;  // Never closed by us.
  for (int i = 0; i < 200; ++i) {
    idle.push_back(std::make_unique<HttpConnection>(port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  EXPECT_EQ(HttpGet(port(), "/healthz").status, 200);  // Every accept handled.
  // Our 200 client sockets, and the server's side of at most 16 of them.
  EXPECT_LE(OpenDescriptors() - before, 200 + 16 + 4);
}

TEST_F(AdminHttpTest, ManyPeersAtTheLimitMakeRoomForANewOne) {
  // 16 peers x 8 connections: all 128 slots, none over a peer's limit.
  std::vector<std::unique_ptr<HttpConnection>> idle;
  for (int peer = 2; peer < 18; ++peer) {
    const std::string source = "127.0.0." + std::to_string(peer);
    for (int i = 0; i < 8; ++i) {
      idle.push_back(std::make_unique<HttpConnection>(port(), source.c_str()));
      ASSERT_TRUE(idle.back()->connected()) << source;
    }
  }
  absl::SleepFor(absl::Milliseconds(200));  // All accepted.
  EXPECT_EQ(HttpGet(port(), "/healthz", "127.0.0.1").status, 200);
  EXPECT_EQ(HttpGet(port(), "/readyz", "127.0.0.99").status, 200);
  EXPECT_TRUE(idle.front()->ClosedByPeer(std::chrono::seconds(5))) << "the longest waiting";
}

TEST_F(AdminHttpTest, AConnectionThatSendsNoRequestIsClosedAfterTenSeconds) {
  HttpConnection c(port());
  EXPECT_FALSE(c.ClosedByPeer(std::chrono::seconds(5)));
  EXPECT_TRUE(c.ClosedByPeer(std::chrono::seconds(10)));
}

TEST_F(AdminHttpTest, ShutdownTurnsHealthzAndReadyzTo503) {
  ASSERT_TRUE(Create("f").ok());
  server_->Shutdown(absl::Seconds(1));
  EXPECT_FALSE(server_->ready());
  // The admin server stays up until the CuckooServer is destroyed, so that
  // probes see the shutdown rather than a refused connection.
  HttpResponse ready = HttpGet(port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "not ready: shutting down\n");
  HttpResponse health = HttpGet(port(), "/healthz");
  EXPECT_EQ(health.status, 503);
  // The final snapshot is counted.
  std::vector<Sample> m = Scrape(port());
  EXPECT_THAT(MetricValue(m, "cuckood_ready"), Optional(0.0));
  EXPECT_THAT(MetricValue(m, "cuckood_snapshots_total", {{"result", "ok"}}), Optional(1.0));
}

TEST_F(AdminHttpTest, LoadedSnapshotsAreReportedAfterARestart) {
  ASSERT_TRUE(Create("a").ok());
  ASSERT_TRUE(Create("b").ok());
  ASSERT_TRUE(Insert("a", NumberedKeys("k", 3)).ok());
  StartServer(testing::TestConfig(dir_.path()));  // Final snapshot, then load.
  std::vector<Sample> m = Scrape(port());
  EXPECT_THAT(MetricValue(m, "cuckood_snapshot_loaded_filters"), Optional(2.0));
  EXPECT_GT(Value(m, "cuckood_snapshot_loaded_bytes"), 0);
  EXPECT_GT(Value(m, "cuckood_snapshot_load_seconds"), 0);
  EXPECT_THAT(MetricValue(m, "cuckood_filter_items", {{"filter", "a"}}), Optional(3.0));
  EXPECT_THAT(MetricValue(m, "cuckood_filter_unsnapshotted_changes", {{"filter", "a"}}),
              Optional(0.0));
  EXPECT_TRUE(MetricValue(m, "cuckood_filter_last_snapshot_age_seconds", {{"filter", "b"}}));
}

TEST(AdminHttpServerTest, ServesWhatTheHandlersSayAndRefusesATakenPort) {
  server::AdminHandlers handlers{
      .metrics = [] { return server::AdminResponse{.body = "m 1\n"}; },
      .healthz = [] { return server::AdminResponse{.body = "ok\n"}; },
      .readyz = [] { return server::AdminResponse{.status = 503, .body = "loading\n"}; }};
  auto admin = server::AdminHttpServer::Start("127.0.0.1:0", handlers);
  ASSERT_TRUE(admin.ok()) << admin.status();
  const int port = (*admin)->port();
  EXPECT_EQ((*admin)->address(), "127.0.0.1:" + std::to_string(port));
  HttpResponse ready = HttpGet(port, "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_EQ(ready.body, "loading\n");
  EXPECT_EQ(HttpGet(port, "/metrics").body, "m 1\n");

  auto second = server::AdminHttpServer::Start("127.0.0.1:" + std::to_string(port), handlers);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("cannot listen on admin address 127.0.0.1:" + std::to_string(port)));
  auto bad = server::AdminHttpServer::Start("no-port", handlers);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);

  (*admin)->Stop();
  (*admin)->Stop();  // Idempotent.
  EXPECT_EQ(HttpGet(port, "/healthz").status, 0);
}

TEST(AdminHttpServerTest, AnEmptyAdminAddressMeansNoAdminServer) {
  testing::TempDir dir;
  server::ServerConfig config = testing::TestConfig(dir.path());
  config.admin_listen = "";
  auto s = server::CuckooServer::Start(config);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->admin_port(), 0);
  EXPECT_EQ((*s)->admin_address(), "");
}

// ---- HTTPS (--admin-tls) ----

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

// A blocking HTTPS/1.1 client on one keep-alive connection to
// 127.0.0.1:port that trusts `ca_pem` and checks the name "localhost". Every
// step is bounded by 5 s.
class HttpsConnection {
 public:
  HttpsConnection(int port, const std::string& ca_pem)
      : ctx_(asio::ssl::context::tls_client), stream_(io_, ctx_) {
    // (The stream's SSL was made from ctx_ before this: the CA store is
    // shared with it, the verify mode was copied, so it is set on both.)
    ctx_.add_certificate_authority(asio::buffer(ca_pem));
    ctx_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_callback(asio::ssl::host_name_verification("localhost"));
    SSL_set_tlsext_host_name(stream_.native_handle(), "localhost");
    const asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"),
                                           static_cast<uint16_t>(port));
    error_ =
        Run([&](auto done) { beast::get_lowest_layer(stream_).async_connect(endpoint, done); });
    if (error_) return;
    error_ = Run([&](auto done) { stream_.async_handshake(asio::ssl::stream_base::client, done); });
  }

  // Empty when connected and the handshake succeeded.
  std::string error() const { return error_ ? error_.message() : ""; }

  HttpResponse Get(const std::string& target, http::verb method = http::verb::get) {
    http::request<http::empty_body> req(method, target, 11);
    req.set(http::field::host, "localhost");
    return Send(req);
  }

  // Sends `req` as is (a raw request when it is a std::string), then reads
  // one response.
  template <class Request>
  HttpResponse Send(const Request& req) {
    beast::error_code ec;
    if constexpr (std::is_same_v<Request, std::string>) {
      ec = Run([&](auto done) {
        asio::async_write(stream_, asio::buffer(req),
                          [done](beast::error_code e, size_t) { done(e); });
      });
    } else {
      ec = Run([&](auto done) {
        http::async_write(stream_, req, [done](beast::error_code e, size_t) { done(e); });
      });
    }
    HttpResponse r;
    if (ec) return r;
    http::response<http::string_body> res;
    ec = Run([&](auto done) {
      http::async_read(stream_, buffer_, res, [done](beast::error_code e, size_t) { done(e); });
    });
    if (ec) return r;
    r.status = static_cast<int>(res.result_int());
    for (const auto& field : res) {
      r.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
          std::string(field.value());
    }
    r.body = res.body();
    return r;
  }

  // The common name of the certificate the server presented.
  std::string PeerCommonName() {
    X509* cert = SSL_get1_peer_certificate(stream_.native_handle());
    if (cert == nullptr) return "";
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
    X509_free(cert);
    return cn;
  }

 private:
  // Starts an operation with a completion handler `done(error_code)`, runs
  // it to its end (or 5 s, when the stream's timer cancels it).
  template <class Start>
  beast::error_code Run(Start start) {
    beast::error_code ec = asio::error::would_block;
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    start([&ec](beast::error_code e) { ec = e; });
    io_.restart();
    io_.run();
    return ec;
  }

  asio::io_context io_;
  asio::ssl::context ctx_;
  beast::ssl_stream<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  beast::error_code error_;
};

HttpResponse HttpsGet(int port, const std::string& ca_pem, const std::string& target) {
  HttpsConnection c(port, ca_pem);
  return c.Get(target);
}

testing::Pem ServerCert(const testing::Pem& ca, const std::string& common_name) {
  return testing::IssueCert(
      ca, {.common_name = common_name, .dns_sans = {"localhost"}, .ip_sans = {"127.0.0.1"}});
}

TEST(AdminHttpsTest, ServesHealthzAndMetricsWithTheGrpcPortsCertificate) {
  testing::TempDir dir, data;
  const testing::Pem ca = testing::MakeCa("test ca");
  const testing::Pem cert = ServerCert(ca, "cuckood");
  const std::string cert_file = dir.path() + "/tls.crt", key_file = dir.path() + "/tls.key";
  testing::WritePem(cert_file, cert.cert);
  testing::WritePem(key_file, cert.key);
  server::ServerConfig config = testing::TestConfig(data.path());
  config.tls_cert = cert_file;
  config.tls_key = key_file;
  config.admin_tls = true;
  auto s = server::CuckooServer::Start(config);
  ASSERT_TRUE(s.ok()) << s.status();
  const int port = (*s)->admin_port();

  HttpsConnection c(port, ca.cert);
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.PeerCommonName(), "cuckood");
  HttpResponse health = c.Get("/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");
  HttpResponse metrics = c.Get("/metrics");  // Same connection: kept alive.
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.body, HasSubstr("cuckood_build_info"));
  // A client that trusts another CA refuses the certificate.
  EXPECT_NE(HttpsConnection(port, testing::MakeCa("other ca").cert).error(), "");
}

class AdminHttpsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = testing::MakeCa("test ca");
    Rotate(ServerCert(ca_, "admin-v1"));
    auto admin = server::AdminHttpServer::Start(
        "127.0.0.1:0",
        {.metrics = [] { return server::AdminResponse{.body = "m 1\n"}; },
         .healthz = [] { return server::AdminResponse{.body = "ok\n"}; },
         .readyz = [] { return server::AdminResponse{.body = "ready\n"}; }},
        server::AdminTlsOptions{.cert_file = secret_ + "/tls.crt",
                                .key_file = secret_ + "/tls.key",
                                .check_interval = std::chrono::milliseconds(100)});
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
    ASSERT_TRUE(admin_->tls());
  }

  // Swaps the mounted secret's certificate and key at once, like the
  // kubelet.
  void Rotate(const testing::Pem& pem) {
    testing::WriteSecretVolume(secret_, {{"tls.crt", pem.cert}, {"tls.key", pem.key}});
  }
  int port() const { return admin_->port(); }
  // The common name new connections get, once it is `want` (within 5 s),
  // else the last seen.
  std::string WaitForCommonName(const std::string& want) {
    std::string seen;
    for (int i = 0; i < 50; ++i) {
      HttpsConnection c(port(), ca_.cert);
      seen = c.error().empty() ? c.PeerCommonName() : "error: " + c.error();
      if (seen == want) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return seen;
  }

  testing::TempDir dir_;
  const std::string secret_ = dir_.path() + "/secret";
  testing::Pem ca_;
  std::unique_ptr<server::AdminHttpServer> admin_;
};

TEST_F(AdminHttpsServerTest, AnswersLikeThePlainServer) {
  HttpsConnection c(port(), ca_.cert);
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.Get("/readyz").body, "ready\n");
  EXPECT_EQ(c.Get("/nope").status, 404);
  HttpResponse post = c.Get("/metrics", http::verb::post);
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET, HEAD");
  EXPECT_EQ(c.Get("/healthz").status, 200);  // Still the same connection.

  HttpsConnection bad(port(), ca_.cert);
  EXPECT_EQ(bad.Send(std::string("GARBAGE\r\n\r\n")).status, 400);
  HttpsConnection big(port(), ca_.cert);
  EXPECT_EQ(
      big.Send("GET /healthz HTTP/1.1\r\nX-Big: " + std::string(16 << 10, 'x') + "\r\n\r\n").status,
      431);
  EXPECT_EQ(HttpsGet(port(), ca_.cert, "/healthz").status, 200);
}

TEST_F(AdminHttpsServerTest, PlainHttpOnTheTlsPortGetsNoHttpAnswer) {
  HttpConnection c(port());
  ASSERT_TRUE(c.connected());
  c.Send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  const std::string answer = c.ReadToEnd(std::chrono::seconds(5));
  EXPECT_THAT(answer, ::testing::Not(HasSubstr("HTTP/1.")));
  EXPECT_EQ(HttpGet(port(), "/healthz").status, 0);
  EXPECT_EQ(HttpsGet(port(), ca_.cert, "/healthz").status, 200);
}

TEST_F(AdminHttpsServerTest, NewConnectionsGetARotatedCertificateOpenOnesKeepWorking) {
  HttpsConnection open(port(), ca_.cert);
  ASSERT_EQ(open.error(), "");
  ASSERT_EQ(open.PeerCommonName(), "admin-v1");
  ASSERT_EQ(open.Get("/healthz").status, 200);

  const testing::Pem v2 = ServerCert(ca_, "admin-v2");
  Rotate(v2);
  EXPECT_EQ(WaitForCommonName("admin-v2"), "admin-v2");
  // The connection made before the rotation goes on with its certificate.
  EXPECT_EQ(open.Get("/healthz").status, 200);
  EXPECT_EQ(open.PeerCommonName(), "admin-v1");

  // A key that is not the certificate's is not taken: the previous pair
  // stays in use.
  const testing::Pem v3 = ServerCert(ca_, "admin-v3");
  Rotate({.cert = v3.cert, .key = v2.key});
  absl::SleepFor(absl::Milliseconds(500));  // Five checks.
  HttpsConnection after_bad(port(), ca_.cert);
  ASSERT_EQ(after_bad.error(), "");
  EXPECT_EQ(after_bad.PeerCommonName(), "admin-v2");
  EXPECT_EQ(after_bad.Get("/healthz").status, 200);
  // Fixed: taken.
  Rotate(v3);
  EXPECT_EQ(WaitForCommonName("admin-v3"), "admin-v3");
}

TEST_F(AdminHttpsServerTest, ConnectionsThatNeverHandshakeDoNotBlockOthers) {
  // More than one peer may hold: each new connection makes room by closing
  // the one that has waited longest.
  std::vector<std::unique_ptr<HttpConnection>> silent;
  for (int i = 0; i < 40; ++i) {
    silent.push_back(std::make_unique<HttpConnection>(port()));
    ASSERT_TRUE(silent.back()->connected());
  }
  // Half a ClientHello, then nothing.
  HttpConnection stalled(port(), "127.0.0.2");
  stalled.Send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11));
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(HttpsGet(port(), ca_.cert, "/healthz").status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(silent.front()->ClosedByPeer(std::chrono::seconds(5))) << "the longest waiting";
  // The handshake has the idle limit: 10 s.
  EXPECT_TRUE(stalled.ClosedByPeer(std::chrono::seconds(12)));
}

}  // namespace
}  // namespace cuckoo
