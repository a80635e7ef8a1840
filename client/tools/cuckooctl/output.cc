#include "client/tools/cuckooctl/output.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/json.h"
#include "base/units.h"

namespace cuckoo::ctl {

namespace v1 = ::cuckoo::v1;

void Output::Write(std::string_view s) {
  if (failed_errno_ != 0 || s.empty()) return;
  if (fwrite(s.data(), 1, s.size(), stdout) != s.size()) failed_errno_ = errno ? errno : EIO;
}

void Output::Flush() {
  if (failed_errno_ == 0 && fflush(stdout) != 0) failed_errno_ = errno ? errno : EIO;
}

std::optional<Failure> Output::Check() {
  Flush();
  if (failed_errno_ == 0) return std::nullopt;
  return Failure{kExitUsage,
                 absl::StrFormat("cannot write to stdout: %s", strerror(failed_errno_))};
}

int Emit(const std::string& s) {
  Output out;
  out.Write(s);
  if (std::optional<Failure> f = out.Check()) return Fail(*f);
  return kExitOk;
}

std::string Shortest(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : "0";
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    p += extra + 1;
  }
  return true;
}

JsonObject& JsonObject::String(std::string_view key, std::string_view value) {
  Key(key);
  out_ += JsonString(value);
  return *this;
}

JsonObject& JsonObject::Uint(std::string_view key, uint64_t value) {
  Key(key);
  out_ += absl::StrFormat("%u", value);
  return *this;
}

JsonObject& JsonObject::Double(std::string_view key, double value) {
  Key(key);
  out_ += std::isfinite(value) ? Shortest(value) : "null";
  return *this;
}

JsonObject& JsonObject::Bool(std::string_view key, bool value) {
  Key(key);
  out_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::Raw(std::string_view key, std::string_view json) {
  Key(key);
  out_ += json;
  return *this;
}

JsonObject& JsonObject::Bytes(std::string_view field_prefix, std::string_view bytes) {
  if (IsValidUtf8(bytes)) return String(field_prefix, bytes);
  return String(std::string(field_prefix) + "_base64",
                absl::Base64Escape(absl::string_view(bytes.data(), bytes.size())));
}

void JsonObject::Key(std::string_view key) {
  if (out_.size() > 1) out_.push_back(',');
  out_ += JsonString(key);
  out_.push_back(':');
}

std::string TextFields::Done() const {
  size_t width = 0;
  for (const auto& [f, v] : rows_) width = std::max(width, f.size());
  std::string out;
  for (const auto& [f, v] : rows_) {
    out += f;
    out.append(width + 1 - f.size(), ' ');
    out += v;
    out.push_back('\n');
  }
  return out;
}

double DurationSeconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() / 1e9;
}

std::string FormatDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos()));
}

std::string FormatTimestamp(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ",
                          absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()),
                          absl::UTCTimeZone());
}

std::string FilterInfoJson(const v1::FilterInfo& f) {
  std::string generations = "[";
  for (const v1::FilterInfo::Generation& g : f.generations()) {
    if (generations.size() > 1) generations.push_back(',');
    generations += JsonObject()
                       .Uint("fingerprint_bits", g.fingerprint_bits())
                       .Uint("shards", g.shards())
                       .Uint("slots", g.slots())
                       .Uint("items", g.items())
                       .Uint("memory_bytes", g.memory_bytes())
                       .Double("false_positive_bound", g.false_positive_bound())
                       .Done();
  }
  return JsonObject()
      .String("name", f.name())
      .Uint("capacity", f.capacity())
      .Uint("fingerprint_bits", f.fingerprint_bits())
      .Uint("bucket_size", f.bucket_size())
      .Bool("semi_sort", f.semi_sort())
      .Uint("shards", f.shards())
      .Uint("max_kicks", f.max_kicks())
      // A string: JSON readers that parse numbers as doubles would round a
      // 64-bit seed, and the seed must be exact to recreate the filter.
      .String("seed", absl::StrFormat("%u", f.seed()))
      .Uint("hash_id", f.hash_id())
      .Uint("buckets_per_shard", f.buckets_per_shard())
      .Uint("slots", f.slots())
      .Uint("items", f.items())
      .Double("load_factor", f.load_factor())
      .Uint("memory_bytes", f.memory_bytes())
      .Double("bits_per_item", f.bits_per_item())
      .Double("expected_false_positive_rate", f.expected_false_positive_rate())
      .Double("false_positive_rate_at_capacity", f.false_positive_rate_at_capacity())
      .Raw("last_snapshot_time", f.has_last_snapshot_time()
                                     ? JsonString(FormatTimestamp(f.last_snapshot_time()))
                                     : "null")
      .Uint("last_snapshot_bytes", f.last_snapshot_bytes())
      .Uint("unsnapshotted_changes", f.unsnapshotted_changes())
      .Bool("has_unsnapshotted_changes", f.has_unsnapshotted_changes())
      .Uint("growth_factor", f.growth_factor())
      .Uint("max_capacity", f.max_capacity())
      .Double("false_positive_rate", f.false_positive_rate())
      .Double("false_positive_bound", f.false_positive_bound())
      .Bool("grow_on_repeats", f.grow_on_repeats())
      .Raw("expire_at", f.has_expire_at() ? JsonString(FormatTimestamp(f.expire_at())) : "null")
      .Uint("reachable_capacity", f.reachable_capacity())
      .Uint("max_generations", f.max_generations())
      .Raw("generations", generations + "]")
      .Done();
}

namespace {

// Memory per item, for people: the tables are allocated for the capacity up
// front, so a filter that holds few keys costs many bits each (15 MiB over 2
// keys is 6.3e7 bits per item). Fixed-point, never an exponent; below half
// full with what it costs at capacity beside it.
std::string BitsPerItemText(const v1::FilterInfo& f) {
  if (f.items() == 0) return "n/a (no items)";
  std::string text = absl::StrFormat("%.1f", f.bits_per_item());
  if (f.load_factor() >= 0.5) return text;
  if (f.growth_factor() == 0 && f.capacity() > 0) {
    return absl::StrCat(
        text, absl::StrFormat(" (%u items in tables allocated up front for %u: %.1f at capacity)",
                              f.items(), f.capacity(), 8.0 * f.memory_bytes() / f.capacity()));
  }
  return absl::StrCat(text, absl::StrFormat(" (%u items in tables allocated up front: %.0f%% full)",
                                            f.items(), 100 * f.load_factor()));
}

}  // namespace

std::string TerminalName(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (size_t i = 0; i < name.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else if (c == 0xC2 && i + 1 < name.size() &&
               static_cast<unsigned char>(name[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(name[i + 1]) <= 0x9F) {
      absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(name[++i]));
    } else if (c == '\\') {
      out += "\\\\";
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void AddFilterInfoText(TextFields& t, const v1::FilterInfo& f) {
  t.Add("name", TerminalName(f.name()))
      .Add("capacity", absl::StrFormat("%u", f.capacity()))
      .Add("fingerprint_bits", absl::StrFormat("%u", f.fingerprint_bits()))
      .Add("bucket_size", absl::StrFormat("%u", f.bucket_size()))
      .Add("semi_sort", f.semi_sort() ? "true (semi-sorted buckets, f - 1 bits per slot)" : "false")
      .Add("shards", absl::StrFormat("%u", f.shards()))
      .Add("max_kicks", absl::StrFormat("%u", f.max_kicks()))
      .Add("seed", absl::StrFormat("%u", f.seed()))
      .Add("hash_id", absl::StrFormat("%u", f.hash_id()))
      .Add("buckets_per_shard", absl::StrFormat("%u", f.buckets_per_shard()))
      .Add("slots", absl::StrFormat("%u", f.slots()))
      .Add("items", absl::StrFormat("%u", f.items()))
      .Add("load_factor", absl::StrFormat("%.6g", f.load_factor()))
      .Add("memory_bytes",
           absl::StrFormat("%u (%s)", f.memory_bytes(), FormatByteSize(f.memory_bytes())))
      .Add("bits_per_item", BitsPerItemText(f))
      .Add("expected_false_positive_rate",
           absl::StrFormat("%.6g", f.expected_false_positive_rate()))
      .Add("false_positive_rate_at_capacity",
           absl::StrFormat("%.6g", f.false_positive_rate_at_capacity()))
      .Add("last_snapshot_time",
           f.has_last_snapshot_time() ? FormatTimestamp(f.last_snapshot_time()) : "never")
      .Add("last_snapshot_bytes", absl::StrFormat("%u (%s)", f.last_snapshot_bytes(),
                                                  FormatByteSize(f.last_snapshot_bytes())))
      .Add("unsnapshotted_changes",
           absl::StrFormat("%u%s", f.unsnapshotted_changes(),
                           f.has_unsnapshotted_changes()
                               ? " (only in the write-ahead log: a restart replays them)"
                               : ""))
      .Add("expire_at", f.has_expire_at()
                            ? FormatTimestamp(f.expire_at()) + " (then the server drops it)"
                            : std::string("never"));
  if (f.growth_factor() == 0) {
    t.Add("growth_factor", "0 (fixed size: inserts past the capacity answer FULL)");
    return;
  }
  t.Add("growth_factor", absl::StrFormat("%u", f.growth_factor()))
      .Add("max_capacity", f.max_capacity() != 0 ? absl::StrFormat("%u", f.max_capacity())
                                                 : std::string("0 (as far as it can grow)"))
      .Add("false_positive_rate",
           absl::StrFormat("%.6g (shared by every generation)", f.false_positive_rate()))
      .Add("false_positive_bound", absl::StrFormat("%.6g (no lookup's rate is higher, at any load)",
                                                   f.false_positive_bound()))
      .Add("reachable_capacity", absl::StrFormat("%u", f.reachable_capacity()))
      .Add("grow_on_repeats", f.grow_on_repeats()
                                  ? std::string("true (a key repeated until its slots are full "
                                                "grows the filter)")
                                  : std::string("false (a key repeated until its slots are full "
                                                "answers FULL)"))
      .Add("generations",
           absl::StrFormat("%u of at most %u", f.generations_size(), f.max_generations()));
  for (int i = 0; i < f.generations_size(); ++i) {
    const v1::FilterInfo::Generation& g = f.generations(i);
    t.Add(absl::StrFormat("generation %d", i),
          absl::StrFormat("%u-bit fingerprints, %u shards, %u slots, %u items, %s, bound %.3g",
                          g.fingerprint_bits(), g.shards(), g.slots(), g.items(),
                          FormatByteSize(g.memory_bytes()), g.false_positive_bound()));
  }
}

}  // namespace cuckoo::ctl
