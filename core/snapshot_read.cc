// Reading snapshots: ReadSnapshotFile and ParseSnapshot, through
// SnapshotParser, which checks every byte before it hands out a filter.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/little_endian.h"
#include "core/hash.h"  // xxhash.h
#include "core/internal/filter_loading.h"
#include "core/internal/snapshot_format.h"
#include "core/registry.h"
#include "core/shape_format.h"
#include "core/snapshot.h"

namespace cuckoo {

namespace {

using internal::FilterLoading;

// Bytes a file of format version 3 or later (`layout`) must have whose
// shards have these generations.
uint64_t FileBytesV3(const FilterShape& s, const HeaderLayout& layout,
                     const std::vector<GenerationShape>& schedule,
                     const std::vector<uint32_t>& shards_with_generation) {
  uint64_t n = layout.header_bytes +
               uint64_t{s.shards} * (layout.section_header_bytes + kSectionTrailerBytes) +
               kFooterBytes;
  for (size_t g = 0; g < shards_with_generation.size(); ++g) {
    n += uint64_t{shards_with_generation[g]} *
         (kGenerationHeaderBytes + TableShape(s, schedule[g]).table_bytes_per_shard());
  }
  return n;
}

// Bytes a file of this shape and format version 1 or 2 must have.
uint64_t FileBytes(const FilterShape& s, const HeaderLayout& layout) {
  return layout.header_bytes +
         uint64_t{s.shards} *
             (layout.section_header_bytes + s.table_bytes_per_shard() + kSectionTrailerBytes) +
         kFooterBytes;
}

// Fingerprint bits in use in the last byte of a table (0: all 8).
uint32_t UsedBitsInLastByte(const FilterShape& s) {
  return static_cast<uint32_t>((s.buckets_per_shard * s.bucket_bits()) % 8);
}
// Where a snapshot is read from.
class Source {
 public:
  virtual ~Source() = default;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at the current position; the caller has checked the
  // file is long enough, so a short read is an I/O error.
  virtual absl::Status Read(uint8_t* dst, size_t n) = 0;
};

class MemorySource final : public Source {
 public:
  explicit MemorySource(absl::Span<const uint8_t> data) : data_(data) {}
  uint64_t size() const override { return data_.size(); }
  absl::Status Read(uint8_t* dst, size_t n) override {
    if (n > data_.size() - pos_) return absl::InternalError("read past the end");
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  absl::Span<const uint8_t> data_;
  size_t pos_ = 0;
};

class FileSource final : public Source {
 public:
  FileSource(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(path) {}
  ~FileSource() override { ::close(fd_); }
  uint64_t size() const override { return size_; }
  absl::Status Read(uint8_t* dst, size_t n) override {
    while (n > 0) {
      ssize_t r = ::read(fd_, dst, std::min<size_t>(n, size_t{1} << 30));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IoError("read", path_, errno);
      }
      if (r == 0) return absl::InternalError(absl::StrCat("read ", path_, ": file shrank"));
      dst += r;
      n -= static_cast<size_t>(r);
    }
    return absl::OkStatus();
  }

 private:
  const int fd_;
  const uint64_t size_;
  const std::string path_;
};
// The writer recorded at bytes 16..47 of a file of format version 2 or
// later: printable ASCII, NUL-padded, not empty. Empty if there is none.
std::string RecordedWriter(const uint8_t* h) {
  const auto* p = reinterpret_cast<const char*>(h + kSnapshotWriterOffset);
  size_t n = 0;
  while (n < kSnapshotWriterBytes && p[n] != '\0') ++n;
  if (n == 0) return "";
  for (size_t i = 0; i < kSnapshotWriterBytes; ++i) {
    const bool ok = i < n ? (p[i] >= 0x20 && p[i] < 0x7F) : p[i] == '\0';
    if (!ok) return "";
  }
  return std::string(p, n);
}

bool HeaderChecksumMatches(const uint8_t* h, const HeaderLayout& layout) {
  return XXH3_64bits(h, layout.checksum) == Get64(h + layout.checksum);
}

// The known format version other than `version` whose header, with the
// version field put back, matches the checksum of the first `have` bytes
// of `h`; 0 if none does. Such a file is intact but for the version field.
uint32_t VersionWithMatchingChecksum(const uint8_t* h, size_t have, uint32_t version) {
  for (const HeaderLayout& layout : kLayouts) {
    if (layout.version == version || layout.header_bytes > have) continue;
    uint8_t copy[kMaxHeaderBytes];
    std::memcpy(copy, h, layout.header_bytes);
    Put32(copy + 8, layout.version);
    if (HeaderChecksumMatches(copy, layout)) return layout.version;
  }
  return 0;
}

struct DecodedHeader {
  SnapshotHeader header;
  const HeaderLayout* layout = nullptr;
  uint64_t filter_id = 0;
  int64_t expire_at = 0;
  // GenerationSchedule(header.shape).
  std::vector<GenerationShape> schedule;
};

// Checks and decodes the fixed header, of which `h` holds the first `have`
// bytes: the whole header of a version this build knows, and for a header
// that fails (an unknown version or a checksum mismatch) as much of the file
// as the longest known header. DATA_LOSS for a damaged header,
// FAILED_PRECONDITION for an intact one this build cannot read. One step per
// part of the header, in the order they are checked.
class HeaderDecoder {
 public:
  HeaderDecoder(const uint8_t* h, size_t have, absl::string_view label)
      : h_(h), have_(have), label_(label) {}

  absl::StatusOr<DecodedHeader> Decode(uint64_t file_bytes, absl::string_view expected_name) {
    if (absl::Status st = FindLayout(); !st.ok()) return st;
    if (absl::Status st = CheckWriter(); !st.ok()) return st;
    if (absl::Status st = DecodeShape(); !st.ok()) return st;
    if (absl::Status st = DecodeGrowth(); !st.ok()) return st;
    if (absl::Status st = DecodeName(expected_name); !st.ok()) return st;
    if (absl::Status st = DecodeSizes(file_bytes); !st.ok()) return st;
    return std::move(out_);
  }

 private:
  absl::Status Bad(absl::string_view why) const {
    return absl::DataLossError(absl::StrCat(label_, ": ", why));
  }
  // Intact, but beyond this build: never quarantined (a rollback to an older
  // build must not lose the filters a newer one wrote).
  absl::Status Newer(absl::string_view why, absl::string_view writer) const {
    return absl::FailedPreconditionError(absl::StrCat(
        label_, ": ", why, "; it was written by ", writer, ", and this build (", ThisBuild(),
        ") cannot read it. Run that build or a newer one, or move the file out of the data "
        "directory to start without this filter"));
  }
  // From CheckWriter on, the header is exactly as some build wrote it (the
  // checksum matches): a value this build does not know comes from a newer
  // build.
  absl::Status Impossible(absl::string_view why) const {
    return Bad(absl::StrCat("impossible settings in header: ", why));
  }

  // The layout of the header's format version, whose checksum must match.
  absl::Status FindLayout() {
    const uint32_t version = Get32(h_ + 8);
    const HeaderLayout* const layout = LayoutOf(version);
    // A header of a known version whose version field alone is damaged still
    // has a matching checksum with the field put back.
    auto corrupt_version = [&]() -> absl::Status {
      const uint32_t real = VersionWithMatchingChecksum(h_, have_, version);
      if (real == 0) return absl::OkStatus();
      return Bad(absl::StrFormat(
          "format version field is corrupt (%u; the rest is a valid version-%u header)", version,
          real));
    };
    if (layout == nullptr) {
      if (absl::Status st = corrupt_version(); !st.ok()) return st;
      const std::string writer = RecordedWriter(h_);
      if (version > kSnapshotFormatVersion && !writer.empty()) {
        return Newer(absl::StrFormat("format version %u (this build reads versions 1 to %u)",
                                     version, kSnapshotFormatVersion),
                     writer);
      }
      return Bad(absl::StrFormat(
          "format version %u is not supported (this build reads versions 1 to %u) and the file "
          "names no writer: not a file any cuckood wrote",
          version, kSnapshotFormatVersion));
    }
    if (!HeaderChecksumMatches(h_, *layout)) {
      if (absl::Status st = corrupt_version(); !st.ok()) return st;
      return Bad("header checksum mismatch (the header is corrupt)");
    }
    out_.layout = layout;
    return absl::OkStatus();
  }

  // The header's size, and the build that wrote it (newer_build_).
  absl::Status CheckWriter() {
    const HeaderLayout* const layout = out_.layout;
    if (Get32(h_ + 12) != layout->header_bytes) {
      return Impossible(absl::StrFormat("header size %u (expected %u for version %u)",
                                        Get32(h_ + 12), layout->header_bytes, layout->version));
    }
    if (layout->has_writer()) {
      newer_build_ = RecordedWriter(h_);
      if (newer_build_.empty()) {
        return Impossible(absl::StrFormat(
            "the writer (bytes %u..%u) is not printable ASCII padded with zero bytes",
            kSnapshotWriterOffset, kSnapshotWriterOffset + kSnapshotWriterBytes - 1));
      }
    }
    return absl::OkStatus();
  }

  // The filter's shape, and the generation schedule it gives.
  absl::Status DecodeShape() {
    FilterShape& s = out_.header.shape;
    const HeaderLayout* const layout = out_.layout;
    if (layout->shape != 0) {
      // The growth block is zeros for a fixed filter; anything else in it
      // is a growing filter's (DecodeShape checks its factor).
      const uint8_t* const block = h_ + layout->shape;
      // The hash first, as in the older versions: a newer build's.
      if (const uint32_t hash = Get32(block); hash != kHashIdXxh3V1) {
        return Newer(absl::StrFormat("hash id %u is unknown (this build knows %u, XXH3-64)", hash,
                                     kHashIdXxh3V1),
                     newer_build_);
      }
      const bool growth = std::any_of(block + kShapeBytes, block + kMaxEncodedShapeBytes,
                                      [](uint8_t b) { return b != 0; });
      absl::StatusOr<FilterShape> decoded = cuckoo::DecodeShape(
          absl::MakeConstSpan(block, growth ? kMaxEncodedShapeBytes : kShapeBytes), growth);
      if (!decoded.ok()) {
        if (absl::IsDataLoss(decoded.status())) return Impossible(decoded.status().message());
        return Newer(
            absl::IsFailedPrecondition(decoded.status())
                ? std::string(decoded.status().message())
                : absl::StrCat("settings this build cannot use: ", decoded.status().message()),
            newer_build_);
      }
      s = *decoded;
    } else {
      s = ReadShapeFields(kLegacyShapeLayout, settings(), growth_settings());
    }
    const uint64_t table_bytes = Get64(h_ + layout->table_bytes_at());
    if (s.hash_id != kHashIdXxh3V1) {
      return Newer(absl::StrFormat("hash id %u is unknown (this build knows %u, XXH3-64)",
                                   s.hash_id, kHashIdXxh3V1),
                   newer_build_);
    }
    // Files from builds whose ceiling was higher load with today's.
    if (s.max_kicks > kMaxMaxKicks && s.max_kicks <= kMaxStoredMaxKicks) s.max_kicks = kMaxMaxKicks;
    if (absl::Status st = CheckShape(s); !st.ok()) {
      // An unknown table kind, or settings this build cannot use.
      return Newer(absl::IsFailedPrecondition(st)
                       ? std::string(st.message())
                       : absl::StrCat("settings this build cannot use: ", st.message()),
                   newer_build_);
    }
    if (table_bytes != s.table_bytes_per_shard()) {
      return Impossible(absl::StrFormat("table bytes per shard %u, but the shape needs %u",
                                        table_bytes, s.table_bytes_per_shard()));
    }
    out_.schedule = GenerationSchedule(s);
    return absl::OkStatus();
  }

  // Version 3's growth settings: the writer's schedule, and how many shards
  // have each generation.
  absl::Status DecodeGrowth() {
    const FilterShape& s = out_.header.shape;
    const HeaderLayout* const layout = out_.layout;
    const bool has_growth = layout->has_generations();
    std::vector<uint32_t>& with = out_.header.shards_with_generation;
    with.assign(1, s.shards);
    if (has_growth) {
      // The writer grew shards by its schedule; this build must grow them
      // the same way (a build whose growth rule differs wrote it).
      const uint32_t generations = Get32(h_ + layout->schedule_generations_at());
      const uint64_t checksum = Get64(h_ + layout->schedule_checksum_at());
      if (generations != out_.schedule.size() || checksum != ScheduleChecksum(out_.schedule)) {
        return Newer(absl::StrFormat("its growth schedule (%u generations, checksum %016x) is not "
                                     "this build's for the same settings (%u generations, "
                                     "checksum %016x)",
                                     generations, checksum, out_.schedule.size(),
                                     ScheduleChecksum(out_.schedule)),
                     newer_build_);
      }
    }
    if (has_growth) {
      uint32_t before = s.shards;  // Shards with the generation before.
      for (uint32_t g = 0; g < kMaxGenerations; ++g) {
        const uint32_t n = Get32(h_ + layout->shards_with_generation_at() + 4 * g);
        if (g == 0 && n != s.shards) {
          return Impossible(absl::StrFormat(
              "%u shards with generation 0 (every shard has it: expected %u)", n, s.shards));
        }
        const uint32_t most = g < out_.schedule.size() ? before : 0;
        if (g > 0 && n > most) {
          return Impossible(absl::StrFormat(
              "%u shards with generation %u (at most %u: the shards with generation %u%s)", n, g,
              most, g - 1, g < out_.schedule.size() ? "" : ", and the schedule has no more"));
        }
        if (g > 0 && n > 0) with.push_back(n);
        before = n;
      }
    }
    return absl::OkStatus();
  }

  // The filter's name, the zeros around it, and the filter id.
  absl::Status DecodeName(absl::string_view expected_name) {
    const HeaderLayout* const layout = out_.layout;
    const uint32_t name_length = Get32(h_ + layout->name_length_at());
    if (name_length == 0 || name_length > layout->name_bytes) {
      return Impossible(
          absl::StrFormat("filter name length %u (at most %u)", name_length, layout->name_bytes));
    }
    // The name's padding, and the reserved bytes (before version 5: after
    // the filter id and the growth settings, if any, which follow the name).
    for (size_t i = layout->name + name_length; i < layout->checksum; ++i) {
      const bool settings_after_name = layout->filter_id > layout->name;
      if (settings_after_name && i >= layout->filter_id && i < layout->reserved) continue;
      if (layout->expire_at != 0 && i >= layout->expire_at && i < layout->expire_at + 8) continue;
      if (h_[i] != 0) return Impossible(absl::StrFormat("reserved header byte %u is not zero", i));
    }
    if (layout->filter_id != 0) out_.filter_id = Get64(h_ + layout->filter_id);
    if (layout->expire_at != 0) {
      const auto expire_at = static_cast<int64_t>(Get64(h_ + layout->expire_at));
      if (expire_at < 0) {
        return Impossible(absl::StrFormat("expire_at %d is negative", expire_at));
      }
      out_.expire_at = expire_at;
    }
    if (layout->log != 0) {
      // Printable ASCII, then zeros (none: no identity recorded).
      const auto* log = reinterpret_cast<const char*>(h_ + layout->log);
      size_t n = 0;
      while (n < kSnapshotLogIdentityBytes && log[n] != '\0') ++n;
      for (size_t i = 0; i < kSnapshotLogIdentityBytes; ++i) {
        if (i < n ? (log[i] < 0x20 || log[i] >= 0x7F) : log[i] != '\0') {
          return Impossible(absl::StrFormat(
              "the log identity (bytes %u..%u) is not printable ASCII padded with zero bytes",
              layout->log, layout->log + kSnapshotLogIdentityBytes - 1));
        }
      }
      out_.header.log_identity.assign(log, n);
    }
    out_.header.name.assign(reinterpret_cast<const char*>(h_ + layout->name), name_length);
    if (absl::Status st = FilterRegistry::ValidateName(out_.header.name); !st.ok()) {
      return Impossible(st.message());
    }
    if (!expected_name.empty() && out_.header.name != expected_name) {
      return Bad(absl::StrFormat("holds filter \"%s\", but its file name says \"%s\"",
                                 absl::CHexEscape(out_.header.name),
                                 absl::CHexEscape(expected_name)));
    }
    return absl::OkStatus();
  }

  // When the snapshot was taken, the file's size, which must be the file's
  // (`file_bytes`), and the filter's memory.
  absl::Status DecodeSizes(uint64_t file_bytes) {
    const FilterShape& s = out_.header.shape;
    const std::vector<uint32_t>& with = out_.header.shards_with_generation;
    const int64_t taken_us = static_cast<int64_t>(Get64(h_ + out_.layout->taken_at()));
    out_.header.taken = absl::FromUnixMicros(taken_us);
    out_.header.file_bytes = out_.layout->has_generations()
                                 ? FileBytesV3(s, *out_.layout, out_.schedule, with)
                                 : FileBytes(s, *out_.layout);
    out_.header.memory_bytes = CuckooFilter::MemoryBytes(s);
    for (size_t g = 1; g < with.size(); ++g) {
      out_.header.memory_bytes +=
          uint64_t{with[g]} * CuckooFilter::GrownTableMemoryBytes(s, out_.schedule[g]);
    }
    if (file_bytes < out_.header.file_bytes) {
      return Bad(absl::StrFormat("truncated: the file is %u bytes, its settings need %u",
                                 file_bytes, out_.header.file_bytes));
    }
    if (file_bytes > out_.header.file_bytes) {
      return Bad(absl::StrFormat("%u unexpected bytes after the end of the snapshot (%u bytes)",
                                 file_bytes - out_.header.file_bytes, out_.header.file_bytes));
    }
    return absl::OkStatus();
  }

  // Versions 1 to 4: the settings, and version 3's and 4's growth settings
  // (null before 3).
  const uint8_t* settings() const { return h_ + out_.layout->fields; }
  const uint8_t* growth_settings() const {
    return out_.layout->growth != 0 ? h_ + out_.layout->growth : nullptr;
  }

  const uint8_t* const h_;
  const size_t have_;
  const absl::string_view label_;
  std::string newer_build_ = "a newer cuckood (version-1 files do not record which)";
  DecodedHeader out_;
};

absl::StatusOr<DecodedHeader> DecodeHeader(const uint8_t* h, size_t have, uint64_t file_bytes,
                                           absl::string_view label,
                                           absl::string_view expected_name) {
  return HeaderDecoder(h, have, label).Decode(file_bytes, expected_name);
}

// Reads a snapshot from a Source, step by step: the header, the shards'
// sections (one layout for version 3's generations, one for versions 1 and
// 2), the footer. Every error is DATA_LOSS "<label>: <reason>" for a bad
// file, or the Source's own for an I/O error.
class SnapshotParser {
 public:
  SnapshotParser(Source& src, absl::string_view label) : src_(src), label_(label) {}

  absl::StatusOr<LoadedSnapshot> Parse(absl::string_view expected_name,
                                       const SnapshotAdmit& admit) {
    if (src_.size() == 0) return Bad("empty file (0 bytes)");
    if (absl::Status st = ReadHeader(expected_name); !st.ok()) return st;
    if (admit) {
      if (absl::Status st = admit(decoded_.header); !st.ok()) return st;
    }
    absl::StatusOr<std::unique_ptr<CuckooFilter>> filter =
        CuckooFilter::FromShape(decoded_.header.shape);
    if (!filter.ok()) return filter.status();
    filter_ = *std::move(filter);
    const XxhState whole_state = NewXxhState();
    const XxhState section_state = NewXxhState();
    if (whole_state == nullptr || section_state == nullptr) return NoMemoryForChecksums();
    whole_ = whole_state.get();
    section_ = section_state.get();
    XXH3_64bits_reset(whole_);
    XXH3_64bits_update(whole_, h_ + decoded_.layout->checksum, 8);
    offset_ = decoded_.layout->header_bytes;
    left_ = decoded_.header.shards_with_generation;
    for (uint32_t i = 0; i < decoded_.header.shape.shards; ++i) {
      absl::Status st =
          decoded_.layout->has_generations() ? ReadGenerationsSection(i) : ReadFixedSection(i);
      if (!st.ok()) return st;
    }
    if (absl::Status st = ReadFooter(); !st.ok()) return st;
    filter_->set_id(decoded_.filter_id);
    filter_->set_expire_at(decoded_.expire_at);
    LoadedSnapshot out;
    out.header = std::move(decoded_.header);
    out.format_version = decoded_.layout->version;
    out.items = items_;
    out.filter_id = decoded_.filter_id;
    out.expire_at = decoded_.expire_at;
    out.min_position = min_position_;
    out.max_position = max_position_;
    out.filter = std::move(filter_);
    return out;
  }

 private:
  absl::Status Bad(absl::string_view why) const {
    return absl::DataLossError(absl::StrCat(label_, ": ", why));
  }
  // Shard i's section (at offset_) holds something no writer writes.
  absl::Status Impossible(uint32_t i, absl::string_view why) const {
    return Bad(absl::StrFormat("impossible settings in shard %u (byte %u): %s", i, offset_, why));
  }
  absl::Status ChecksumMismatch(uint32_t i) const {
    return Bad(
        absl::StrFormat("shard %u checksum mismatch (section at byte %u is corrupt)", i, offset_));
  }

  // The header's first n bytes into h_ (as far as the file and h_ go).
  absl::Status ReadHeaderTo(uint64_t n) {
    n = std::min<uint64_t>({n, src_.size(), kMaxHeaderBytes});
    if (n <= have_) return absl::OkStatus();
    absl::Status st = src_.Read(h_ + have_, static_cast<size_t>(n) - have_);
    if (st.ok()) have_ = static_cast<size_t>(n);
    return st;
  }

  // The header, whose length depends on its version: the shortest first.
  absl::Status ReadHeader(absl::string_view expected_name) {
    if (absl::Status st = ReadHeaderTo(kMinHeaderBytes); !st.ok()) return st;
    // Say "bad magic" for short files that are not snapshots at all.
    if (std::memcmp(h_, kMagic, std::min(have_, sizeof(kMagic))) != 0) {
      return Bad("not a cuckood snapshot (bad magic number)");
    }
    const HeaderLayout* layout = have_ >= 12 ? LayoutOf(Get32(h_ + 8)) : nullptr;
    const size_t header_bytes = layout != nullptr ? layout->header_bytes : kMinHeaderBytes;
    if (src_.size() < header_bytes) {
      return Bad(absl::StrFormat("truncated: the file is %u bytes, shorter than the %u-byte header",
                                 src_.size(), header_bytes));
    }
    if (absl::Status st = ReadHeaderTo(header_bytes); !st.ok()) return st;
    if (layout == nullptr || !HeaderChecksumMatches(h_, *layout)) {
      // The header fails: read as much as the longest header, to tell a
      // damaged version field of any known version (DecodeHeader).
      if (absl::Status st = ReadHeaderTo(kMaxHeaderBytes); !st.ok()) return st;
    }
    absl::StatusOr<DecodedHeader> decoded =
        DecodeHeader(h_, have_, src_.size(), label_, expected_name);
    if (!decoded.ok()) return decoded.status();
    decoded_ = *std::move(decoded);
    return absl::OkStatus();
  }

  // Shard i's section of a version-3 file: a section header, then each of
  // its generations' block and table, then the trailer.
  absl::Status ReadGenerationsSection(uint32_t i) {
    const FilterShape& shape = decoded_.header.shape;
    uint8_t sh[kVersion3.section_header_bytes];
    if (absl::Status st = src_.Read(sh, sizeof(sh)); !st.ok()) return st;
    XXH3_64bits_reset(section_);
    XXH3_64bits_update(section_, sh, sizeof(sh));
    // How much to read depends on the count, before the checksum can say
    // whether it is intact: a count the header rules out is damage.
    const uint32_t generations = Get32(sh + kV3Generations);
    const uint32_t shards_after = shape.shards - i - 1;
    bool count_fits = generations >= 1 && generations <= left_.size();
    for (size_t g = 0; g < left_.size() && count_fits; ++g) {
      count_fits = g < generations ? left_[g] > 0 : left_[g] <= shards_after;
    }
    if (!count_fits) {
      return Bad(absl::StrFormat(
          "shard %u (section at byte %u) gives %u generations, which the header's counts of "
          "shards per generation rule out (the section is corrupt)",
          i, offset_, generations));
    }
    if (generations > 1) {
      if (absl::Status st = FilterLoading::GrowShard(*filter_, i, generations); !st.ok()) {
        return st;
      }
    }
    uint8_t gh[kMaxGenerations][kGenerationHeaderBytes];
    uint64_t section_bytes = sizeof(sh) + kSectionTrailerBytes;
    for (uint32_t g = 0; g < generations; ++g) {
      --left_[g];
      if (absl::Status st = src_.Read(gh[g], kGenerationHeaderBytes); !st.ok()) return st;
      absl::Span<uint8_t> table = FilterLoading::MutableGenerationBytes(*filter_, i, g);
      if (absl::Status st = src_.Read(table.data(), table.size()); !st.ok()) return st;
      XXH3_64bits_update(section_, gh[g], kGenerationHeaderBytes);
      XXH3_64bits_update(section_, table.data(), table.size());
      section_bytes += kGenerationHeaderBytes + table.size();
    }
    uint8_t trailer[kSectionTrailerBytes];
    if (absl::Status st = src_.Read(trailer, sizeof(trailer)); !st.ok()) return st;
    if (XXH3_64bits_digest(section_) != Get64(trailer)) return ChecksumMismatch(i);
    if (Get32(sh) != i) return Impossible(i, absl::StrFormat("section is for shard %u", Get32(sh)));
    uint64_t shard_items = 0;
    for (uint32_t g = 0; g < generations; ++g) {
      absl::StatusOr<uint64_t> gen_items = CheckGeneration(i, g, gh[g]);
      if (!gen_items.ok()) return gen_items.status();
      shard_items += *gen_items;
    }
    if (Get64(sh + kV3Items) != shard_items) {
      return Impossible(i, absl::StrFormat("%u items, but its generations hold %u",
                                           Get64(sh + kV3Items), shard_items));
    }
    const uint64_t position = Get64(sh + kV3Position);
    FilterLoading::RestoreShard(*filter_, i, Get64(gh[0] + kGenItems), Get64(gh[0] + kGenRng),
                                position);
    for (uint32_t g = 1; g < generations; ++g) {
      FilterLoading::RestoreGeneration(*filter_, i, g, Get64(gh[g] + kGenItems),
                                       Get64(gh[g] + kGenRng));
    }
    EndSection(shard_items, position, trailer, section_bytes);
    return absl::OkStatus();
  }

  // Generation g of shard i, read and its checksum checked: its block `b`
  // and table against the schedule. Its items.
  absl::StatusOr<uint64_t> CheckGeneration(uint32_t i, uint32_t g, const uint8_t* b) {
    const FilterShape& shape = decoded_.header.shape;
    auto impossible = [&](absl::string_view why) {
      return Impossible(i, absl::StrCat("generation ", g, ": ", why));
    };
    const GenerationShape& want = decoded_.schedule[g];
    const FilterShape table_shape = TableShape(shape, want);
    if (Get32(b + kGenIndex) != g) {
      return impossible(absl::StrFormat("block is for generation %u", Get32(b + kGenIndex)));
    }
    if (Get32(b + kGenFingerprintBits) != want.fingerprint_bits ||
        Get64(b + kGenBuckets) != want.buckets_per_shard) {
      return impossible(absl::StrFormat(
          "%u-bit fingerprints in %u buckets, but the schedule gives %u bits in %u buckets",
          Get32(b + kGenFingerprintBits), Get64(b + kGenBuckets), want.fingerprint_bits,
          want.buckets_per_shard));
    }
    const uint64_t gen_table_bytes = table_shape.table_bytes_per_shard();
    if (Get64(b + kGenTableBytes) != gen_table_bytes) {
      return impossible(absl::StrFormat("table of %u bytes, expected %u", Get64(b + kGenTableBytes),
                                        gen_table_bytes));
    }
    const uint64_t gen_items = Get64(b + kGenItems);
    const uint64_t slots = want.buckets_per_shard * shape.bucket_size;
    if (gen_items > slots) {
      return impossible(absl::StrFormat("%u items in a table of %u slots", gen_items, slots));
    }
    const uint32_t gen_used_bits = UsedBitsInLastByte(table_shape);
    absl::Span<uint8_t> table = FilterLoading::MutableGenerationBytes(*filter_, i, g);
    if (gen_used_bits != 0 && (table[table.size() - 1] >> gen_used_bits) != 0) {
      return impossible("bits set after the last slot");
    }
    if (const int64_t bucket = FilterLoading::FirstInvalidGenerationBucket(*filter_, i, g);
        bucket >= 0) {
      return impossible(absl::StrFormat(
          "bucket %u is not a valid %s bucket (code 3876 or more, or entries out of order)", bucket,
          TableKindName(shape.table_kind)));
    }
    return gen_items;
  }

  // Shard i's section of a version-1 or -2 file: section header, table,
  // trailer.
  absl::Status ReadFixedSection(uint32_t i) {
    const FilterShape& shape = decoded_.header.shape;
    const HeaderLayout& layout = *decoded_.layout;
    const size_t section_header_bytes = layout.section_header_bytes;
    const uint64_t table_bytes = shape.table_bytes_per_shard();
    const uint64_t slots_per_shard = shape.buckets_per_shard * shape.bucket_size;
    const uint32_t used_bits = UsedBitsInLastByte(shape);
    uint8_t sh[kMaxSectionHeaderBytes];
    if (absl::Status st = src_.Read(sh, section_header_bytes); !st.ok()) return st;
    absl::Span<uint8_t> table = FilterLoading::MutableShardBytes(*filter_, i);
    if (absl::Status st = src_.Read(table.data(), table.size()); !st.ok()) return st;
    uint8_t trailer[kSectionTrailerBytes];
    if (absl::Status st = src_.Read(trailer, sizeof(trailer)); !st.ok()) return st;
    XXH3_64bits_reset(section_);
    XXH3_64bits_update(section_, sh, section_header_bytes);
    XXH3_64bits_update(section_, table.data(), table.size());
    if (XXH3_64bits_digest(section_) != Get64(trailer)) return ChecksumMismatch(i);
    if (Get32(sh) != i) return Impossible(i, absl::StrFormat("section is for shard %u", Get32(sh)));
    if (Get32(sh + 4) != 0) return Impossible(i, "reserved field is not zero");
    const uint64_t shard_items = Get64(sh + 8);
    if (shard_items > slots_per_shard) {
      return Impossible(
          i, absl::StrFormat("%u items in a table of %u slots", shard_items, slots_per_shard));
    }
    if (Get64(sh + 24) != table_bytes) {
      return Impossible(
          i, absl::StrFormat("table of %u bytes, expected %u", Get64(sh + 24), table_bytes));
    }
    if (used_bits != 0 && (table[table.size() - 1] >> used_bits) != 0) {
      return Impossible(i, "bits set after the last slot");
    }
    if (const int64_t bucket = FilterLoading::FirstInvalidBucket(*filter_, i); bucket >= 0) {
      return Impossible(
          i, absl::StrFormat(
                 "bucket %u is not a valid %s bucket (code 3876 or more, or entries out of order)",
                 bucket, TableKindName(shape.table_kind)));
    }
    const uint64_t position = layout.has_positions() ? Get64(sh + kSectionPosition) : 0;
    FilterLoading::RestoreShard(*filter_, i, shard_items, Get64(sh + 16), position);
    EndSection(shard_items, position, trailer,
               section_header_bytes + table_bytes + kSectionTrailerBytes);
    return absl::OkStatus();
  }

  // A section read and checked: its counts, and on to the next.
  void EndSection(uint64_t shard_items, uint64_t position, const uint8_t* trailer,
                  uint64_t section_bytes) {
    min_position_ = std::min(min_position_, position);
    max_position_ = std::max(max_position_, position);
    items_ += shard_items;
    XXH3_64bits_update(whole_, trailer, kSectionTrailerBytes);
    offset_ += section_bytes;
  }

  // The footer: the whole file's checksum, its size and the items.
  absl::Status ReadFooter() {
    uint8_t footer[kFooterBytes];
    if (absl::Status st = src_.Read(footer, sizeof(footer)); !st.ok()) return st;
    XXH3_64bits_update(whole_, footer, kFooterBytes - 8);
    if (std::memcmp(footer, kFooterMagic, sizeof(kFooterMagic)) != 0) {
      return Bad(absl::StrFormat("bad footer magic number at byte %u", offset_));
    }
    if (XXH3_64bits_digest(whole_) != Get64(footer + 24)) {
      return Bad("file checksum mismatch (sections from different snapshots, or a corrupt footer)");
    }
    if (Get64(footer + 8) != decoded_.header.file_bytes) {
      return Bad(absl::StrFormat("footer gives a file size of %u, expected %u", Get64(footer + 8),
                                 decoded_.header.file_bytes));
    }
    if (Get64(footer + 16) != items_) {
      return Bad(absl::StrFormat("footer counts %u items, the shards hold %u", Get64(footer + 16),
                                 items_));
    }
    return absl::OkStatus();
  }

  Source& src_;
  const absl::string_view label_;
  uint8_t h_[kMaxHeaderBytes] = {};
  size_t have_ = 0;
  DecodedHeader decoded_;
  std::unique_ptr<CuckooFilter> filter_;
  XXH3_state_t* whole_ = nullptr;
  XXH3_state_t* section_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t items_ = 0;
  uint64_t min_position_ = std::numeric_limits<uint64_t>::max();
  uint64_t max_position_ = 0;
  // Version 3: shards still to come with generation g, per g.
  std::vector<uint32_t> left_;
};

absl::StatusOr<LoadedSnapshot> Parse(Source& src, absl::string_view label,
                                     absl::string_view expected_name, const SnapshotAdmit& admit) {
  return SnapshotParser(src, label).Parse(expected_name, admit);
}
}  // namespace

absl::StatusOr<LoadedSnapshot> ReadSnapshotFile(const std::string& path,
                                                absl::string_view expected_name,
                                                const SnapshotAdmit& admit) {
  // O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer;
  // it is rejected below. Reads of a regular file ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return IoError("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return IoError("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    return absl::DataLossError(
        absl::StrCat(path, ": not a regular file (", what, "), so not a snapshot"));
  }
  // Sequential read of the whole file: ask for aggressive readahead.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  FileSource src(fd, static_cast<uint64_t>(st.st_size), path);
  return Parse(src, path, expected_name, admit);
}

absl::StatusOr<LoadedSnapshot> ParseSnapshot(absl::Span<const uint8_t> data,
                                             absl::string_view label,
                                             absl::string_view expected_name,
                                             const SnapshotAdmit& admit) {
  MemorySource src(data);
  return Parse(src, label, expected_name, admit);
}
}  // namespace cuckoo
