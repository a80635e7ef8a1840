#include "server/wal/wal_format.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/little_endian.h"
#include "core/hash.h"  // xxhash.h
#include "core/registry.h"
#include "core/shape_format.h"

namespace cuckoo::server {
namespace {

// "\x89CKWAL\n\0": a high byte and a newline, as the snapshot magic.
constexpr uint8_t kSegmentMagic[8] = {0x89, 'C', 'K', 'W', 'A', 'L', '\n', 0};

// Record header: length u32, type u8, flags u8, reserved u16, lsn u64,
// synced_lsn u64, filter_id u64. The checksum, XXH3-64 of every byte before
// it, closes the record.
void PutHeader(uint8_t* out, size_t length, WalRecordType type, uint8_t flags, uint64_t lsn,
               uint64_t synced_lsn, uint64_t filter_id) {
  Put32(out, static_cast<uint32_t>(length));
  out[4] = static_cast<uint8_t>(type);
  out[5] = flags;
  out[6] = out[7] = 0;
  Put64(out + 8, lsn);
  Put64(out + 16, synced_lsn);
  Put64(out + 24, filter_id);
}

void Seal(uint8_t* out, size_t length) { Put64(out + length - 8, XXH3_64bits(out, length - 8)); }

constexpr uint8_t kFlagIfAbsent = 1;
constexpr uint8_t kFlagFullBefore = 2;
// Insert: applied under the max_capacity ceiling (ShardWrite::ceiling).
// Set only for growing filters with a max_capacity, so the logs of other
// filters stay readable by builds from before the flag.
constexpr uint8_t kFlagCeiling = 4;

// Create payload: name_length u32, reserved u32, then the shape as
// core/shape_format.h encodes it, with kFlagCreateGrowth followed by its
// growth block, then the name, zero-padded to a multiple of 8. Records
// without the flag are fixed filters (all records of builds before growth).
// The record's type on disk says the shape's field order: kCreateShapeType
// the shared encoding, which this build writes; WalRecordType::kCreateFilter
// (1) the older order (kLegacyShapeLayout) that builds before wrote. Both
// decode as kCreateFilter.
constexpr WalRecordType kCreateShapeType = static_cast<WalRecordType>(7);
constexpr size_t kCreateFixed = 8 + kShapeBytes;
constexpr size_t kCreateGrowthBytes = kShapeGrowthBytes;
constexpr uint8_t kFlagCreateGrowth = 1;

size_t Pad8(size_t n) { return (n + 7) / 8 * 8; }

}  // namespace

std::string WalSegmentPath(absl::string_view dir, uint64_t sequence) {
  return absl::StrFormat("%s/%016x%s", dir, sequence, kWalSegmentSuffix);
}

void EncodeSegmentHeader(const WalSegmentHeader& h, uint8_t out[kWalSegmentHeaderBytes]) {
  std::memset(out, 0, kWalSegmentHeaderBytes);
  std::memcpy(out, kSegmentMagic, 8);
  Put32(out + 8, kWalFormatVersion);
  Put32(out + 12, kWalSegmentHeaderBytes);
  Put64(out + 16, h.sequence);
  Put64(out + 24, h.first_lsn);
  Put64(out + 32, h.segment_bytes);
  Put64(out + 40, static_cast<uint64_t>(absl::ToUnixMicros(h.created)));
  Put64(out + 48, h.prev_last_lsn);
  Put64(out + 56, XXH3_64bits(out, 56));
}

namespace {
constexpr uint8_t kClosedMagic[8] = {0x89, 'C', 'K', 'E', 'N', 'D', '\n', 0};
}  // namespace

void EncodeWalClosed(const WalClosed& c, uint8_t out[kWalClosedBytes]) {
  std::memset(out, 0, kWalClosedBytes);
  std::memcpy(out, kClosedMagic, 8);
  Put32(out + 8, kWalFormatVersion);
  Put32(out + 12, kWalClosedBytes);
  Put64(out + 16, c.segment_sequence);
  Put64(out + 24, c.end);
  Put64(out + 32, c.last_lsn);
  Put64(out + 40, c.prepared_sequence);
  Put64(out + 48, c.prepared_bytes);
  Put64(out + 56, XXH3_64bits(out, 56));
}

bool ParseWalClosed(absl::Span<const uint8_t> data, WalClosed* c) {
  if (data.size() != kWalClosedBytes) return false;
  const uint8_t* p = data.data();
  if (std::memcmp(p, kClosedMagic, 8) != 0 || Get64(p + 56) != XXH3_64bits(p, 56) ||
      Get32(p + 8) != kWalFormatVersion || Get32(p + 12) != kWalClosedBytes) {
    return false;
  }
  c->segment_sequence = Get64(p + 16);
  c->end = Get64(p + 24);
  c->last_lsn = Get64(p + 32);
  c->prepared_sequence = Get64(p + 40);
  c->prepared_bytes = Get64(p + 48);
  return true;
}

uint32_t WalRecordLength(const uint8_t* record) { return Get32(record); }
uint64_t WalRecordLsn(const uint8_t* record) { return Get64(record + 8); }

size_t WalCreateFilterBytes(absl::string_view name, const FilterShape& shape) {
  return kWalRecordHeaderBytes + kCreateFixed + (shape.growing() ? kCreateGrowthBytes : 0) +
         Pad8(name.size()) + kWalRecordTrailerBytes;
}

size_t WalCreateFilterBytes(absl::string_view name) {
  return kWalRecordHeaderBytes + kCreateFixed + kCreateGrowthBytes + Pad8(name.size()) +
         kWalRecordTrailerBytes;
}

void EncodeShardWrite(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, const ShardWrite& w,
                      uint8_t* out) {
  const size_t length = WalShardWriteBytes(w.hashes.size());
  uint8_t flags = 0;
  if (w.if_absent) flags |= kFlagIfAbsent;
  if (w.full_before) flags |= kFlagFullBefore;
  if (w.ceiling) flags |= kFlagCeiling;
  PutHeader(out, length,
            w.kind == ShardWrite::kInsert ? WalRecordType::kInsert : WalRecordType::kDelete, flags,
            lsn, synced_lsn, filter_id);
  uint8_t* p = out + kWalRecordHeaderBytes;
  Put32(p, w.shard);
  Put32(p + 4, static_cast<uint32_t>(w.hashes.size()));
  std::memcpy(p + 8, w.hashes.data(), 8 * w.hashes.size());
  Seal(out, length);
}

void EncodeCreateFilter(uint64_t lsn, uint64_t synced_lsn, absl::string_view name,
                        const FilterShape& s, uint8_t* out) {
  const size_t length = WalCreateFilterBytes(name, s);
  std::memset(out, 0, length);
  PutHeader(out, length, kCreateShapeType, s.growing() ? kFlagCreateGrowth : 0, lsn, synced_lsn,
            lsn);
  uint8_t* p = out + kWalRecordHeaderBytes;
  Put32(p, static_cast<uint32_t>(name.size()));
  p += 8;
  EncodeShape(s, p);
  p += EncodedShapeBytes(s);
  std::memcpy(p, name.data(), name.size());
  Seal(out, length);
}

// Request payloads: keys u32, method u8, reserved u8, key_length u16,
// time (Unix µs) u64, then for results: offset u32, count u32, position u64;
// then the key and (results) the results, each zero-padded to a multiple of
// 8.
constexpr size_t kRequestFixed = 16;
constexpr size_t kResultsFixed = 16;

size_t WalRequestStartBytes(absl::string_view key) {
  return kWalRecordHeaderBytes + kRequestFixed + Pad8(key.size()) + kWalRecordTrailerBytes;
}

size_t WalRequestResultsBytes(absl::string_view key, size_t results) {
  return kWalRecordHeaderBytes + kRequestFixed + kResultsFixed + Pad8(key.size()) + Pad8(results) +
         kWalRecordTrailerBytes;
}

namespace {
uint8_t* PutRequest(uint8_t* p, const WalRequest& r) {
  Put32(p, r.keys);
  p[4] = static_cast<uint8_t>(r.method);
  p[5] = 0;
  p[6] = static_cast<uint8_t>(r.key.size());
  p[7] = static_cast<uint8_t>(r.key.size() >> 8);
  Put64(p + 8, static_cast<uint64_t>(absl::ToUnixMicros(r.time)));
  return p + kRequestFixed;
}
}  // namespace

void EncodeRequestStart(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, const WalRequest& r,
                        uint8_t* out) {
  const size_t length = WalRequestStartBytes(r.key);
  std::memset(out, 0, length);
  PutHeader(out, length, WalRecordType::kRequestStart, 0, lsn, synced_lsn, filter_id);
  uint8_t* p = PutRequest(out + kWalRecordHeaderBytes, r);
  std::memcpy(p, r.key.data(), r.key.size());
  Seal(out, length);
}

void EncodeRequestResults(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id,
                          const WalRequest& r, absl::Span<const uint8_t> results, uint8_t* out) {
  const size_t length = WalRequestResultsBytes(r.key, results.size());
  std::memset(out, 0, length);
  PutHeader(out, length, WalRecordType::kRequestResults, 0, lsn, synced_lsn, filter_id);
  uint8_t* p = PutRequest(out + kWalRecordHeaderBytes, r);
  Put32(p, r.offset);
  Put32(p + 4, static_cast<uint32_t>(results.size()));
  Put64(p + 8, r.position);
  p += kResultsFixed;
  std::memcpy(p, r.key.data(), r.key.size());
  p += Pad8(r.key.size());
  if (!results.empty()) std::memcpy(p, results.data(), results.size());
  Seal(out, length);
}

void EncodeDropFilter(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, uint8_t* out) {
  PutHeader(out, kWalDropFilterBytes, WalRecordType::kDropFilter, 0, lsn, synced_lsn, filter_id);
  Seal(out, kWalDropFilterBytes);
}

void EncodeTxnBegin(uint64_t lsn, uint64_t synced_lsn, uint8_t* out) {
  PutHeader(out, kWalTxnRecordBytes, WalRecordType::kTxnBegin, 0, lsn, synced_lsn, 0);
  Seal(out, kWalTxnRecordBytes);
}

void EncodeTxnEnd(uint64_t lsn, uint64_t synced_lsn, uint64_t begin_lsn, uint8_t* out) {
  PutHeader(out, kWalTxnRecordBytes, WalRecordType::kTxnEnd, 0, lsn, synced_lsn, begin_lsn);
  Seal(out, kWalTxnRecordBytes);
}

void EncodeSetExpiry(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, int64_t expire_at,
                     uint8_t* out) {
  PutHeader(out, kWalSetExpiryBytes, WalRecordType::kSetExpiry, 0, lsn, synced_lsn, filter_id);
  Put64(out + kWalRecordHeaderBytes, static_cast<uint64_t>(expire_at));
  Seal(out, kWalSetExpiryBytes);
}

// Rename payload: replaced_id u64, name_length u32, reserved u32, then the
// new name, zero-padded to a multiple of 8. Flag kFlagRenameReplace: RENAME
// (the destination may be replaced) rather than RENAMENX.
constexpr size_t kRenameFixed = 16;
constexpr uint8_t kFlagRenameReplace = 1;

size_t WalRenameFilterBytes(absl::string_view new_name) {
  return kWalRecordHeaderBytes + kRenameFixed + Pad8(new_name.size()) + kWalRecordTrailerBytes;
}

void EncodeRenameFilter(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id,
                        absl::string_view new_name, uint64_t replaced_id, bool replace,
                        uint8_t* out) {
  const size_t length = WalRenameFilterBytes(new_name);
  std::memset(out, 0, length);
  PutHeader(out, length, WalRecordType::kRenameFilter, replace ? kFlagRenameReplace : 0, lsn,
            synced_lsn, filter_id);
  uint8_t* p = out + kWalRecordHeaderBytes;
  Put64(p, replaced_id);
  Put32(p + 8, static_cast<uint32_t>(new_name.size()));
  std::memcpy(p + kRenameFixed, new_name.data(), new_name.size());
  Seal(out, length);
}

WalParse ParseWalRecord(absl::Span<const uint8_t> data, WalRecord* out, size_t* length,
                        std::string* why) {
  if (data.size() < 4) {
    *why = "a record header cut off by the end of the segment";
    return WalParse::kBad;
  }
  const uint32_t len = WalRecordLength(data.data());
  if (len == 0) return WalParse::kEnd;
  if (len < kWalRecordHeaderBytes + kWalRecordTrailerBytes || len % 8 != 0 ||
      len > kWalMaxRecordBytes) {
    *why = absl::StrFormat("impossible record length %u", len);
    return WalParse::kBad;
  }
  if (len > data.size()) {
    *why = absl::StrFormat("a %u-byte record runs past the end of the segment", len);
    return WalParse::kBad;
  }
  const uint8_t* p = data.data();
  if (Get64(p + len - 8) != XXH3_64bits(p, len - 8)) {
    *why = "record checksum mismatch";
    return WalParse::kBad;
  }
  // From here the bytes are as a writer wrote them: what this build does
  // not know was written by a newer one (kUnknown), and what no build would
  // write is damage (kBad). Nothing of a record parsed into *out before
  // stays (a copy of a drop record must not carry an insert's hashes).
  out->hashes.clear();
  out->write = {};
  out->name.clear();
  out->request.key.clear();
  out->request.results.clear();
  out->expire_at = 0;
  out->replaced_id = 0;
  out->replace = false;
  const uint8_t type = p[4];
  const uint8_t flags = p[5];
  out->lsn = WalRecordLsn(p);
  out->synced_lsn = Get64(p + 16);
  out->filter_id = Get64(p + 24);
  const uint8_t* payload = p + kWalRecordHeaderBytes;
  const size_t payload_bytes = len - kWalRecordHeaderBytes - kWalRecordTrailerBytes;
  auto bad = [&](std::string reason) {
    *why = std::move(reason);
    return WalParse::kBad;
  };
  auto unknown = [&](std::string reason) {
    *why = std::move(reason);
    return WalParse::kUnknown;
  };
  if (Get32(p + 4) >> 16 != 0) return bad("non-zero reserved bytes in a record header");
  if (out->lsn == 0 || out->synced_lsn >= out->lsn) {
    return bad(absl::StrFormat("impossible record positions (lsn %u, synced %u)", out->lsn,
                               out->synced_lsn));
  }
  switch (type) {
    case static_cast<uint8_t>(WalRecordType::kInsert):
    case static_cast<uint8_t>(WalRecordType::kDelete): {
      if (payload_bytes < 8) return bad("a shard write record without its shard and count");
      const uint32_t count = Get32(payload + 4);
      if (payload_bytes != 8 + uint64_t{8} * count) {
        return bad(
            absl::StrFormat("a shard write record of %u bytes holding %u hashes", len, count));
      }
      const bool insert = type == static_cast<uint8_t>(WalRecordType::kInsert);
      if ((flags & ~(insert ? (kFlagIfAbsent | kFlagFullBefore | kFlagCeiling) : 0)) != 0) {
        return unknown(absl::StrFormat("unknown record flags %#x", flags));
      }
      out->type = insert ? WalRecordType::kInsert : WalRecordType::kDelete;
      out->hashes.resize(count);
      std::memcpy(out->hashes.data(), payload + 8, 8 * size_t{count});
      out->write = {.kind = insert ? ShardWrite::kInsert : ShardWrite::kDelete,
                    .shard = Get32(payload),
                    .if_absent = (flags & kFlagIfAbsent) != 0,
                    .full_before = (flags & kFlagFullBefore) != 0,
                    .ceiling = (flags & kFlagCeiling) != 0,
                    .hashes = out->hashes};
      break;
    }
    case static_cast<uint8_t>(WalRecordType::kCreateFilter):
    case static_cast<uint8_t>(kCreateShapeType): {
      if ((flags & ~kFlagCreateGrowth) != 0) {
        return unknown(absl::StrFormat("unknown record flags %#x", flags));
      }
      const bool growth = (flags & kFlagCreateGrowth) != 0;
      const size_t fixed = kCreateFixed + (growth ? kCreateGrowthBytes : 0);
      if (payload_bytes < fixed) return bad("a create record too short for a filter");
      const uint32_t name_len = Get32(payload);
      if (name_len == 0 || name_len > kMaxFilterNameBytes ||
          payload_bytes != fixed + Pad8(name_len)) {
        return bad(absl::StrFormat("a create record with a %u-byte name in %u bytes", name_len,
                                   payload_bytes));
      }
      if (out->filter_id != out->lsn) return bad("a create record whose filter id is not its lsn");
      const uint8_t* q = payload + 8;
      constexpr absl::string_view kCannotUse =
          "a create record with settings this build cannot use: ";
      if (type == static_cast<uint8_t>(kCreateShapeType)) {
        absl::StatusOr<FilterShape> s = DecodeShape(absl::MakeConstSpan(q, fixed - 8), growth);
        if (absl::IsFailedPrecondition(s.status())) {
          return unknown(
              absl::StrCat("a create record of a newer cuckood: ", s.status().message()));
        }
        if (absl::IsDataLoss(s.status())) {
          return bad(absl::StrCat("a create record's shape: ", s.status().message()));
        }
        if (!s.ok()) return bad(absl::StrCat(kCannotUse, s.status().message()));
        out->shape = *s;
      } else {
        // The older order; its reserved u32 after the shape's u32s was
        // never checked.
        const FilterShape s =
            ReadShapeFields(kLegacyShapeLayout, q, growth ? q + kShapeBytes : nullptr);
        if (growth) {
          if (Get32(q + kShapeBytes + 4) != 0) {
            return bad("non-zero reserved bytes in a create record's growth");
          }
          if (s.growth_factor == 0) return bad("a create record's growth block without a factor");
        }
        if (absl::Status st = CheckShape(s); !st.ok()) {
          return bad(absl::StrCat(kCannotUse, st.message()));
        }
        out->shape = s;
      }
      q += fixed - 8;
      out->type = WalRecordType::kCreateFilter;
      out->name.assign(reinterpret_cast<const char*>(q), name_len);
      if (absl::Status st = FilterRegistry::ValidateName(out->name); !st.ok()) {
        return bad(absl::StrCat("a create record with a bad filter name: ", st.message()));
      }
      break;
    }
    case static_cast<uint8_t>(WalRecordType::kDropFilter):
      if (flags != 0 || payload_bytes != 0) return bad("a drop record with a payload");
      out->type = WalRecordType::kDropFilter;
      break;
    case static_cast<uint8_t>(WalRecordType::kTxnBegin):
      if (flags != 0) return unknown(absl::StrFormat("unknown record flags %#x", flags));
      if (payload_bytes != 0) return bad("a transaction's begin record with a payload");
      if (out->filter_id != 0) return bad("a transaction's begin record with a filter id");
      out->type = WalRecordType::kTxnBegin;
      break;
    case static_cast<uint8_t>(WalRecordType::kTxnEnd):
      if (flags != 0) return unknown(absl::StrFormat("unknown record flags %#x", flags));
      if (payload_bytes != 0) return bad("a transaction's end record with a payload");
      if (out->filter_id == 0 || out->filter_id >= out->lsn) {
        return bad(absl::StrFormat("a transaction's end record at lsn %u naming begin lsn %u",
                                   out->lsn, out->filter_id));
      }
      out->type = WalRecordType::kTxnEnd;
      break;
    case static_cast<uint8_t>(WalRecordType::kSetExpiry): {
      if (flags != 0) return unknown(absl::StrFormat("unknown record flags %#x", flags));
      if (payload_bytes != 8) {
        return bad(
            absl::StrFormat("an expiry record of %u payload bytes (8 expected)", payload_bytes));
      }
      const auto expire_at = static_cast<int64_t>(Get64(payload));
      if (expire_at < 0 || expire_at > kWalMaxExpireAt) {
        return bad(absl::StrFormat("an expiry record with expire_at %d (0 to %d)", expire_at,
                                   kWalMaxExpireAt));
      }
      if (out->filter_id == 0) return bad("an expiry record of filter id 0");
      out->type = WalRecordType::kSetExpiry;
      out->expire_at = expire_at;
      break;
    }
    case static_cast<uint8_t>(WalRecordType::kRenameFilter): {
      if ((flags & ~kFlagRenameReplace) != 0) {
        return unknown(absl::StrFormat("unknown record flags %#x", flags));
      }
      if (payload_bytes < kRenameFixed) return bad("a rename record too short for its fields");
      const uint64_t replaced = Get64(payload);
      const uint32_t name_len = Get32(payload + 8);
      if (Get32(payload + 12) != 0) return bad("non-zero reserved bytes in a rename record");
      if (name_len == 0 || name_len > kMaxFilterNameBytes ||
          payload_bytes != kRenameFixed + Pad8(name_len)) {
        return bad(absl::StrFormat("a rename record with a %u-byte name in %u bytes", name_len,
                                   payload_bytes));
      }
      if (out->filter_id == 0 || out->filter_id >= out->lsn || replaced >= out->lsn ||
          replaced == out->filter_id) {
        return bad(absl::StrFormat(
            "a rename record at lsn %u of filter %u replacing filter %u: impossible filter ids",
            out->lsn, out->filter_id, replaced));
      }
      const uint8_t* q = payload + kRenameFixed;
      for (size_t i = name_len; i < Pad8(name_len); ++i) {
        if (q[i] != 0) return bad("non-zero padding after a rename record's name");
      }
      out->name.assign(reinterpret_cast<const char*>(q), name_len);
      if (absl::Status st = FilterRegistry::ValidateName(out->name); !st.ok()) {
        return bad(absl::StrCat("a rename record with a bad filter name: ", st.message()));
      }
      out->replaced_id = replaced;
      out->replace = (flags & kFlagRenameReplace) != 0;
      out->type = WalRecordType::kRenameFilter;
      break;
    }
    case static_cast<uint8_t>(WalRecordType::kRequestStart):
    case static_cast<uint8_t>(WalRecordType::kRequestResults): {
      const bool start = type == static_cast<uint8_t>(WalRecordType::kRequestStart);
      if (flags != 0) return unknown(absl::StrFormat("unknown record flags %#x", flags));
      const size_t fixed = kRequestFixed + (start ? 0 : kResultsFixed);
      if (payload_bytes < fixed) return bad("a request record too short for its fields");
      WalRequest& r = out->request;
      r.keys = Get32(payload);
      const uint8_t method = payload[4];
      if (method != ShardWrite::kInsert && method != ShardWrite::kDelete) {
        return unknown(absl::StrFormat("unknown request method %u", method));
      }
      r.method = static_cast<ShardWrite::Kind>(method);
      const size_t key_len = payload[6] | (size_t{payload[7]} << 8);
      r.time = absl::FromUnixMicros(static_cast<int64_t>(Get64(payload + 8)));
      const uint8_t* q = payload + kRequestFixed;
      size_t count = 0;
      if (!start) {
        r.offset = Get32(q);
        count = Get32(q + 4);
        r.position = Get64(q + 8);
        q += kResultsFixed;
      }
      if (payload[5] != 0 || key_len == 0 || key_len > kWalMaxRequestKeyBytes ||
          count > kWalResultsPerRecord || payload_bytes != fixed + Pad8(key_len) + Pad8(count) ||
          (!start && uint64_t{r.offset} + count > r.keys)) {
        return bad(absl::StrFormat("a request record of %u bytes with impossible fields", len));
      }
      r.key.assign(reinterpret_cast<const char*>(q), key_len);
      q += Pad8(key_len);
      r.results.assign(q, q + count);
      out->type = start ? WalRecordType::kRequestStart : WalRecordType::kRequestResults;
      break;
    }
    default:
      return unknown(absl::StrFormat("unknown record type %u", type));
  }
  *length = len;
  return WalParse::kRecord;
}

namespace {

enum class HeaderState { kOk, kZero, kBad, kNewer };

HeaderState ParseSegmentHeader(absl::Span<const uint8_t> data, WalSegmentHeader* h,
                               std::string* why) {
  if (data.size() < kWalSegmentHeaderBytes) {
    *why = absl::StrFormat("the file is %u bytes, shorter than a segment header", data.size());
    return data.empty() ? HeaderState::kZero : HeaderState::kBad;
  }
  if (std::all_of(data.begin(), data.begin() + kWalSegmentHeaderBytes,
                  [](uint8_t b) { return b == 0; })) {
    return HeaderState::kZero;
  }
  const uint8_t* p = data.data();
  if (std::memcmp(p, kSegmentMagic, 8) != 0) {
    *why = "not a cuckood log segment (bad magic number)";
    return HeaderState::kBad;
  }
  if (Get64(p + 56) != XXH3_64bits(p, 56)) {
    *why = "segment header checksum mismatch";
    return HeaderState::kBad;
  }
  if (Get32(p + 8) != kWalFormatVersion || Get32(p + 12) != kWalSegmentHeaderBytes) {
    *why = absl::StrFormat(
        "segment format version %u is not one this build reads (version %u): a newer cuckood "
        "wrote it",
        Get32(p + 8), kWalFormatVersion);
    return HeaderState::kNewer;
  }
  h->sequence = Get64(p + 16);
  h->first_lsn = Get64(p + 24);
  h->segment_bytes = Get64(p + 32);
  h->created = absl::FromUnixMicros(static_cast<int64_t>(Get64(p + 40)));
  h->prev_last_lsn = Get64(p + 48);
  if (h->first_lsn == 0 || h->prev_last_lsn >= h->first_lsn) {
    *why = absl::StrFormat("impossible segment header (first lsn %u, previous segment's last %u)",
                           h->first_lsn, h->prev_last_lsn);
    return HeaderState::kBad;
  }
  return HeaderState::kOk;
}

struct SegmentFile {
  std::string path;
  uint64_t sequence;
  std::vector<uint8_t> bytes;
};

// The first `limit` bytes of `path` (all if shorter), counted in *read.
// The file's size goes to *size if not null.
absl::StatusOr<std::vector<uint8_t>> ReadAll(Env* env, const std::string& path, uint64_t* read,
                                             uint64_t limit = UINT64_MAX,
                                             uint64_t* file_size = nullptr) {
  absl::StatusOr<std::unique_ptr<EnvFile>> f = env->Open(path);
  if (!f.ok()) return f.status();
  absl::StatusOr<uint64_t> size = (*f)->Size();
  if (!size.ok()) return size.status();
  if (file_size != nullptr) *file_size = *size;
  std::vector<uint8_t> bytes(std::min(*size, limit));
  absl::StatusOr<size_t> n = (*f)->Read(0, absl::MakeSpan(bytes));
  if (!n.ok()) return n.status();
  bytes.resize(*n);
  *read += *n;
  return bytes;
}

// Whether `data` is a segment whose records chain from its header to
// exactly its end, the last one `last_lsn`.
bool ChainEndsAt(absl::Span<const uint8_t> data, uint64_t last_lsn) {
  WalSegmentHeader h;
  std::string why;
  if (ParseSegmentHeader(data, &h, &why) != HeaderState::kOk) return false;
  uint64_t expected = h.first_lsn;
  WalRecord r;
  for (size_t off = kWalSegmentHeaderBytes; off < data.size(); ++expected) {
    size_t len = 0;
    if (ParseWalRecord(data.subspan(off), &r, &len, &why) != WalParse::kRecord ||
        r.lsn != expected) {
      return false;
    }
    off += len;
  }
  return expected - 1 == last_lsn;
}

// Whether some valid record at an 8-byte aligned offset of `data` from
// `from` on says `lsn` had been made durable (its synced_lsn >= lsn).
bool ProvesDurable(absl::Span<const uint8_t> data, size_t from, uint64_t lsn) {
  WalRecord r;
  std::string why;
  for (size_t off = (from + 7) / 8 * 8; off + 4 <= data.size(); off += 8) {
    if (Get32(data.data() + off) == 0) continue;
    size_t len;
    if (ParseWalRecord(data.subspan(off), &r, &len, &why) == WalParse::kRecord &&
        r.synced_lsn >= lsn) {
      return true;
    }
  }
  return false;
}

// The lowest lsn of a valid record at an aligned offset of `data`, or
// UINT64_MAX.
uint64_t MinValidLsn(absl::Span<const uint8_t> data) {
  WalRecord r;
  std::string why;
  uint64_t min = UINT64_MAX;
  for (size_t off = 0; off + 4 <= data.size(); off += 8) {
    size_t len;
    if (Get32(data.data() + off) != 0 &&
        ParseWalRecord(data.subspan(off), &r, &len, &why) == WalParse::kRecord) {
      min = std::min(min, r.lsn);
    }
  }
  return min;
}

}  // namespace

// ScanWal's reading: as ScanWal, applying every record, except that the log
// ends before the record of lsn `stop_lsn` (`stop_why` says why).
absl::StatusOr<WalScan> ScanWalPass(Env* env, const std::string& dir,
                                    const std::function<absl::Status(const WalRecord&)>& apply,
                                    uint64_t stop_lsn, const std::string& stop_why) {
  absl::StatusOr<std::vector<std::string>> names = env->List(dir);
  if (!names.ok() && EnvErrno(names.status()) == ENOENT) return WalScan{};  // No log yet.
  if (!names.ok()) return names.status();
  std::vector<std::pair<uint64_t, std::string>> files;
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, kWalSegmentSuffix)) continue;
    uint64_t seq;
    const absl::string_view stem =
        absl::string_view(name).substr(0, name.size() - kWalSegmentSuffix.size());
    if (stem.size() != 16 ||
        !std::all_of(stem.begin(), stem.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }) ||
        !absl::SimpleHexAtoi(stem, &seq)) {
      return absl::DataLossError(
          absl::StrFormat("%s/%s: not a log segment name (<16 hex digits>.wal); move it out of %s",
                          dir, name, dir));
    }
    files.emplace_back(seq, absl::StrCat(dir, "/", name));
  }
  std::sort(files.begin(), files.end());

  WalScan scan;
  // A clean close's record, if it matches the files: the log is its last
  // segment's records up to `end`, followed by zeros, and the prepared
  // segment is all zeros (checked at their starts only).
  WalClosed closed;
  bool have_closed = false;
  if (std::find(names->begin(), names->end(), kWalClosedName) != names->end()) {
    scan.closed_file = absl::StrCat(dir, "/", kWalClosedName);
    absl::StatusOr<std::vector<uint8_t>> bytes =
        ReadAll(env, scan.closed_file, &scan.read_bytes, kWalClosedBytes + 1);
    if (!bytes.ok()) return bytes.status();
    WalClosed c;
    if (!ParseWalClosed(*bytes, &c)) {
      scan.closed_ignored = "it is not a valid clean-close record";
    } else {
      // Only the prepared segment may follow the last one.
      auto it = std::find_if(files.begin(), files.end(),
                             [&](const auto& f) { return f.first == c.segment_sequence; });
      const size_t after = c.segment_sequence == 0 ? files.size() : files.end() - it - 1;
      if ((c.segment_sequence != 0 && it == files.end()) ||
          (c.segment_sequence == 0 && files.size() > 1) ||
          (after == 1 && files.back().first != c.prepared_sequence) || after > 1) {
        scan.closed_ignored = absl::StrFormat(
            "it names segment %u and prepared segment %u, which are not the log's last files",
            c.segment_sequence, c.prepared_sequence);
      } else {
        closed = c;
        have_closed = true;
      }
    }
  }
  WalRecord record;
  std::string why;
  uint64_t expected = 0;  // The next record's lsn; 0 before the first.
  auto all_zero = [](absl::Span<const uint8_t> d) {
    return std::all_of(d.begin(), d.end(), [](uint8_t b) { return b == 0; });
  };
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& path = files[i].second;
    if (have_closed && closed.prepared_sequence != 0 && i + 1 == files.size() &&
        files[i].first == closed.prepared_sequence) {
      // The prepared segment of a clean close: its size, and zeros where
      // starting it would have written a header.
      uint64_t size = 0;
      absl::StatusOr<std::vector<uint8_t>> start =
          ReadAll(env, path, &scan.read_bytes, kWalClosedCheckBytes, &size);
      if (!start.ok()) return start.status();
      if (size == closed.prepared_bytes && all_zero(*start)) {
        scan.prepared = {.path = path, .sequence = files[i].first, .file_bytes = size};
        scan.closed_cleanly = true;
        return scan;
      }
      scan.closed_ignored =
          absl::StrFormat("the prepared segment %s is not %u bytes of zeros as it says", path,
                          closed.prepared_bytes);
      have_closed = false;
    }
    std::optional<absl::StatusOr<std::vector<uint8_t>>> read;
    uint64_t file_bytes = 0;
    if (have_closed && files[i].first == closed.segment_sequence) {
      // The last segment of a clean close: its records up to `end`, then
      // zeros as far as checked.
      read = ReadAll(env, path, &scan.read_bytes, closed.end + kWalClosedCheckBytes, &file_bytes);
      if (!read->ok()) return read->status();
      const absl::Span<const uint8_t> part(**read);
      if (closed.end <= part.size() && all_zero(part.subspan(closed.end)) &&
          ChainEndsAt(part.first(closed.end), closed.last_lsn)) {
        (*read)->resize(closed.end);
      } else {
        scan.closed_ignored =
            absl::StrFormat("the segment %s does not end at offset %u after lsn %u as it says",
                            path, closed.end, closed.last_lsn);
        have_closed = false;
        read.reset();
      }
    }
    if (!read.has_value()) read = ReadAll(env, path, &scan.read_bytes, UINT64_MAX, &file_bytes);
    absl::StatusOr<std::vector<uint8_t>>& bytes = *read;
    if (!bytes.ok()) return bytes.status();
    const absl::Span<const uint8_t> data(*bytes);
    WalSegmentHeader h;
    const HeaderState hs = ParseSegmentHeader(data, &h, &why);
    auto newer = [&](size_t offset) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s at offset %u: %s; this build cannot replay the write-ahead log in %s: run the newer "
          "cuckood again",
          path, offset, why, dir));
    };
    if (hs == HeaderState::kNewer) return newer(0);
    // Where the log ends, if it ends in this file, and what is there
    // instead of the next record ("" when only zeros are).
    size_t end_at = 0;
    std::string end_why;
    bool stopped = false;  // At stop_lsn.
    const bool continues =
        hs == HeaderState::kOk &&
        (scan.segments.empty() || h.prev_last_lsn == scan.segments.back().last_lsn);
    if (hs == HeaderState::kOk && !continues) {
      // Segments are only started after the one before is complete; this
      // one's predecessor lost records at its end.
      end_why = absl::StrFormat("the segment follows lsn %u, but the log before it ends at lsn %u",
                                h.prev_last_lsn, scan.segments.back().last_lsn);
    } else if (hs != HeaderState::kOk) {
      // Prepared but never used (zeros), or a header torn by a crash while
      // the segment was being started.
      if (hs == HeaderState::kBad) {
        end_why = why;
      } else if (!all_zero(data)) {
        end_why = "a segment without a header holds written bytes";
      }
    } else {
      if (h.sequence != files[i].first) {
        return absl::DataLossError(absl::StrFormat(
            "%s: the segment header says it is segment %u; the log in %s is damaged (was a file "
            "copied or renamed?)",
            path, h.sequence, dir));
      }
      expected = h.first_lsn;
      WalSegmentInfo info{.path = path,
                          .sequence = h.sequence,
                          .first_lsn = h.first_lsn,
                          .last_lsn = h.first_lsn - 1,
                          .end = kWalSegmentHeaderBytes,
                          .file_bytes = file_bytes};
      size_t off = kWalSegmentHeaderBytes;
      bool ended = false;
      while (off < data.size()) {
        size_t len = 0;
        const WalParse p = ParseWalRecord(data.subspan(off), &record, &len, &why);
        if (p == WalParse::kUnknown) return newer(off);
        if (p == WalParse::kRecord && record.lsn != expected) {
          why = absl::StrFormat("a record with lsn %u where lsn %u was next", record.lsn, expected);
        }
        if (p == WalParse::kRecord && record.lsn == expected && record.lsn >= stop_lsn) {
          // Cut here on purpose: not damage, whatever follows says.
          ended = stopped = true;
          end_at = off;
          end_why = stop_why;
          break;
        }
        if (p != WalParse::kRecord || record.lsn != expected) {
          ended = true;
          end_at = off;
          if (p != WalParse::kEnd) {
            end_why = why;
          } else if (!all_zero(data.subspan(off))) {
            end_why = "a zero record length followed by written bytes";
          } else {
            ended = false;  // Only zeros: the log goes on in the next segment, if one follows.
          }
          break;
        }
        if (absl::Status s = apply(record); !s.ok()) return s;
        ++scan.records;
        scan.bytes += len;
        info.last_lsn = record.lsn;
        ++expected;
        off += len;
        info.end = off;
      }
      scan.last_lsn = std::max(scan.last_lsn, info.last_lsn);
      scan.segments.push_back(info);
      if (!ended) continue;  // Full (or zeros): the log goes on in the next segment, if any.
    }
    // The log ends in file i. A clean end has nothing written after it; a
    // torn write is cut off; damage is told from a torn write by a later
    // record that says the missing lsn had been made durable.
    // Before the first valid record, the first lsn this file holds stands
    // for the missing one (its header is what is missing).
    const uint64_t missing = expected != 0 ? expected : MinValidLsn(data);
    // The size of the last file, if it is all zeros.
    std::optional<uint64_t> last_all_zero;
    if (i + 1 == files.size() && hs == HeaderState::kZero && end_why.empty()) {
      last_all_zero = data.size();
    }
    bool written_after = !end_why.empty();
    bool proven = !stopped && ProvesDurable(data, end_at, missing);
    if (!continues) scan.unused.push_back(path);
    // This segment's bytes are not needed past here: one segment in memory
    // at a time (WalApplier::ReplayMemoryBound).
    *bytes = std::vector<uint8_t>();
    for (size_t j = i + 1; j < files.size(); ++j) {
      absl::StatusOr<std::vector<uint8_t>> later = ReadAll(env, files[j].second, &scan.read_bytes);
      if (!later.ok()) return later.status();
      if (!all_zero(*later)) {
        written_after = true;
      } else if (j + 1 == files.size()) {
        last_all_zero = later->size();
      }
      proven = proven || (!stopped && ProvesDurable(*later, 0, missing));
      scan.unused.push_back(files[j].second);
    }
    if (proven) {
      return absl::DataLossError(absl::StrFormat(
          "write-ahead log damaged: %s at offset %u: %s. A later record shows that lsn %u had "
          "been made durable, so this is not a write torn by a crash, and skipping it would lose "
          "acknowledged writes. Restore %s from a backup; or, to start from the snapshots and "
          "lose the writes logged after them, move %s aside",
          path, end_at, end_why.empty() ? "no record where one was due" : end_why, missing, dir,
          dir));
    }
    if (have_closed) {
      scan.closed_ignored = absl::StrFormat("the log ends in %s, before where it says", path);
    }
    if (written_after) {
      scan.cut = absl::StrFormat("%s at offset %u: %s", path, end_at,
                                 end_why.empty() ? "bytes written after the end" : end_why);
    }
    // A last file that is all zeros is a prepared segment never started:
    // the log reuses it rather than write a new one (docs/WAL_FORMAT.md,
    // "Preallocation").
    if (!scan.unused.empty() && scan.unused.back() == files.back().second &&
        last_all_zero.has_value()) {
      scan.prepared = {.path = files.back().second,
                       .sequence = files.back().first,
                       .file_bytes = *last_all_zero};
      scan.unused.pop_back();
    }
    return scan;
  }
  scan.closed_cleanly = have_closed;
  return scan;
}

namespace {

// The records read after a transaction's begin, held back until every
// transaction open then has ended (they are applied then), since a log
// that ends before some begin's end is cut at that begin. A record's
// hashes are its own copy.
class HeldRecords {
 public:
  // Past this much, the records are dropped and a second pass applies them.
  static constexpr uint64_t kMaxBytes = kWalScanHeldBytes;

  bool empty() const { return records_.empty(); }
  uint64_t first_lsn() const { return records_.front().lsn; }
  // False (and nothing more held) when the record would pass kMaxBytes.
  bool Hold(const WalRecord& r) {
    const uint64_t bytes = sizeof(WalRecord) + 8 * r.hashes.size() + r.name.size() +
                           r.request.key.size() + r.request.results.size();
    if (bytes_ + bytes > kMaxBytes) return false;
    bytes_ += bytes;
    WalRecord& held = records_.emplace_back(r);
    held.write.hashes = held.hashes;  // Not the caller's buffer.
    return true;
  }
  absl::Status ApplyAll(const std::function<absl::Status(const WalRecord&)>& apply) {
    for (const WalRecord& r : records_) {
      if (absl::Status s = apply(r); !s.ok()) return s;
    }
    Clear();
    return absl::OkStatus();
  }
  void Clear() {
    std::deque<WalRecord>().swap(records_);
    bytes_ = 0;
  }

 private:
  std::deque<WalRecord> records_;
  uint64_t bytes_ = 0;
};

}  // namespace

absl::StatusOr<WalScan> ScanWal(Env* env, const std::string& dir,
                                const std::function<absl::Status(const WalRecord&)>& apply) {
  // One pass applies the records, holding back those after a transaction's
  // begin until every open transaction has ended (most logs hold no
  // transaction, or short ones). A log that ends inside transactions is
  // read again, to end it where the run of overlapping transactions still
  // open at its end began; and so is
  // one whose held records grew past their bound, to apply them.
  std::set<uint64_t> open;  // Begins without their end so far.
  // Where the run of overlapping transactions open now began: the log is
  // cut there if it ends before they all have. (Cut at a later begin of the
  // run, it would keep part of a transaction begun before and ended after.)
  uint64_t run_start = 0;
  HeldRecords held;
  uint64_t unapplied_from = 0;  // The first record not applied (0: none).
  absl::StatusOr<WalScan> scan = ScanWalPass(
      env, dir,
      [&](const WalRecord& r) -> absl::Status {
        if (r.type == WalRecordType::kTxnBegin) {
          if (open.empty()) run_start = r.lsn;
          open.insert(r.lsn);
        }
        // (An end whose begin is not in the log: the begin's segment was
        // truncated after the transaction ended.)
        if (r.type == WalRecordType::kTxnEnd) open.erase(r.filter_id);
        if (unapplied_from != 0) return absl::OkStatus();
        if (open.empty()) {
          if (absl::Status s = held.ApplyAll(apply); !s.ok()) return s;
          return apply(r);
        }
        if (!held.Hold(r)) {
          // The second read applies them, and the rest.
          unapplied_from = held.empty() ? r.lsn : held.first_lsn();
          held.Clear();
        }
        return absl::OkStatus();
      },
      UINT64_MAX, std::string());
  if (!scan.ok()) return scan;
  if (open.empty() && unapplied_from == 0) return scan;
  // The held records are the open run's, from its start: all cut off.
  const uint64_t cut = open.empty() ? UINT64_MAX : run_start;
  held.Clear();
  if (cut != UINT64_MAX && scan->closed_cleanly) {
    // Wal::Close writes the clean-close file only with no transaction open.
    return absl::DataLossError(absl::StrFormat(
        "write-ahead log %s: its clean-close file says it was closed cleanly, but the log ends "
        "inside the transaction begun at lsn %u; remove %s/%s and start again (the log is then "
        "read whole and cut at that transaction)",
        dir, cut, dir, kWalClosedName));
  }
  const uint64_t last_lsn = scan->last_lsn;
  const std::string why =
      cut == UINT64_MAX
          ? std::string()
          : absl::StrFormat(
                "the transaction begun at lsn %u (or one overlapping it) has no end record, so "
                "it and the %u records after it, none of them acknowledged, are cut off",
                cut, last_lsn - cut);
  absl::StatusOr<WalScan> cut_scan = ScanWalPass(
      env, dir,
      [&](const WalRecord& r) {
        return unapplied_from != 0 && r.lsn >= unapplied_from ? apply(r) : absl::OkStatus();
      },
      cut, why);
  if (!cut_scan.ok()) return cut_scan;
  cut_scan->read_bytes += scan->read_bytes;
  if (cut != UINT64_MAX) {
    cut_scan->cut_transaction = cut;
    cut_scan->cut_records = last_lsn - cut + 1;
  }
  return cut_scan;
}

}  // namespace cuckoo::server
