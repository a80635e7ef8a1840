// cuckoo-bench's report: the table and lines printed on stdout, and the
// same numbers as JSON (--json).
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_REPORT_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_REPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "client/tools/cuckoo_bench/options.h"
#include "client/tools/cuckoo_bench/stats.h"
#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::bench {

// `n` per second over `seconds`; 0 for no time.
inline double Rate(uint64_t n, double seconds) { return seconds > 0 ? n / seconds : 0; }
// Nanoseconds in microseconds.
inline double Us(uint64_t ns) { return ns / 1e3; }

// A small JSON writer: nested objects, two-space indentation.
class JsonWriter {
 public:
  void Begin(const char* key = nullptr);
  void End();
  void Num(const char* key, double v);
  void Int(const char* key, uint64_t v);
  void Str(const char* key, const std::string& v);
  void Bool(const char* key, bool v);
  void Null(const char* key);
  std::string str() const { return out_ + "\n"; }

 private:
  void Newline();
  void Prefix(const char* key);
  void Quote(std::string_view s);

  std::string out_;
  std::vector<bool> first_;
};

// Opens the top-level object and writes the tool, its configuration and
// the server's version and limits.
void BeginJson(JsonWriter& j, const Options& o, const cuckoo::v1::GetServerInfoResponse& server);

// One operation's numbers (op < 0: the total, with every outcome).
void WriteOpJson(JsonWriter& j, const char* key, const OpStats& s, double elapsed, int op);

// Prints the errors of `s` by status code, with the first message of each.
void PrintErrors(const char* name, const OpStats& s);

// Prints the measured run: a row per operation and the total, the client's
// CPU, each operation's outcomes and errors, the warmup's problems.
void PrintRun(const Options& o, const PhaseResult& run);

// The measured run as "run": {...}.
void WriteRunJson(JsonWriter& j, const Options& o, const PhaseResult& run);

// Prints the filter's state after the run, and writes it as "filter": {...}.
void ReportFilter(JsonWriter& j, const Options& o, const cuckoo::v1::FilterInfo& after);

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_REPORT_H_
