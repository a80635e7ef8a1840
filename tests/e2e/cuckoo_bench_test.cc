// cuckoo-bench as a user runs it, against a real cuckood: a short mixed run
// must load every operation, see no error and no false negative, and report
// totals that add up; misuse must fail with a clear message and exit code.
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;
using ::testing::HasSubstr;

// The JSON report as a protobuf Struct (numbers become doubles).
Struct ParseReport(const std::string& json) {
  Struct report;
  auto status = google::protobuf::util::JsonStringToMessage(json, &report);
  EXPECT_TRUE(status.ok()) << status << "\n" << json;
  return report;
}

const Struct& Obj(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  EXPECT_TRUE(it != s.fields().end() && it->second.has_struct_value()) << "no object " << key;
  return it == s.fields().end() ? Struct::default_instance() : it->second.struct_value();
}

double Num(const Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  EXPECT_TRUE(it != s.fields().end() && it->second.kind_case() == Value::kNumberValue)
      << "no number " << key;
  return it == s.fields().end() ? -1 : it->second.number_value();
}

Result RunBench(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {CUCKOO_BENCH_PATH};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunProcess(argv);
}

TEST(CuckooBenchTest, MixedRunLoadsEveryOpWithoutErrorsOrFalseNegatives) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  const std::string json = dir.path() + "/report.json";
  constexpr int kBatch = 500;
  Result r =
      RunBench({"--target=" + server.address(), "--create=400000", "--populate", "--keyspace=200k",
                "--batch=" + std::to_string(kBatch), "--mix=lookup:50,insert:20,delete:20,count:10",
                "--positive=50", "--duration=1500ms", "--warmup=300ms", "--pool=100k",
                "--churn=60k", "--json=" + json});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("result: OK"));

  const Struct report = ParseReport(ReadFile(json));
  EXPECT_TRUE(report.fields().at("ok").bool_value());
  EXPECT_EQ(Num(report, "errors"), 0);
  EXPECT_EQ(Num(report, "false_negatives"), 0);

  const Struct& populate = Obj(report, "populate");
  EXPECT_EQ(Num(populate, "keys"), 200'000);
  EXPECT_EQ(Num(populate, "inserted"), 200'000);
  EXPECT_EQ(Num(populate, "requests"), 200'000 / kBatch);
  EXPECT_GT(Num(populate, "keys_per_s"), 0);
  EXPECT_EQ(Num(populate, "errors_total"), 0);

  const Struct& run = Obj(report, "run");
  EXPECT_GT(Num(run, "elapsed_s"), 1.0);
  EXPECT_EQ(run.fields().at("stopped_early").kind_case(), Value::kNullValue);
  const Struct& ops = Obj(run, "ops");
  double requests = 0, keys = 0, keys_per_s = 0;
  for (const char* op : {"insert", "lookup", "delete", "count"}) {
    SCOPED_TRACE(op);
    const Struct& s = Obj(ops, op);
    EXPECT_GT(Num(s, "requests"), 0);
    EXPECT_GT(Num(s, "keys_per_s"), 0);
    EXPECT_GT(Num(s, "requests_per_s"), 0);
    EXPECT_EQ(Num(s, "errors_total"), 0);
    EXPECT_EQ(Num(s, "false_negatives"), 0);
    // Every run request is a full batch.
    EXPECT_EQ(Num(s, "keys"), Num(s, "requests") * kBatch);
    const Struct& latency = Obj(s, "latency_us");
    EXPECT_GT(Num(latency, "p50"), 0);
    EXPECT_LE(Num(latency, "p50"), Num(latency, "p99"));
    EXPECT_LE(Num(latency, "p99"), Num(latency, "max"));
    requests += Num(s, "requests");
    keys += Num(s, "keys");
    keys_per_s += Num(s, "keys_per_s");
  }
  // Lookups and counts saw present and absent keys; churn ops did real work.
  EXPECT_GT(Num(Obj(ops, "lookup"), "present_keys"), 0);
  EXPECT_GT(Num(Obj(ops, "lookup"), "absent_keys"), 0);
  EXPECT_EQ(Num(Obj(ops, "insert"), "inserted"), Num(Obj(ops, "insert"), "keys"));
  EXPECT_EQ(Num(Obj(ops, "delete"), "deleted"), Num(Obj(ops, "delete"), "keys"));

  const Struct& total = Obj(run, "total");
  EXPECT_EQ(Num(total, "requests"), requests);
  EXPECT_EQ(Num(total, "keys"), keys);
  EXPECT_EQ(Num(total, "keys"), Num(total, "requests") * kBatch);
  EXPECT_NEAR(Num(total, "keys_per_s"), keys_per_s, 1e-6 * keys_per_s);
  EXPECT_NEAR(Num(total, "keys_per_s"), keys / Num(run, "elapsed_s"), 1e-6 * keys_per_s);

  // The churn window was deleted again: the filter holds the present keys.
  EXPECT_EQ(Num(Obj(report, "filter"), "items"), 200'000);
}

TEST(CuckooBenchTest, RequestsModeSendsExactlyThatManySingleKeyRequests) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready());
  const std::string json = dir.path() + "/report.json";
  Result r = RunBench({"--target=" + server.address(), "--create=10000", "--populate",
                       "--keyspace=1000", "--batch=1", "--depth=1", "--connections=1",
                       "--requests=300", "--warmup=0", "--json=" + json});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const Struct report = ParseReport(ReadFile(json));
  const Struct& lookup = Obj(Obj(Obj(report, "run"), "ops"), "lookup");
  EXPECT_EQ(Num(lookup, "requests"), 300);
  EXPECT_EQ(Num(lookup, "keys"), 300);
  EXPECT_EQ(Num(lookup, "false_negatives"), 0);
}

TEST(CuckooBenchTest, SemiSortFlagPicksTheCreatedFiltersTableKind) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready());
  for (const char* kind : {"true", "false"}) {
    SCOPED_TRACE(kind);
    const std::string json = dir.path() + "/report-" + kind + ".json";
    Result r = RunBench({"--target=" + server.address(), "--filter=f-" + std::string(kind),
                         "--create=10000", "--semi-sort=" + std::string(kind), "--populate",
                         "--keyspace=5000", "--requests=20", "--warmup=0", "--json=" + json});
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    const Struct report = ParseReport(ReadFile(json));
    const Struct& filter = Obj(report, "filter");
    EXPECT_EQ(filter.fields().at("semi_sort").bool_value(), std::string(kind) == "true");
    EXPECT_EQ(Num(filter, "fingerprint_bits"), 12);
    EXPECT_EQ(Num(Obj(Obj(Obj(report, "run"), "ops"), "lookup"), "false_negatives"), 0);
  }
}

TEST(CuckooBenchTest, UnknownFilterWithoutCreateExitsOneWithNotFound) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready());
  Result r = RunBench({"--target=" + server.address(), "--filter=nosuch", "--duration=1s"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(r.err, HasSubstr("\"nosuch\""));
  EXPECT_THAT(r.err, HasSubstr("--create"));
}

TEST(CuckooBenchTest, UsageErrorsExitTwo) {
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--mix=scan:1"},
                                             {"--depth=0"},
                                             {"--duration=1s", "--requests=5"},
                                             {"--bogus=1"},
                                             {"--semi-sort=maybe", "--create=10"},
                                             {"--semi-sort=true"}}) {
    Result r = RunBench(flags);
    EXPECT_EQ(r.code, 2) << flags[0] << "\n" << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("--help")) << flags[0];
  }
  Result help = RunBench({"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--connections=N"));
}

// --pin-cpu: a list or range of CPUs; one the process may not run on is
// refused before any server is reached.
TEST(CuckooBenchTest, PinCpuTakesAListAndRefusesCpusItCannotRunOn) {
  Result bad = RunBench({"--pin-cpu=2-1"});
  EXPECT_EQ(bad.code, 2) << bad.out << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("--pin-cpu=2-1: \"2-1\" is not a CPU number or range"));
  Result absent = RunBench({"--pin-cpu=1023", "--target=127.0.0.1:1"});
  EXPECT_EQ(absent.code, 2) << absent.out << absent.err;
  EXPECT_THAT(absent.err, HasSubstr("--pin-cpu=1023: cannot run there"));

  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  const std::string json = dir.path() + "/report.json";
  Result r =
      RunBench({"--target=" + server.address(), "--pin-cpu=0,0-0", "--create=1000", "--populate",
                "--keyspace=100", "--batch=10", "--requests=20", "--warmup=0", "--json=" + json});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("pinned to CPU 0"));
  EXPECT_THAT(ReadFile(json), HasSubstr("\"pin_cpus\": \"0\""));
}

}  // namespace
}  // namespace cuckoo::testing
