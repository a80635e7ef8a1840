// The parser limits a RESP fuzzer input selects with its header bytes 1 and 2
// (tests/fuzz/resp_fuzz.cc), shared with the corpus generator.
#ifndef CUCKOO_TESTS_FUZZ_RESP_FUZZ_LIMITS_H_
#define CUCKOO_TESTS_FUZZ_RESP_FUZZ_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "server/resp/resp_protocol.h"

namespace cuckoo::testing {

// Small limits, so that inputs the fuzzer makes cross them; b == 0xff gives
// the server's defaults.
inline server::resp::ParserLimits RespLimitsFrom(uint8_t a, uint8_t b) {
  if (b == 0xff) return server::resp::ParserLimits{};
  server::resp::ParserLimits l;
  l.max_bulk_bytes = (a & 7u) * 3u;                   // 0-21
  l.max_args = 1u + ((a >> 3) & 3u) * 3u;             // 1-10
  l.max_inline_bytes = 2u + ((a >> 5) & 7u) * 6u;     // 2-44
  l.max_command_bytes = 4u + static_cast<size_t>(b);  // 4-258
  return l;
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_FUZZ_RESP_FUZZ_LIMITS_H_
