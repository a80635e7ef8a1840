#include "core/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/hash.h"  // xxhash.h
#include "core/page_buffer.h"
#include "core/registry.h"
#include "cuckoo_version.h"

namespace cuckoo {
namespace {

// An xxHash streaming state, freed when it goes out of scope.
struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhStateFree>;
XxhState NewXxhState() { return XxhState(XXH3_createState()); }
absl::Status NoMemoryForChecksums() {
  return absl::ResourceExhaustedError("out of memory for a checksum state");
}

// Layout; docs/SNAPSHOT_FORMAT.md is the specification.
constexpr char kMagic[8] = {'\x89', 'C', 'U', 'C', 'K', 'O', 'O', '\n'};
constexpr char kFooterMagic[8] = {'\x89', 'C', 'K', 'F', 'E', 'N', 'D', '\n'};
constexpr size_t kHeaderBytes = 256;
constexpr size_t kHeaderNameOffset = 88;
constexpr size_t kHeaderReservedOffset = kHeaderNameOffset + kMaxFilterNameBytes;  // 216
constexpr size_t kHeaderChecksumOffset = kHeaderBytes - 8;
constexpr size_t kSectionHeaderBytes = 32;
constexpr size_t kSectionTrailerBytes = 8;
constexpr size_t kFooterBytes = 32;

void Put32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string SystemError(int err) { return std::error_code(err, std::generic_category()).message(); }

absl::Status IoError(absl::string_view op, absl::string_view path, int err) {
  std::string msg = absl::StrFormat("%s %s: %s", op, path, SystemError(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Bytes a file of this shape must have.
uint64_t FileBytes(const FilterShape& s) {
  return kHeaderBytes +
         uint64_t{s.shards} *
             (kSectionHeaderBytes + s.table_bytes_per_shard() + kSectionTrailerBytes) +
         kFooterBytes;
}

// Fingerprint bits in use in the last byte of a table (0: all 8).
uint32_t UsedBitsInLastByte(const FilterShape& s) {
  return static_cast<uint32_t>((s.buckets_per_shard * s.bucket_bits()) % 8);
}

class FileWriter {
 public:
  ~FileWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError("create", path, errno);
    return absl::OkStatus();
  }
  absl::Status Write(const uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return IoError("write", path_, errno);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  absl::Status SyncAndClose() {
    if (::fsync(fd_) != 0) return IoError("fsync", path_, errno);
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return IoError("close", path_, errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

absl::Status SyncDirectory(absl::string_view dir) {
  std::string d(dir);
  int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("open directory", d, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return IoError("fsync directory", d, err);
  return absl::OkStatus();
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

// "cuckood 0.1.0": what this build writes as a file's writer.
std::string ThisBuild() { return absl::StrCat("cuckood ", kVersion); }

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

// Checks and decodes the fixed header. DATA_LOSS for a damaged header,
// FAILED_PRECONDITION for an intact one this build cannot read.
absl::StatusOr<SnapshotHeader> DecodeHeader(const uint8_t* h, uint64_t file_bytes,
                                            absl::string_view label,
                                            absl::string_view expected_name) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(label, ": ", why));
  };
  // Intact, but beyond this build: never quarantined (a rollback to an older
  // build must not lose the filters a newer one wrote).
  auto newer = [&](absl::string_view why, absl::string_view writer) {
    return absl::FailedPreconditionError(absl::StrCat(
        label, ": ", why, "; it was written by ", writer, ", and this build (", ThisBuild(),
        ") cannot read it. Run that build or a newer one, or move the file out of the data "
        "directory to start without this filter"));
  };
  if (std::memcmp(h, kMagic, sizeof(kMagic)) != 0) {
    return bad("not a cuckood snapshot (bad magic number)");
  }
  const uint32_t version = Get32(h + 8);
  if (version != kSnapshotFormatVersion) {
    // A version-1 header whose version field alone is damaged still has a
    // matching checksum with the field put back.
    uint8_t v1[kHeaderBytes];
    std::memcpy(v1, h, kHeaderBytes);
    Put32(v1 + 8, kSnapshotFormatVersion);
    if (XXH3_64bits(v1, kHeaderChecksumOffset) == Get64(h + kHeaderChecksumOffset)) {
      return bad(absl::StrFormat(
          "format version field is corrupt (%u; the rest is a valid version-%u header)", version,
          kSnapshotFormatVersion));
    }
    const std::string writer = RecordedWriter(h);
    if (version > kSnapshotFormatVersion && !writer.empty()) {
      return newer(absl::StrFormat("format version %u (this build reads version %u)", version,
                                   kSnapshotFormatVersion),
                   writer);
    }
    return bad(absl::StrFormat(
        "format version %u is not supported (this build reads version %u) and the file names no "
        "writer: not a file any cuckood wrote",
        version, kSnapshotFormatVersion));
  }
  if (XXH3_64bits(h, kHeaderChecksumOffset) != Get64(h + kHeaderChecksumOffset)) {
    return bad("header checksum mismatch (the header is corrupt)");
  }
  // From here the header is exactly as some build wrote it (the checksum
  // matches): a value this build does not know comes from a newer build.
  constexpr char kNewerBuild[] = "a newer cuckood (version-1 files do not record which)";
  auto impossible = [&](absl::string_view why) {
    return bad(absl::StrCat("impossible settings in header: ", why));
  };
  if (Get32(h + 12) != kHeaderBytes) {
    return impossible(absl::StrFormat("header size %u (expected %u)", Get32(h + 12), kHeaderBytes));
  }
  SnapshotHeader out;
  FilterShape& s = out.shape;
  s.hash_id = Get32(h + 16);
  const uint32_t table_kind = Get32(h + 20);
  s.table_kind = static_cast<TableKind>(table_kind);
  s.fingerprint_bits = Get32(h + 24);
  s.bucket_size = Get32(h + 28);
  s.shards = Get32(h + 32);
  s.shard_bits = Get32(h + 36);
  s.max_kicks = Get32(h + 40);
  const uint32_t name_length = Get32(h + 44);
  s.seed = Get64(h + 48);
  s.capacity = Get64(h + 56);
  s.buckets_per_shard = Get64(h + 64);
  const uint64_t table_bytes = Get64(h + 72);
  const int64_t taken_us = static_cast<int64_t>(Get64(h + 80));
  if (table_kind != static_cast<uint32_t>(TableKind::kPacked) &&
      table_kind != static_cast<uint32_t>(TableKind::kSemiSorted)) {
    return newer(absl::StrFormat("table kind %u is unknown (this build knows 0 packed and 1 "
                                 "semi_sorted)",
                                 table_kind),
                 kNewerBuild);
  }
  if (s.hash_id != kHashIdXxh3V1) {
    return newer(absl::StrFormat("hash id %u is unknown (this build knows %u, XXH3-64)", s.hash_id,
                                 kHashIdXxh3V1),
                 kNewerBuild);
  }
  // Files from builds whose ceiling was higher load with today's.
  if (s.max_kicks > kMaxMaxKicks && s.max_kicks <= kMaxStoredMaxKicks) s.max_kicks = kMaxMaxKicks;
  if (absl::Status st = ValidateShape(s); !st.ok()) {
    return newer(absl::StrCat("settings this build cannot use: ", st.message()), kNewerBuild);
  }
  if (table_bytes != s.table_bytes_per_shard()) {
    return impossible(absl::StrFormat("table bytes per shard %u, but the shape needs %u",
                                      table_bytes, s.table_bytes_per_shard()));
  }
  if (name_length == 0 || name_length > kMaxFilterNameBytes) {
    return impossible(absl::StrFormat("filter name length %u", name_length));
  }
  for (size_t i = kHeaderNameOffset + name_length; i < kHeaderChecksumOffset; ++i) {
    if (h[i] != 0) return impossible(absl::StrFormat("reserved header byte %u is not zero", i));
  }
  out.name.assign(reinterpret_cast<const char*>(h + kHeaderNameOffset), name_length);
  if (absl::Status st = FilterRegistry::ValidateName(out.name); !st.ok()) {
    return impossible(st.message());
  }
  if (!expected_name.empty() && out.name != expected_name) {
    return bad(absl::StrFormat("holds filter \"%s\", but its file name says \"%s\"", out.name,
                               absl::CHexEscape(expected_name)));
  }
  out.taken = absl::FromUnixMicros(taken_us);
  out.file_bytes = FileBytes(s);
  if (file_bytes < out.file_bytes) {
    return bad(absl::StrFormat("truncated: the file is %u bytes, its settings need %u", file_bytes,
                               out.file_bytes));
  }
  if (file_bytes > out.file_bytes) {
    return bad(absl::StrFormat("%u unexpected bytes after the end of the snapshot (%u bytes)",
                               file_bytes - out.file_bytes, out.file_bytes));
  }
  return out;
}

absl::StatusOr<LoadedSnapshot> Parse(Source& src, absl::string_view label,
                                     absl::string_view expected_name, const SnapshotAdmit& admit) {
  auto bad = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(label, ": ", why));
  };
  if (src.size() == 0) return bad("empty file (0 bytes)");
  if (src.size() < kHeaderBytes) {
    // Say "bad magic" for short files that are not snapshots at all.
    uint8_t head[kHeaderBytes];
    size_t n = static_cast<size_t>(src.size());
    if (absl::Status st = src.Read(head, n); !st.ok()) return st;
    if (std::memcmp(head, kMagic, std::min(n, sizeof(kMagic))) != 0) {
      return bad("not a cuckood snapshot (bad magic number)");
    }
    return bad(absl::StrFormat("truncated: the file is %u bytes, shorter than the %u-byte header",
                               n, kHeaderBytes));
  }
  uint8_t h[kHeaderBytes];
  if (absl::Status st = src.Read(h, kHeaderBytes); !st.ok()) return st;
  absl::StatusOr<SnapshotHeader> header = DecodeHeader(h, src.size(), label, expected_name);
  if (!header.ok()) return header.status();
  if (admit) {
    if (absl::Status st = admit(*header); !st.ok()) return st;
  }
  const FilterShape& shape = header->shape;
  absl::StatusOr<std::unique_ptr<CuckooFilter>> filter = CuckooFilter::FromShape(shape);
  if (!filter.ok()) return filter.status();

  const XxhState whole_state = NewXxhState();
  const XxhState section_state = NewXxhState();
  if (whole_state == nullptr || section_state == nullptr) return NoMemoryForChecksums();
  XXH3_state_t* whole = whole_state.get();
  XXH3_state_t* section = section_state.get();
  XXH3_64bits_reset(whole);
  XXH3_64bits_update(whole, h + kHeaderChecksumOffset, 8);

  const uint64_t table_bytes = shape.table_bytes_per_shard();
  const uint64_t slots_per_shard = shape.buckets_per_shard * shape.bucket_size;
  const uint32_t used_bits = UsedBitsInLastByte(shape);
  uint64_t offset = kHeaderBytes;
  uint64_t items = 0;
  for (uint32_t i = 0; i < shape.shards; ++i) {
    uint8_t sh[kSectionHeaderBytes];
    if (absl::Status st = src.Read(sh, sizeof(sh)); !st.ok()) return st;
    absl::Span<uint8_t> table = (*filter)->MutableShardBytesForLoad(i);
    if (absl::Status st = src.Read(table.data(), table.size()); !st.ok()) return st;
    uint8_t trailer[kSectionTrailerBytes];
    if (absl::Status st = src.Read(trailer, sizeof(trailer)); !st.ok()) return st;
    XXH3_64bits_reset(section);
    XXH3_64bits_update(section, sh, sizeof(sh));
    XXH3_64bits_update(section, table.data(), table.size());
    if (XXH3_64bits_digest(section) != Get64(trailer)) {
      return bad(
          absl::StrFormat("shard %u checksum mismatch (section at byte %u is corrupt)", i, offset));
    }
    auto impossible = [&](absl::string_view why) {
      return bad(absl::StrFormat("impossible settings in shard %u (byte %u): %s", i, offset, why));
    };
    if (Get32(sh) != i) return impossible(absl::StrFormat("section is for shard %u", Get32(sh)));
    if (Get32(sh + 4) != 0) return impossible("reserved field is not zero");
    const uint64_t shard_items = Get64(sh + 8);
    if (shard_items > slots_per_shard) {
      return impossible(
          absl::StrFormat("%u items in a table of %u slots", shard_items, slots_per_shard));
    }
    if (Get64(sh + 24) != table_bytes) {
      return impossible(
          absl::StrFormat("table of %u bytes, expected %u", Get64(sh + 24), table_bytes));
    }
    if (used_bits != 0 && (table[table.size() - 1] >> used_bits) != 0) {
      return impossible("bits set after the last slot");
    }
    if (const int64_t bucket = (*filter)->FirstInvalidBucketForLoad(i); bucket >= 0) {
      return impossible(absl::StrFormat(
          "bucket %u is not a valid %s bucket (code 3876 or more, or entries out of order)", bucket,
          TableKindName(shape.table_kind)));
    }
    (*filter)->RestoreShardForLoad(i, shard_items, Get64(sh + 16));
    items += shard_items;
    XXH3_64bits_update(whole, trailer, sizeof(trailer));
    offset += kSectionHeaderBytes + table_bytes + kSectionTrailerBytes;
  }

  uint8_t footer[kFooterBytes];
  if (absl::Status st = src.Read(footer, sizeof(footer)); !st.ok()) return st;
  XXH3_64bits_update(whole, footer, kFooterBytes - 8);
  if (std::memcmp(footer, kFooterMagic, sizeof(kFooterMagic)) != 0) {
    return bad(absl::StrFormat("bad footer magic number at byte %u", offset));
  }
  if (XXH3_64bits_digest(whole) != Get64(footer + 24)) {
    return bad("file checksum mismatch (sections from different snapshots, or a corrupt footer)");
  }
  if (Get64(footer + 8) != header->file_bytes) {
    return bad(absl::StrFormat("footer gives a file size of %u, expected %u", Get64(footer + 8),
                               header->file_bytes));
  }
  if (Get64(footer + 16) != items) {
    return bad(
        absl::StrFormat("footer counts %u items, the shards hold %u", Get64(footer + 16), items));
  }
  LoadedSnapshot out;
  out.header = *std::move(header);
  out.items = items;
  out.filter = *std::move(filter);
  return out;
}

}  // namespace

std::string SnapshotPath(absl::string_view dir, absl::string_view name) {
  return absl::StrCat(dir, "/", name, kSnapshotSuffix);
}

std::string SnapshotTempPath(absl::string_view dir, absl::string_view name) {
  return absl::StrCat(dir, "/.", name, kSnapshotSuffix, kSnapshotTempSuffix);
}

absl::StatusOr<SnapshotWriteResult> WriteSnapshotFile(const CuckooFilter& filter,
                                                      absl::string_view name, absl::string_view dir,
                                                      const SnapshotWriteOptions& options) {
  if (absl::Status st = FilterRegistry::ValidateName(name); !st.ok()) return st;
  const absl::Time start = absl::Now();
  const FilterShape& shape = filter.shape();
  const uint64_t table_bytes = shape.table_bytes_per_shard();
  SnapshotWriteResult result;
  result.path = SnapshotPath(dir, name);
  result.taken = start;
  result.bytes = FileBytes(shape);
  const std::string tmp = SnapshotTempPath(dir, name);

  uint8_t h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, sizeof(kMagic));
  Put32(h + 8, kSnapshotFormatVersion);
  Put32(h + 12, kHeaderBytes);
  Put32(h + 16, shape.hash_id);
  Put32(h + 20, static_cast<uint32_t>(shape.table_kind));
  Put32(h + 24, shape.fingerprint_bits);
  Put32(h + 28, shape.bucket_size);
  Put32(h + 32, shape.shards);
  Put32(h + 36, shape.shard_bits);
  Put32(h + 40, shape.max_kicks);
  Put32(h + 44, static_cast<uint32_t>(name.size()));
  Put64(h + 48, shape.seed);
  Put64(h + 56, shape.capacity);
  Put64(h + 64, shape.buckets_per_shard);
  Put64(h + 72, table_bytes);
  Put64(h + 80, static_cast<uint64_t>(absl::ToUnixMicros(start)));
  std::memcpy(h + kHeaderNameOffset, name.data(), name.size());
  Put64(h + kHeaderChecksumOffset, XXH3_64bits(h, kHeaderChecksumOffset));

  // One buffer, reused for every shard. A section that fits is copied whole
  // (the table in place between its header and checksum) under the shard's
  // shared lock, which is then released before the checksum and the write.
  // A larger one is written through the buffer in pieces while the lock is
  // held, so the buffer never exceeds options.buffer_bytes.
  const size_t section_bytes = kSectionHeaderBytes + table_bytes + kSectionTrailerBytes;
  const bool copy_whole = section_bytes <= options.buffer_bytes;
  const size_t buffer_bytes =
      copy_whole
          ? section_bytes
          : std::max<size_t>(options.buffer_bytes, kSectionHeaderBytes + kSectionTrailerBytes);
  absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(buffer_bytes);
  if (!buf.ok()) return buf.status();
  buf->Prefault(0, buffer_bytes);
  uint8_t* sec = buf->data();

  FileWriter out;
  absl::Status st = [&]() -> absl::Status {
    if (absl::Status s = out.Open(tmp); !s.ok()) return s;
    if (absl::Status s = out.Write(h, sizeof(h)); !s.ok()) return s;
    const XxhState whole_state = NewXxhState();
    const XxhState section_state = NewXxhState();
    if (whole_state == nullptr || section_state == nullptr) return NoMemoryForChecksums();
    XXH3_state_t* whole = whole_state.get();
    XXH3_state_t* section = section_state.get();
    XXH3_64bits_reset(whole);
    XXH3_64bits_update(whole, h + kHeaderChecksumOffset, 8);
    auto section_header = [&](uint32_t i, const CuckooFilter::ShardState& state) {
      Put32(sec, i);
      Put32(sec + 4, 0);
      Put64(sec + 8, state.items);
      Put64(sec + 16, state.rng_state);
      Put64(sec + 24, table_bytes);
    };
    for (uint32_t i = 0; i < shape.shards; ++i) {
      CuckooFilter::ShardState state;
      uint8_t trailer[kSectionTrailerBytes];
      if (copy_whole) {
        state = filter.CopyShard(i, sec + kSectionHeaderBytes);
        section_header(i, state);
        Put64(trailer, XXH3_64bits(sec, kSectionHeaderBytes + table_bytes));
        std::memcpy(sec + kSectionHeaderBytes + table_bytes, trailer, sizeof(trailer));
        if (absl::Status s = out.Write(sec, section_bytes); !s.ok()) return s;
      } else {
        absl::Status write_status;
        filter.ReadShard(
            i, [&](absl::Span<const uint8_t> table, const CuckooFilter::ShardState& locked_state) {
              state = locked_state;
              section_header(i, state);
              XXH3_64bits_reset(section);
              XXH3_64bits_update(section, sec, kSectionHeaderBytes);
              write_status = out.Write(sec, kSectionHeaderBytes);
              for (size_t at = 0; at < table.size() && write_status.ok(); at += buffer_bytes) {
                const size_t n = std::min(buffer_bytes, table.size() - at);
                std::memcpy(sec, table.data() + at, n);
                XXH3_64bits_update(section, sec, n);
                write_status = out.Write(sec, n);
              }
            });
        if (!write_status.ok()) return write_status;
        Put64(trailer, XXH3_64bits_digest(section));
        if (absl::Status s = out.Write(trailer, sizeof(trailer)); !s.ok()) return s;
      }
      XXH3_64bits_update(whole, trailer, sizeof(trailer));
      result.items += state.items;
      result.changes += state.changes;
    }
    uint8_t footer[kFooterBytes] = {};
    std::memcpy(footer, kFooterMagic, sizeof(kFooterMagic));
    Put64(footer + 8, result.bytes);
    Put64(footer + 16, result.items);
    XXH3_64bits_update(whole, footer, kFooterBytes - 8);
    Put64(footer + 24, XXH3_64bits_digest(whole));
    if (absl::Status s = out.Write(footer, sizeof(footer)); !s.ok()) return s;
    if (absl::Status s = out.SyncAndClose(); !s.ok()) return s;
    if (::rename(tmp.c_str(), result.path.c_str()) != 0) {
      return IoError(absl::StrCat("rename ", tmp, " to"), result.path, errno);
    }
    return SyncDirectory(dir);
  }();
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  result.duration = absl::Now() - start;
  return result;
}

absl::Status SyncSnapshotDirectory(absl::string_view dir) { return SyncDirectory(dir); }

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
