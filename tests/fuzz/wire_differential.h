// The differential check of server/service/wire_format.h's request parser against
// the generated one, shared by tests/server/service/wire_format_test.cc and the
// fuzzer tests/fuzz/wire_fuzz.cc. Each check returns an empty string when
// the two agree, else what differs.
#ifndef CUCKOO_TESTS_FUZZ_WIRE_DIFFERENTIAL_H_
#define CUCKOO_TESTS_FUZZ_WIRE_DIFFERENTIAL_H_

#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "cuckoo/v1/filter_service.pb.h"
#include "server/service/wire_format.h"

namespace cuckoo::testing {

// A message cut into chunks at `cuts` (offsets into it, in any order; a
// repeated cut makes an empty chunk), each in its own heap block of exactly
// its size, so that a read past a chunk's end is a sanitizer error.
class Chunked {
 public:
  Chunked(std::string_view bytes, std::vector<size_t> cuts) {
    for (size_t& c : cuts) c = std::min(c, bytes.size());
    std::sort(cuts.begin(), cuts.end());
    cuts.push_back(bytes.size());
    size_t from = 0;
    for (size_t c : cuts) {
      const size_t n = c - from;
      if (n == 0) {
        views_.emplace_back();
      } else {
        owned_.push_back(std::make_unique<char[]>(n));
        std::memcpy(owned_.back().get(), bytes.data() + from, n);
        views_.emplace_back(owned_.back().get(), n);
      }
      from = c;
    }
  }
  absl::Span<const std::string_view> views() const { return views_; }
  // Whether `v` lies inside one chunk.
  bool InOneChunk(std::string_view v) const {
    for (std::string_view c : views_) {
      if (!c.empty() && v.data() >= c.data() && v.data() + v.size() <= c.data() + c.size()) {
        return true;
      }
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<char[]>> owned_;
  std::vector<std::string_view> views_;
};

// The generated parser's reading of `bytes`, with its UTF-8 complaints kept
// out of the log.
inline bool GeneratedParse(std::string_view bytes, v1::InsertRequest* out) {
  google::protobuf::LogSilencer quiet;
  return out->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

inline std::string Show(std::string_view s) {
  const std::string_view head = s.substr(0, 64);
  return absl::StrCat("\"", absl::CHexEscape(absl::string_view(head.data(), head.size())),
                      s.size() > 64 ? "...\"" : "\"");
}

inline std::string CompareValues(const v1::InsertRequest& want,
                                 const server::wire::KeysRequest& got) {
  if (got.filter != want.filter()) {
    return absl::StrCat("filter ", Show(got.filter), ", generated ", Show(want.filter()));
  }
  if (got.keys.size() != static_cast<size_t>(want.keys_size())) {
    return absl::StrCat(got.keys.size(), " keys, generated ", want.keys_size());
  }
  for (int i = 0; i < want.keys_size(); ++i) {
    if (got.keys[i] != want.keys(i)) {
      return absl::StrCat("keys[", i, "] ", Show(got.keys[i]), ", generated ", Show(want.keys(i)));
    }
  }
  if (got.if_absent != want.if_absent()) {
    return absl::StrCat("if_absent ", got.if_absent, ", generated ", want.if_absent());
  }
  if (got.request_id != want.request_id()) {
    return absl::StrCat("request_id ", Show(got.request_id), ", generated ",
                        Show(want.request_id()));
  }
  if (got.min_log_position != want.min_log_position()) {
    return absl::StrCat("min_log_position ", got.min_log_position, ", generated ",
                        want.min_log_position());
  }
  return "";
}

// With no limits, ParseKeysRequest over the chunks must accept exactly what
// the generated parser accepts, with the same values, and refuse the rest as
// malformed.
inline std::string DiffAgainstGenerated(std::string_view bytes, const std::vector<size_t>& cuts,
                                        server::wire::KeysRequest* ours) {
  v1::InsertRequest want;
  const bool want_ok = GeneratedParse(bytes, &want);
  const Chunked chunks(bytes, cuts);
  const absl::Status s = server::wire::ParseKeysRequest(chunks.views(), "InsertRequest",
                                                        server::wire::kNoLimits, ours);
  if (want_ok != s.ok()) {
    return absl::StrCat("generated parser ", want_ok ? "accepts" : "rejects", ", ours ",
                        s.ok() ? "accepts" : s.ToString());
  }
  if (!s.ok()) {
    if (s.code() != absl::StatusCode::kInvalidArgument ||
        !absl::StartsWith(s.message(), "request is not a valid cuckoo.v1.InsertRequest: ")) {
      return absl::StrCat("rejected with ", s.ToString());
    }
    return "";
  }
  for (std::string_view k : ours->keys) {
    if (!k.empty() && !chunks.InOneChunk(k) && !ours->arena.Owns(k)) {
      return absl::StrCat("key ", Show(k), " is neither in a chunk nor in the arena");
    }
  }
  return CompareValues(want, *ours);
}

// With limits, ParseKeysRequest must never accept what the generated parser
// rejects; where that accepts, ours must accept the same values or refuse
// the first key past a limit (or an oversize filter occurrence, which may
// come first in wire order).
inline std::string DiffWithLimits(std::string_view bytes, const std::vector<size_t>& cuts,
                                  const server::wire::KeysRequestLimits& limits,
                                  server::wire::KeysRequest* ours) {
  v1::InsertRequest want;
  const bool want_ok = GeneratedParse(bytes, &want);
  const Chunked chunks(bytes, cuts);
  const absl::Status s =
      server::wire::ParseKeysRequest(chunks.views(), "InsertRequest", limits, ours);
  if (!want_ok) return s.ok() ? "ours accepts what the generated parser rejects" : "";
  // The first key past a limit, in wire order, and its error.
  std::string key_error;
  for (int i = 0; i < want.keys_size() && key_error.empty(); ++i) {
    const size_t n = want.keys(i).size();
    if (static_cast<uint64_t>(i) >= limits.max_keys) {
      key_error = absl::StrFormat("batch has more than %u keys", limits.max_keys);
    } else if (n < limits.min_key_bytes) {
      key_error = n == 0 ? absl::StrFormat("keys[%d] is empty", i)
                         : absl::StrFormat("keys[%d] is %u bytes; keys must be", i, n);
    } else if (n > limits.max_key_bytes) {
      key_error = absl::StrFormat("keys[%d] is %u bytes; the server's limit", i, n);
    }
  }
  if (s.ok()) {
    if (!key_error.empty()) return absl::StrCat("ours accepts, expected ", key_error);
    if (want.filter().size() > limits.max_filter_bytes) return "ours accepts an oversize filter";
    if (want.request_id().size() > limits.max_request_id_bytes) {
      return "ours accepts an oversize request_id";
    }
    return CompareValues(want, *ours);
  }
  if (s.code() != absl::StatusCode::kInvalidArgument) return s.ToString();
  if (absl::StartsWith(s.message(), "filter name is ")) {
    // Some occurrence of the filter was too long; it need not be the last.
    uint32_t len = 0;
    if (std::sscanf(std::string(s.message()).c_str(), "filter name is %u", &len) != 1 ||
        len <= limits.max_filter_bytes) {
      return absl::StrCat("wrong filter error: ", s.ToString());
    }
    return "";
  }
  if (absl::StartsWith(s.message(), "request_id is ")) {
    // As for the filter: some occurrence was too long.
    uint32_t len = 0;
    if (std::sscanf(std::string(s.message()).c_str(), "request_id is %u", &len) != 1 ||
        len <= limits.max_request_id_bytes) {
      return absl::StrCat("wrong request_id error: ", s.ToString());
    }
    return "";
  }
  if (key_error.empty() || !absl::StartsWith(s.message(), key_error)) {
    return absl::StrCat("refused with ", s.ToString(), ", expected ",
                        key_error.empty() ? "success" : key_error);
  }
  return "";
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_FUZZ_WIRE_DIFFERENTIAL_H_
