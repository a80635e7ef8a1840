// cuckooctl's output: buffered stdout that remembers a failed write, a
// compact JSON object and aligned "field: value" text, and a filter's info
// in both.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_OUTPUT_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_OUTPUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/tools/cuckooctl/command_line.h"
#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::ctl {

// Buffered stdout that remembers a failed write (reported once, at the end).
class Output {
 public:
  void Write(std::string_view s);
  void Flush();
  // Flushes; the failure of the first failed write, if any (exit 2).
  std::optional<Failure> Check();

 private:
  int failed_errno_ = 0;
};

// Writes `s` to stdout: kExitOk, or the failure's code after reporting it.
int Emit(const std::string& s);

// The shortest text that reads back as `value` ("0.001", "1e-05").
std::string Shortest(double value);

// A filter name for a terminal: control characters (C0, DEL, and C1 as
// UTF-8) as \xNN or \u00NN, and a backslash doubled; the rest (UTF-8
// text) as it is. Names are any UTF-8 without NUL, so a name could
// otherwise move the cursor or change colours.
std::string TerminalName(std::string_view name);

bool IsValidUtf8(std::string_view s);

// A compact JSON object, built field by field.
class JsonObject {
 public:
  JsonObject& String(std::string_view key, std::string_view value);
  JsonObject& Uint(std::string_view key, uint64_t value);
  JsonObject& Double(std::string_view key, double value);
  JsonObject& Bool(std::string_view key, bool value);
  JsonObject& Raw(std::string_view key, std::string_view json);
  // "key":"..." for UTF-8 keys, else "key_base64":"...", so any bytes survive.
  JsonObject& Bytes(std::string_view field_prefix, std::string_view bytes);
  std::string Done() const { return out_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string out_ = "{";
};

// Text: "field:   value" lines, aligned.
class TextFields {
 public:
  TextFields& Add(std::string_view field, std::string value) {
    rows_.emplace_back(std::string(field) + ":", std::move(value));
    return *this;
  }
  std::string Done() const;

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

double DurationSeconds(const google::protobuf::Duration& d);

// "2m", "1.5s": absl's form.
std::string FormatDuration(const google::protobuf::Duration& d);

// RFC 3339 in UTC, e.g. 2026-11-23T10:15:00.123456Z.
std::string FormatTimestamp(const google::protobuf::Timestamp& t);

// A filter's info as a JSON object, every field (`seed` a string).
std::string FilterInfoJson(const cuckoo::v1::FilterInfo& f);

// A filter's info as text lines: its settings, its state and, for a growing
// filter, its generations.
void AddFilterInfoText(TextFields& t, const cuckoo::v1::FilterInfo& f);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_OUTPUT_H_
