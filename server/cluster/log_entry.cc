#include "server/cluster/log_entry.h"

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/little_endian.h"
#include "core/registry.h"
#include "core/shape_format.h"
#include "xxhash.h"

static_assert(cuckoo::server::kLogEntryMaxNameBytes == cuckoo::kMaxFilterNameBytes,
              "an entry's size bound must cover the longest name");

namespace cuckoo::server {
namespace {

constexpr uint32_t kMagic = 0x454c4b43;  // "CKLE" little-endian.
// Flags: an insert's if_absent; a create's growth block after the shape.
constexpr uint8_t kFlagIfAbsent = 1;
constexpr uint8_t kFlagGrowth = 2;
// A rename's: it may replace the filter of its new name (RENAME).
constexpr uint8_t kFlagReplace = 1;
// A rename's tail before the new name: replaced_id u64, its length u32, 0 u32.
constexpr size_t kRenameFixed = 16;

size_t Pad8(size_t n) { return (n + 7) / 8 * 8; }

// The header and the padded name; `tail` bytes follow, then the checksum.
std::string Frame(LogEntryType type, uint8_t flags, uint64_t filter_id, absl::string_view name,
                  uint32_t hashes, size_t tail) {
  std::string out(kLogEntryHeaderBytes + Pad8(name.size()) + tail + kLogEntryTrailerBytes, '\0');
  Put32(out.data(), kMagic);
  out[4] = static_cast<char>(kLogEntryVersion);
  out[5] = static_cast<char>(type);
  out[6] = static_cast<char>(flags);
  Put64(out.data() + 8, filter_id);
  Put32(out.data() + 16, hashes);
  Put32(out.data() + 20, static_cast<uint32_t>(name.size()));
  std::memcpy(out.data() + kLogEntryHeaderBytes, name.data(), name.size());
  return out;
}

std::string Seal(std::string out) {
  Put64(out.data() + out.size() - 8, XXH3_64bits(out.data(), out.size() - 8));
  return out;
}

std::string HashesEntry(LogEntryType type, uint8_t flags, uint64_t filter_id,
                        absl::string_view name, absl::Span<const uint64_t> hashes) {
  std::string out =
      Frame(type, flags, filter_id, name, static_cast<uint32_t>(hashes.size()), 8 * hashes.size());
  if (!hashes.empty()) {
    std::memcpy(out.data() + kLogEntryHeaderBytes + Pad8(name.size()), hashes.data(),
                8 * hashes.size());
  }
  return Seal(std::move(out));
}

absl::Status Bad(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("bad cluster log entry: ", why));
}

}  // namespace

absl::string_view LogEntryTypeName(LogEntryType type) {
  switch (type) {
    case LogEntryType::kCreateFilter:
      return "create";
    case LogEntryType::kDropFilter:
      return "drop";
    case LogEntryType::kInsert:
      return "insert";
    case LogEntryType::kDelete:
      return "delete";
    case LogEntryType::kSetExpiry:
      return "expire";
    case LogEntryType::kRenameFilter:
      return "rename";
  }
  return "unknown";
}

std::string EncodeInsertEntry(uint64_t filter_id, absl::string_view name, bool if_absent,
                              absl::Span<const uint64_t> hashes) {
  return HashesEntry(LogEntryType::kInsert, if_absent ? kFlagIfAbsent : 0, filter_id, name, hashes);
}

std::string EncodeDeleteEntry(uint64_t filter_id, absl::string_view name,
                              absl::Span<const uint64_t> hashes) {
  return HashesEntry(LogEntryType::kDelete, 0, filter_id, name, hashes);
}

std::string EncodeCreateEntry(absl::string_view name, const FilterShape& s) {
  std::string out = Frame(LogEntryType::kCreateFilter, s.growing() ? kFlagGrowth : 0, 0, name, 0,
                          EncodedShapeBytes(s));
  EncodeShape(s, reinterpret_cast<uint8_t*>(out.data()) + kLogEntryHeaderBytes + Pad8(name.size()));
  return Seal(std::move(out));
}

std::string EncodeDropEntry(uint64_t filter_id, absl::string_view name) {
  return Seal(Frame(LogEntryType::kDropFilter, 0, filter_id, name, 0, 0));
}

std::string EncodeSetExpiryEntry(uint64_t filter_id, absl::string_view name, int64_t expire_at) {
  std::string out = Frame(LogEntryType::kSetExpiry, 0, filter_id, name, 0, 8);
  Put64(out.data() + kLogEntryHeaderBytes + Pad8(name.size()), static_cast<uint64_t>(expire_at));
  return Seal(std::move(out));
}

std::string EncodeRenameEntry(uint64_t filter_id, absl::string_view name,
                              absl::string_view new_name, uint64_t replaced_id, bool replace) {
  std::string out = Frame(LogEntryType::kRenameFilter, replace ? kFlagReplace : 0, filter_id, name,
                          0, kRenameFixed + Pad8(new_name.size()));
  char* tail = out.data() + kLogEntryHeaderBytes + Pad8(name.size());
  Put64(tail, replaced_id);
  Put32(tail + 8, static_cast<uint32_t>(new_name.size()));
  std::memcpy(tail + kRenameFixed, new_name.data(), new_name.size());
  return Seal(std::move(out));
}

absl::StatusOr<LogEntry> DecodeLogEntry(absl::string_view bytes) {
  const size_t n = bytes.size();
  if (n < kLogEntryHeaderBytes + kLogEntryTrailerBytes) {
    return Bad(absl::StrFormat("%u bytes, shorter than any entry (%u)", n,
                               kLogEntryHeaderBytes + kLogEntryTrailerBytes));
  }
  const char* p = bytes.data();
  if (Get32(p) != kMagic) return Bad("no CKLE magic: not written by cuckood");
  if (Get64(p + n - 8) != XXH3_64bits(p, n - 8)) return Bad("checksum mismatch");
  const uint8_t version = static_cast<uint8_t>(p[4]);
  const uint8_t type = static_cast<uint8_t>(p[5]);
  const uint8_t flags = static_cast<uint8_t>(p[6]);
  if (version > kLogEntryVersion || type < 1 || type > 6 ||
      (flags & ~(kFlagIfAbsent | kFlagGrowth)) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cluster log entry of version %d, type %d, flags %d: written by a newer cuckood (this "
        "one writes version %d); upgrade this replica",
        version, type, flags, kLogEntryVersion));
  }
  if (version == 0 || p[7] != 0) return Bad("version 0 or reserved header byte set");
  LogEntry e;
  e.type = static_cast<LogEntryType>(type);
  e.filter_id = Get64(p + 8);
  const uint32_t hashes = Get32(p + 16);
  const uint32_t name_bytes = Get32(p + 20);
  const size_t body = n - kLogEntryHeaderBytes - kLogEntryTrailerBytes;
  if (name_bytes == 0 || name_bytes > kMaxFilterNameBytes || Pad8(name_bytes) > body) {
    return Bad(absl::StrFormat("a %u-byte name in a %u-byte body", name_bytes, body));
  }
  const char* b = p + kLogEntryHeaderBytes;
  for (size_t i = name_bytes; i < Pad8(name_bytes); ++i) {
    if (b[i] != 0) return Bad("name padding not zero");
  }
  e.name.assign(b, name_bytes);
  const char* tail = b + Pad8(name_bytes);
  const size_t tail_bytes = body - Pad8(name_bytes);
  const uint8_t allowed = e.type == LogEntryType::kInsert         ? kFlagIfAbsent
                          : e.type == LogEntryType::kCreateFilter ? kFlagGrowth
                          : e.type == LogEntryType::kRenameFilter ? kFlagReplace
                                                                  : 0;
  if ((flags & ~allowed) != 0) {
    return Bad(absl::StrFormat("flags %d on a %s", flags, LogEntryTypeName(e.type)));
  }
  if ((e.type == LogEntryType::kCreateFilter) != (e.filter_id == 0)) {
    return Bad(absl::StrFormat("%s with filter id %u", LogEntryTypeName(e.type), e.filter_id));
  }
  switch (e.type) {
    case LogEntryType::kInsert:
    case LogEntryType::kDelete: {
      if (tail_bytes != 8 * uint64_t{hashes}) {
        return Bad(absl::StrFormat("%u hashes in %u bytes", hashes, tail_bytes));
      }
      e.if_absent = flags != 0;
      if (reinterpret_cast<uintptr_t>(tail) % alignof(uint64_t) == 0) {
        e.hashes = absl::MakeConstSpan(reinterpret_cast<const uint64_t*>(tail), hashes);
      } else {
        e.owned.resize(hashes);
        if (hashes > 0) std::memcpy(e.owned.data(), tail, 8 * size_t{hashes});
        e.hashes = e.owned;
      }
      return e;
    }
    case LogEntryType::kDropFilter:
      if (hashes != 0 || tail_bytes != 0) return Bad("a drop with a body");
      return e;
    case LogEntryType::kSetExpiry: {
      if (hashes != 0 || tail_bytes != 8) {
        return Bad(absl::StrFormat("an expiry with %u hashes and %u body bytes (8 expected)",
                                   hashes, tail_bytes));
      }
      const auto expire_at = static_cast<int64_t>(Get64(tail));
      if (expire_at < 0 || expire_at > kLogEntryMaxExpireAt) {
        return Bad(absl::StrFormat("an expiry of \"%s\" at %d (0 to %d)", absl::CHexEscape(e.name),
                                   expire_at, kLogEntryMaxExpireAt));
      }
      e.expire_at = expire_at;
      return e;
    }
    case LogEntryType::kRenameFilter: {
      if (hashes != 0 || tail_bytes < kRenameFixed) {
        return Bad(absl::StrFormat("a rename with %u hashes and %u bytes after its name", hashes,
                                   tail_bytes));
      }
      e.replaced_id = Get64(tail);
      const uint32_t new_bytes = Get32(tail + 8);
      if (Get32(tail + 12) != 0) return Bad("a rename's reserved bytes not zero");
      if (new_bytes == 0 || new_bytes > kMaxFilterNameBytes ||
          tail_bytes != kRenameFixed + Pad8(new_bytes)) {
        return Bad(
            absl::StrFormat("a rename to a %u-byte name in %u bytes", new_bytes, tail_bytes));
      }
      const char* n = tail + kRenameFixed;
      for (size_t i = new_bytes; i < Pad8(new_bytes); ++i) {
        if (n[i] != 0) return Bad("a rename's new name padding not zero");
      }
      e.new_name.assign(n, new_bytes);
      if (e.replaced_id == e.filter_id) {
        return Bad(absl::StrFormat("a rename of filter id %u replacing itself", e.filter_id));
      }
      e.replace = (flags & kFlagReplace) != 0;
      if (!e.replace && e.replaced_id != 0) {
        return Bad("a rename that may not replace naming a filter it replaces");
      }
      if (absl::Status s = FilterRegistry::ValidateName(e.new_name); !s.ok()) {
        return Bad(absl::StrCat("a rename to a bad name: ", s.message()));
      }
      return e;
    }
    case LogEntryType::kCreateFilter: {
      const bool growth = (flags & kFlagGrowth) != 0;
      if (hashes != 0 || tail_bytes != kLogEntryShapeBytes + (growth ? kLogEntryGrowthBytes : 0)) {
        return Bad(absl::StrFormat("a create%s with %u bytes of shape",
                                   growth ? " of a growing filter" : "", tail_bytes));
      }
      absl::StatusOr<FilterShape> shape = DecodeShape(
          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(tail), tail_bytes), growth);
      if (absl::IsFailedPrecondition(shape.status())) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cluster log entry creates a filter this build cannot: ", shape.status().message(),
            "; written by a newer cuckood, upgrade this replica"));
      }
      if (absl::IsDataLoss(shape.status())) return Bad(shape.status().message());
      if (!shape.ok()) {
        return Bad(absl::StrCat("create of \"", absl::CHexEscape(e.name),
                                "\": ", shape.status().message()));
      }
      e.shape = *shape;
      return e;
    }
  }
  return Bad("unknown type");
}

}  // namespace cuckoo::server
