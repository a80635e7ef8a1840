#include "client/tools/cuckoo_bench/report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "base/json.h"

namespace cuckoo::bench {

void JsonWriter::Begin(const char* key) {
  Prefix(key);
  out_ += '{';
  first_.push_back(true);
}

void JsonWriter::End() {
  const bool empty = first_.back();
  first_.pop_back();
  if (!empty) Newline();
  out_ += '}';
}

void JsonWriter::Num(const char* key, double v) {
  Prefix(key);
  out_ += std::isfinite(v) ? absl::StrFormat("%.10g", v) : "null";
}

void JsonWriter::Int(const char* key, uint64_t v) {
  Prefix(key);
  out_ += absl::StrCat(v);
}

void JsonWriter::Str(const char* key, const std::string& v) {
  Prefix(key);
  Quote(v);
}

void JsonWriter::Bool(const char* key, bool v) {
  Prefix(key);
  out_ += v ? "true" : "false";
}

void JsonWriter::Null(const char* key) {
  Prefix(key);
  out_ += "null";
}

void JsonWriter::Newline() {
  out_ += '\n';
  out_.append(2 * first_.size(), ' ');
}

void JsonWriter::Prefix(const char* key) {
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    Newline();
  }
  if (key != nullptr) {
    Quote(key);
    out_ += ": ";
  }
}

void JsonWriter::Quote(std::string_view s) { out_ += JsonString(s); }

void BeginJson(JsonWriter& j, const Options& o, const cuckoo::v1::GetServerInfoResponse& server) {
  j.Begin();
  j.Str("tool", "cuckoo-bench");
  j.Begin("config");
  j.Str("target", o.target);
  j.Str("filter", o.filter);
  j.Int("connections", o.connections);
  j.Int("depth", o.depth);
  j.Int("threads", o.threads);
  j.Int("batch", o.batch);
  j.Int("key_bytes", o.key_bytes);
  j.Str("pin_cpus", absl::StrJoin(o.pin_cpus, ","));
  j.Begin("mix");
  for (int op = 0; op < kNumOps; ++op) {
    if (o.uses(static_cast<Op>(op))) j.Int(kOpNames[op], o.weights[op]);
  }
  j.End();
  j.Int("keyspace", o.keyspace);
  j.Int("positive_percent", o.positive);
  j.Num("duration_s", o.requests > 0 ? 0 : absl::ToDoubleSeconds(o.duration));
  j.Int("requests", o.requests);
  j.Num("warmup_s", absl::ToDoubleSeconds(o.warmup));
  j.Int("create", o.create);
  j.Num("fpr", o.fpr);
  if (o.semi_sort.has_value()) j.Bool("semi_sort", *o.semi_sort);
  j.Bool("populate", o.populate);
  j.Int("seed", o.seed);
  j.End();
  j.Begin("server");
  j.Str("version", server.version());
  j.Int("max_batch_keys", server.max_batch_keys());
  j.Int("max_key_bytes", server.max_key_bytes());
  j.End();
}

void WriteOpJson(JsonWriter& j, const char* key, const OpStats& s, double elapsed, int op) {
  j.Begin(key);
  j.Int("requests", s.requests);
  j.Int("keys", s.keys);
  j.Num("keys_per_s", Rate(s.keys, elapsed));
  j.Num("requests_per_s", Rate(s.requests, elapsed));
  j.Int("errors_total", s.errors_total());
  j.Begin("errors");
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) j.Int(ErrorName(e).c_str(), s.errors[e]);
  }
  j.End();
  j.Begin("error_messages");
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) j.Str(ErrorName(e).c_str(), s.first_error[e]);
  }
  j.End();
  j.Int("false_negatives", s.false_negatives);
  if (op < 0 || op == kLookup || op == kCount) {
    j.Int("present_keys", s.present_keys);
    j.Int("absent_keys", s.absent_keys);
    j.Int("absent_hits", s.absent_hits);
    j.Num("observed_false_positive_rate",
          s.absent_keys > 0 ? static_cast<double>(s.absent_hits) / s.absent_keys : 0);
  }
  if (op < 0 || op == kInsert) {
    j.Int("inserted", s.inserted);
    j.Int("already_present", s.already_present);
    j.Int("full", s.full);
  }
  if (op < 0 || op == kDelete) {
    j.Int("deleted", s.deleted);
    j.Int("not_found", s.not_found);
  }
  j.Begin("latency_us");
  j.Num("mean", s.latency.mean() / 1e3);
  j.Num("p50", Us(s.latency.Quantile(0.50)));
  j.Num("p90", Us(s.latency.Quantile(0.90)));
  j.Num("p99", Us(s.latency.Quantile(0.99)));
  j.Num("p999", Us(s.latency.Quantile(0.999)));
  j.Num("max", Us(s.latency.max()));
  j.End();
  j.End();
}

namespace {

void PrintHeaderRow() {
  absl::PrintF("  %-8s %9s %11s %11s %9s %6s %9s %9s %9s %9s %9s\n", "op", "requests", "keys",
               "keys/s", "req/s", "errors", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us");
}

void PrintRow(const char* name, const OpStats& s, double elapsed) {
  absl::PrintF("  %-8s %9u %11u %11.0f %9.1f %6u %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, s.requests,
               s.keys, Rate(s.keys, elapsed), Rate(s.requests, elapsed), s.errors_total(),
               Us(s.latency.Quantile(0.5)), Us(s.latency.Quantile(0.9)),
               Us(s.latency.Quantile(0.99)), Us(s.latency.Quantile(0.999)), Us(s.latency.max()));
}

}  // namespace

void PrintErrors(const char* name, const OpStats& s) {
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) {
      absl::PrintF("  %s errors: %u x %s, first: %s\n", name, s.errors[e], ErrorName(e),
                   s.first_error[e]);
    }
  }
}

void PrintRun(const Options& o, const PhaseResult& run) {
  const double el = run.elapsed_s;
  PrintHeaderRow();
  for (int op = 0; op < kNumOps; ++op) {
    if (o.uses(static_cast<Op>(op))) PrintRow(kOpNames[op], run.measured.ops[op], el);
  }
  const OpStats total = run.measured.Total();
  PrintRow("total", total, el);
  absl::PrintF("  measured %.2f s; client CPU %.2f cores (all its threads, gRPC's included)\n", el,
               el > 0 ? run.cpu_s / el : 0);
  for (int op = 0; op < kNumOps; ++op) {
    const OpStats& s = run.measured.ops[op];
    if (!o.uses(static_cast<Op>(op))) continue;
    if (op == kLookup || op == kCount) {
      absl::PrintF(
          "  %s: %u present keys, %u false negatives; %u absent keys, %u answered %s "
          "(%.4f%%)\n",
          kOpNames[op], s.present_keys, s.false_negatives, s.absent_keys, s.absent_hits,
          op == kLookup ? "true" : "count > 0",
          s.absent_keys > 0 ? 100.0 * s.absent_hits / s.absent_keys : 0.0);
    } else if (op == kInsert) {
      absl::PrintF("  insert: %u inserted, %u full\n", s.inserted, s.full);
    } else {
      absl::PrintF("  delete: %u deleted, %u not found (false negatives)\n", s.deleted,
                   s.not_found);
    }
    PrintErrors(kOpNames[op], s);
  }
  const OpStats warm = run.unmeasured.Total();
  if (warm.errors_total() > 0 || warm.false_negatives > 0) {
    absl::PrintF("  warmup: %u errors, %u false negatives\n", warm.errors_total(),
                 warm.false_negatives);
    for (int op = 0; op < kNumOps; ++op) PrintErrors(kOpNames[op], run.unmeasured.ops[op]);
  }
  if (!run.stopped_early.empty()) absl::PrintF("  stopped early: %s\n", run.stopped_early);
}

void WriteRunJson(JsonWriter& j, const Options& o, const PhaseResult& run) {
  const double el = run.elapsed_s;
  const OpStats total = run.measured.Total();
  const OpStats warm = run.unmeasured.Total();
  j.Begin("run");
  j.Num("elapsed_s", el);
  j.Num("client_cpu_cores", el > 0 ? run.cpu_s / el : 0);
  if (run.stopped_early.empty()) {
    j.Null("stopped_early");
  } else {
    j.Str("stopped_early", run.stopped_early);
  }
  j.Begin("ops");
  for (int op = 0; op < kNumOps; ++op) {
    if (o.uses(static_cast<Op>(op))) {
      WriteOpJson(j, kOpNames[op], run.measured.ops[op], el, op);
    }
  }
  j.End();
  WriteOpJson(j, "total", total, el, -1);
  j.Begin("warmup");
  j.Int("requests", warm.requests);
  j.Int("errors_total", warm.errors_total());
  j.Int("false_negatives", warm.false_negatives);
  j.End();
  j.End();
}

void ReportFilter(JsonWriter& j, const Options& o, const cuckoo::v1::FilterInfo& after) {
  absl::PrintF("filter \"%s\": %u items, load factor %.3f, expected false-positive rate %.4f%%\n",
               o.filter, after.items(), after.load_factor(),
               100 * after.expected_false_positive_rate());
  j.Begin("filter");
  j.Int("capacity", after.capacity());
  j.Int("items", after.items());
  j.Num("load_factor", after.load_factor());
  j.Num("expected_false_positive_rate", after.expected_false_positive_rate());
  j.Int("fingerprint_bits", after.fingerprint_bits());
  j.Bool("semi_sort", after.semi_sort());
  j.Int("memory_bytes", after.memory_bytes());
  j.End();
}

}  // namespace cuckoo::bench
