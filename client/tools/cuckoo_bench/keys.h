// The keys cuckoo-bench sends, and the request payloads it sends them in.
//
// Key i is `key_bytes` bytes derived from the 64-bit index i: the first 8 are
// SplitMix64(i) (little-endian), a bijection, so distinct indices give
// distinct keys whenever key_bytes >= 8; further 8-byte words are
// SplitMix64(i ^ (word * golden ratio)). Indices come from three disjoint
// ranges, so a key's role is known from its index alone:
//   [0, keyspace)          present keys: inserted by --populate, never deleted
//   [2^62, 2^62 + churn)   churn keys: inserted and deleted during the run
//   [2^63, 2^64)           absent keys: never inserted
//
// Payloads are encoded by hand in protobuf wire format, straight into one
// grpc::Slice. InsertRequest, LookupRequest, DeleteRequest and CountRequest
// share fields 1 (string filter) and 2 (repeated bytes keys); InsertRequest
// adds 3 (bool if_absent). So one payload of keys is a valid request for any
// of the four methods, and the server parses it like any client's request.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_KEYS_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_KEYS_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cuckoo::bench {

inline constexpr uint64_t kChurnBase = uint64_t{1} << 62;
inline constexpr uint64_t kAbsentBase = uint64_t{1} << 63;

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Writes key `index` (key_bytes bytes) to out.
inline void WriteKey(uint64_t index, int key_bytes, uint8_t* out) {
  uint64_t word = SplitMix64(index);
  for (int off = 0; off < key_bytes; off += 8) {
    if (off > 0) word = SplitMix64(index ^ (static_cast<uint64_t>(off) * 0x9E3779B97F4A7C15ull));
    const int n = key_bytes - off < 8 ? key_bytes - off : 8;
    std::memcpy(out + off, &word, n);  // Little-endian hosts only (x86-64, arm64).
  }
}

inline std::string Key(uint64_t index, int key_bytes) {
  std::string k(key_bytes, '\0');
  WriteKey(index, key_bytes, reinterpret_cast<uint8_t*>(k.data()));
  return k;
}

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline uint8_t* PutVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Bytes of a request with n keys of key_bytes each for `filter`.
inline size_t KeysRequestSize(const std::string& filter, int key_bytes, size_t n, bool if_absent) {
  const size_t key_field = 1 + VarintSize(key_bytes) + key_bytes;
  return 1 + VarintSize(filter.size()) + filter.size() + n * key_field + (if_absent ? 2 : 0);
}

// {filter, keys = [Key(index_of(0)), ..., Key(index_of(n - 1))], if_absent}
// in wire format, as one slice.
template <typename IndexOf>
grpc::ByteBuffer EncodeKeysRequest(const std::string& filter, int key_bytes, size_t n,
                                   IndexOf index_of, bool if_absent = false) {
  const size_t size = KeysRequestSize(filter, key_bytes, n, if_absent);
  grpc::Slice slice(size);
  // The new slice has one reference, ours: writing into it is safe.
  uint8_t* const begin = const_cast<uint8_t*>(slice.begin());
  uint8_t* p = begin;
  *p++ = (1 << 3) | 2;  // Field 1, length-delimited.
  p = PutVarint(filter.size(), p);
  std::memcpy(p, filter.data(), filter.size());
  p += filter.size();
  for (size_t i = 0; i < n; ++i) {
    *p++ = (2 << 3) | 2;  // Field 2, length-delimited.
    p = PutVarint(key_bytes, p);
    WriteKey(index_of(i), key_bytes, p);
    p += key_bytes;
  }
  if (if_absent) {
    *p++ = (3 << 3) | 0;  // Field 3, varint.
    *p++ = 1;
  }
  if (static_cast<size_t>(p - begin) != size) std::abort();  // KeysRequestSize is wrong.
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_KEYS_H_
