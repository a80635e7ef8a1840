// The per-key outcomes of a filter's writes (CuckooFilter's Insert and
// Delete and their batch forms), which the server's APIs answer with.
#ifndef CUCKOO_CORE_RESULTS_H_
#define CUCKOO_CORE_RESULTS_H_

#include <cstdint>

namespace cuckoo {

// Per-key insert outcome; maps one-to-one onto the API's per-key result.
enum class InsertResult : uint8_t {
  kInserted = 0,
  // Only with if_absent: a matching fingerprint is already in one of the key's
  // buckets (the key itself, or a colliding one with probability ~FPR).
  kAlreadyPresent = 1,
  // No room: the kick chain hit max_kicks, or the key's 2b slots all hold its
  // own copies. The table is unchanged.
  kFull = 2,
};

enum class DeleteResult : uint8_t {
  kDeleted = 0,
  kNotFound = 1,
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_RESULTS_H_
