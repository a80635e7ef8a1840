// libFuzzer target for the data path's request parser (server/service/wire_format.h,
// ParseKeysRequest), differential against the generated parser.
//
// An input is a small header, then the message:
//   byte 0      number of cuts, 0-7 (low 3 bits)
//   byte 1      the limits of the second check (see LimitsFrom)
//   2 bytes     per cut: where to cut the message (little-endian, modulo
//               its size + 1; equal cuts make empty chunks)
//   the rest    the message
// Each message is parsed
//   1. with no limits, cut into chunks and whole: ParseKeysRequest must
//      accept exactly what InsertRequest::ParseFromArray accepts, with the
//      same filter, keys and if_absent;
//   2. with small server-like limits: it must never accept what the
//      generated parser rejects, and where that accepts, it must either give
//      the same values or refuse the first key past a limit.
// Any mismatch is printed and __builtin_trap(). One KeysRequest serves every
// input, as one thread's does in the server, so stale state would show.
//
// Built with -fsanitize=fuzzer,address,undefined by clang (scripts/fuzz.sh),
// or with tests/fuzz/standalone_main.cc as a corpus replay under g++.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "server/service/wire_format.h"
#include "tests/fuzz/wire_differential.h"

namespace {

using cuckoo::server::wire::KeysRequest;
using cuckoo::server::wire::KeysRequestLimits;

// Few keys, short keys and names, so that inputs the fuzzer makes cross them.
KeysRequestLimits LimitsFrom(uint8_t b) {
  return {.max_keys = b & 7u,
          .min_key_bytes = (b & 0x80) != 0 ? 0u : 1u + ((b >> 6) & 1u),
          .max_key_bytes = 1u + ((b >> 3) & 7u) * 3u,
          .max_filter_bytes = (b & 0x40) != 0 ? 3u : 128u,
          .max_request_id_bytes = (b & 0x20) != 0 ? 2u : 128u};
}

void Check(const std::string& diff, const char* what, std::string_view message,
           const std::vector<size_t>& cuts) {
  if (diff.empty()) return;
  std::fprintf(stderr, "wire_fuzz: %s: %s\n  message (%zu bytes) %s, cut at", what, diff.c_str(),
               message.size(), cuckoo::testing::Show(message).c_str());
  for (size_t c : cuts) std::fprintf(stderr, " %zu", c);
  std::fprintf(stderr, "\n");
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static KeysRequest* const ours = new KeysRequest;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t ncuts = 0;
  uint8_t limits = 0;
  if (in.size() >= 2) {
    ncuts = static_cast<uint8_t>(in[0]) & 7u;
    limits = static_cast<uint8_t>(in[1]);
    in.remove_prefix(2);
  }
  std::vector<uint16_t> raw;
  while (raw.size() < ncuts && in.size() >= 2) {
    raw.push_back(
        static_cast<uint16_t>(static_cast<uint8_t>(in[0]) | (static_cast<uint8_t>(in[1]) << 8)));
    in.remove_prefix(2);
  }
  const std::string_view message = in;
  std::vector<size_t> cuts;
  for (uint16_t r : raw) cuts.push_back(r % (message.size() + 1));

  Check(cuckoo::testing::DiffAgainstGenerated(message, cuts, ours), "no limits", message, cuts);
  if (!cuts.empty()) {
    Check(cuckoo::testing::DiffAgainstGenerated(message, {}, ours), "no limits, whole", message,
          {});
  }
  Check(cuckoo::testing::DiffWithLimits(message, cuts, LimitsFrom(limits), ours), "limits", message,
        cuts);
  return 0;
}
