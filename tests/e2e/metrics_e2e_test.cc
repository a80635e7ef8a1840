// The real cuckood's admin HTTP server as Prometheus and Kubernetes use it:
// /metrics scraped over a plain socket before and after cuckooctl traffic,
// /healthz and /readyz, and the admin port's flag and its failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/e2e/process.h"
#include "tests/util/http.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;
using Labels = std::map<std::string, std::string>;

Result Ctl(const Cuckood& server, const std::vector<std::string>& args,
           const std::string& stdin_data = "") {
  std::vector<std::string> argv = {CUCKOOCTL_PATH, "--target=" + server.address()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, stdin_data);
}

double Value(const std::vector<Sample>& samples, const std::string& name,
             const Labels& labels = {}) {
  return MetricValue(samples, name, labels).value_or(0);
}

TEST(MetricsE2eTest, ScrapedValuesMoveWithCuckooctlTraffic) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  ASSERT_GT(server.admin_port(), 0) << server.process().out();
  const int admin = server.admin_port();

  // The admin server is up before snapshots are loaded.
  const std::string log = server.process().out();
  ASSERT_NE(log.find("admin HTTP on"), std::string::npos);
  EXPECT_LT(log.find("admin HTTP on"), log.find("serving 0 filters"));

  EXPECT_EQ(HttpGet(admin, "/healthz").status, 200);
  EXPECT_EQ(HttpGet(admin, "/readyz").status, 200);
  HttpResponse first = HttpGet(admin, "/metrics");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  const std::vector<Sample> before = ParseMetrics(first.body);
  EXPECT_THAT(
      MetricValue(before, "cuckood_rpc_requests_total", {{"method", "Insert"}, {"code", "OK"}}),
      Optional(0.0));
  EXPECT_GT(Value(before, "process_resident_memory_bytes"), 0);

  Result created = Ctl(server, {"create", "users", "--capacity=10000"});
  ASSERT_EQ(created.code, 0) << created.out << created.err;
  Result inserted = Ctl(server, {"insert", "users"}, "alice\nbob\ncarol\ndave\neve\n");
  ASSERT_EQ(inserted.code, 0) << inserted.out << inserted.err;
  Result looked = Ctl(server, {"lookup", "users", "alice", "bob", "mallory"});
  ASSERT_EQ(looked.code, 1) << looked.out << looked.err;  // mallory is absent.
  Result missing = Ctl(server, {"lookup", "nope", "x"});
  ASSERT_NE(missing.code, 0);

  const std::vector<Sample> after = Scrape(admin);
  ASSERT_FALSE(after.empty());
  auto delta = [&](const std::string& name, const Labels& labels) {
    return Value(after, name, labels) - Value(before, name, labels);
  };
  EXPECT_EQ(delta("cuckood_rpc_requests_total", {{"method", "CreateFilter"}, {"code", "OK"}}), 1);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", {{"method", "Insert"}, {"code", "OK"}}), 1);
  EXPECT_EQ(delta("cuckood_rpc_requests_total", {{"method", "Lookup"}, {"code", "OK"}}), 1);
  // The unknown filter: a NOT_FOUND (from whichever call cuckooctl made
  // first), and no keys.
  double not_found = 0;
  for (const Sample& s : after) {
    if (s.name == "cuckood_rpc_requests_total" && s.labels.at("code") == "NOT_FOUND") {
      not_found += s.value;
    }
  }
  EXPECT_EQ(not_found, 1);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Insert"}}), 5);
  EXPECT_EQ(delta("cuckood_keys_total", {{"method", "Lookup"}}), 3);
  EXPECT_EQ(delta("cuckood_rpc_duration_seconds_count", {{"method", "Insert"}}), 1);
  EXPECT_THAT(MetricValue(after, "cuckood_filter_items", {{"filter", "users"}}), Optional(5.0));
  EXPECT_THAT(MetricValue(after, "cuckood_filter_capacity", {{"filter", "users"}}),
              Optional(10000.0));
  EXPECT_THAT(MetricValue(after, "cuckood_filters"), Optional(1.0));
  EXPECT_GT(Value(after, "cuckood_memory_used_bytes"), 0);

  // Snapshot through cuckooctl: counted, and the filter's age appears.
  Result snap = Ctl(server, {"snapshot"});
  ASSERT_EQ(snap.code, 0) << snap.out << snap.err;
  const std::vector<Sample> snapped = Scrape(admin);
  EXPECT_THAT(MetricValue(snapped, "cuckood_snapshots_total", {{"result", "ok"}}), Optional(1.0));
  EXPECT_GT(Value(snapped, "cuckood_snapshot_bytes_total"), 0);
  EXPECT_TRUE(
      MetricValue(snapped, "cuckood_filter_last_snapshot_age_seconds", {{"filter", "users"}}));

  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);
}

// Filter names are Redis keys, any UTF-8: as label values they reach the
// text format escaped (\\, \", \n), so a scrape still parses.
TEST(MetricsE2eTest, FilterLabelsOfKeyShapedNamesAreEscapedInTheTextFormat) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  for (const std::string name :
       {"users:seen", "a/b c", "we\"ird\\name", "line\nbreak", "caf\xC3\xA9"}) {
    Result created = Ctl(server, {"create", name, "--capacity=1000"});
    ASSERT_EQ(created.code, 0) << created.out << created.err;
  }
  HttpResponse scraped = HttpGet(server.admin_port(), "/metrics");
  ASSERT_EQ(scraped.status, 200);
  const std::string& body = scraped.body;
  EXPECT_THAT(body, HasSubstr("cuckood_filter_capacity{filter=\"users:seen\"} "));
  EXPECT_THAT(body, HasSubstr("cuckood_filter_capacity{filter=\"a/b c\"} "));
  EXPECT_THAT(body, HasSubstr("cuckood_filter_capacity{filter=\"we\\\"ird\\\\name\"} "));
  EXPECT_THAT(body, HasSubstr("cuckood_filter_capacity{filter=\"line\\nbreak\"} "));
  EXPECT_THAT(body, HasSubstr("cuckood_filter_capacity{filter=\"caf\xC3\xA9\"} "));
  EXPECT_EQ(body.find("line\nbreak"), std::string::npos) << "a raw newline in a label";
  // Every line is a comment or a sample that parses.
  const std::vector<Sample> samples = ParseMetrics(body);
  EXPECT_THAT(MetricValue(samples, "cuckood_filters"), Optional(5.0));
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);
}

TEST(MetricsE2eTest, ATakenAdminPortStopsStartUpWithExitOne) {
  TempDir dir, other;
  Cuckood first(dir.path());
  ASSERT_TRUE(first.ready());
  Result second =
      RunProcess({CUCKOOD_PATH, "--listen=127.0.0.1:" + std::to_string(FreePort()),
                  "--data-dir=" + other.path(), "--admin-listen=" + first.admin_address()});
  EXPECT_EQ(second.code, 1);
  EXPECT_THAT(second.out, HasSubstr("cannot listen on admin address " + first.admin_address()));
}

TEST(MetricsE2eTest, AnEmptyAdminAddressRunsWithoutTheAdminServer) {
  TempDir dir;
  Cuckood server(dir.path(), {"--admin-listen="});
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  EXPECT_EQ(server.admin_port(), 0);
  EXPECT_THAT(server.process().out(), ::testing::Not(HasSubstr("admin HTTP on")));
}

}  // namespace
}  // namespace cuckoo::testing
