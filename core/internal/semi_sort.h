// The code behind semi-sorted buckets (Fan et al., CoNEXT 2014, Section 5.2).
//
// A bucket of 4 fingerprints is a multiset: the order of its slots carries no
// information. Sorting the fingerprints makes their top 4 bits ("nibbles") a
// non-decreasing 4-tuple, and there are only C(16 + 4 - 1, 4) = 3876 such
// tuples, so a 12-bit code holds all four nibbles where 16 bits would hold
// them unsorted: one bit per slot saved.
//
// The code of a sorted tuple n0 <= n1 <= n2 <= n3 is its rank among all such
// tuples in colexicographic order: the tuple maps one-to-one onto the 4-subset
// {n0, n1 + 1, n2 + 2, n3 + 3} of {0, ..., 18}, whose colex rank is
//   C(n0, 1) + C(n1 + 1, 2) + C(n2 + 2, 3) + C(n3 + 3, 4)
// (the combinatorial number system). Encoding needs a 4 x 19 table of binomial
// coefficients; decoding a 4096-entry table of uint16_t (8 KiB, in L1). Codes
// 3876..4095 never appear in a table written by us; they decode to 0 so that a
// reader racing a writer (which may see a torn code) stays inside the table.
#ifndef CUCKOO_CORE_INTERNAL_SEMI_SORT_H_
#define CUCKOO_CORE_INTERNAL_SEMI_SORT_H_

#include <array>
#include <cstdint>

namespace cuckoo::semi_sort {

// Distinct codes: sorted 4-tuples of values in [0, 16).
inline constexpr uint32_t kCodes = 3876;
inline constexpr uint32_t kCodeBits = 12;
inline constexpr uint32_t kCodeMask = (1u << kCodeBits) - 1;
// Bits of each fingerprint that go into the code (its top bits).
inline constexpr uint32_t kNibbleBits = 4;

namespace internal {

// kChoose[k][x] = C(x, k + 1) for x in [0, 19).
inline constexpr std::array<std::array<uint16_t, 19>, 4> kChoose = [] {
  std::array<std::array<uint16_t, 19>, 4> c{};
  for (uint32_t x = 0; x < 19; ++x) {
    uint32_t v = 1;  // C(x, 0)
    for (uint32_t k = 1; k <= 4; ++k) {
      v = k <= x ? v * (x - k + 1) / k : 0;
      c[k - 1][x] = static_cast<uint16_t>(v);
    }
  }
  return c;
}();

}  // namespace internal

// Code of the nibbles n0 <= n1 <= n2 <= n3 (each < 16), in [0, kCodes).
constexpr uint32_t Encode(uint32_t n0, uint32_t n1, uint32_t n2, uint32_t n3) {
  using internal::kChoose;
  return kChoose[0][n0] + kChoose[1][n1 + 1] + kChoose[2][n2 + 2] + kChoose[3][n3 + 3];
}

// Packs four nibbles as n0 | n1 << 4 | n2 << 8 | n3 << 12.
constexpr uint16_t PackNibbles(uint32_t n0, uint32_t n1, uint32_t n2, uint32_t n3) {
  return static_cast<uint16_t>(n0 | n1 << 4 | n2 << 8 | n3 << 12);
}

// kDecode[code] = PackNibbles of the sorted tuple with that code; 0 for the
// unused codes >= kCodes.
inline constexpr std::array<uint16_t, 1u << kCodeBits> kDecode = [] {
  std::array<uint16_t, 1u << kCodeBits> d{};
  for (uint32_t a = 0; a < 16; ++a) {
    for (uint32_t b = a; b < 16; ++b) {
      for (uint32_t c = b; c < 16; ++c) {
        for (uint32_t e = c; e < 16; ++e) d[Encode(a, b, c, e)] = PackNibbles(a, b, c, e);
      }
    }
  }
  return d;
}();

// The packed sorted nibbles of `code` (any 12-bit value; see kDecode).
inline uint16_t Decode(uint32_t code) { return kDecode[code & kCodeMask]; }

}  // namespace cuckoo::semi_sort

#endif  // CUCKOO_CORE_INTERNAL_SEMI_SORT_H_
