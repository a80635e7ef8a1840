// Writing snapshots: WriteSnapshotFile and the file paths it writes.
#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/env.h"
#include "base/little_endian.h"
#include "core/internal/page_buffer.h"
#include "core/internal/snapshot_format.h"
#include "core/registry.h"
#include "core/shape_format.h"
#include "core/snapshot.h"

namespace cuckoo {

namespace {

// A snapshot's temporary file, written through an Env (the write-ahead
// log's: tests inject faults and power cuts into both).
class FileWriter {
 public:
  explicit FileWriter(Env* env) : env_(env) {}
  absl::Status Open(const std::string& path) {
    path_ = path;
    // A file a crashed write left: Create makes a new file only.
    if (absl::Status s = env_->Remove(path); !s.ok()) return EnvError("remove", path, s);
    absl::StatusOr<std::unique_ptr<EnvFile>> f = env_->Create(path, 0);
    if (!f.ok()) return EnvError("create", path, f.status());
    file_ = *std::move(f);
    return absl::OkStatus();
  }
  absl::Status Write(const uint8_t* p, size_t n) {
    if (absl::Status s = WriteAt(offset_, p, n); !s.ok()) return s;
    offset_ += n;
    return absl::OkStatus();
  }
  // n bytes at `offset` (already written once), leaving the position.
  absl::Status WriteAt(uint64_t offset, const uint8_t* p, size_t n) {
    return EnvError("write", path_, file_->Write(offset, absl::MakeConstSpan(p, n)));
  }
  absl::Status SyncAndClose() {
    if (absl::Status s = file_->Sync(); !s.ok()) return EnvError("fsync", path_, s);
    file_.reset();
    return absl::OkStatus();
  }

 private:
  Env* const env_;
  std::string path_;
  std::unique_ptr<EnvFile> file_;
  uint64_t offset_ = 0;
};
// Fills in header `h` of the file WriteSnapshotFile writes (the format
// version kWriteLayout, its shard counts per generation left at zero);
// returns where those counts go (kMaxGenerations u32s), which
// WriteSnapshotFile fills in once every shard is written.
uint8_t* FillHeader(uint8_t* h, const FilterShape& shape,
                    const std::vector<GenerationShape>& schedule, absl::string_view name,
                    uint64_t filter_id, absl::string_view log_identity, absl::Time taken) {
  constexpr const HeaderLayout& layout = kWriteLayout;
  std::memcpy(h, kMagic, sizeof(kMagic));
  Put32(h + 8, layout.version);
  Put32(h + 12, layout.header_bytes);
  const std::string writer = ThisBuild();
  std::memcpy(h + kSnapshotWriterOffset, writer.data(), writer.size());
  static_assert(layout.shape != 0);
  EncodeShape(shape, h + layout.shape);
  Put32(h + layout.name_length_at(), static_cast<uint32_t>(name.size()));
  Put32(h + layout.schedule_generations_at(), static_cast<uint32_t>(schedule.size()));
  Put64(h + layout.table_bytes_at(), shape.table_bytes_per_shard());
  Put64(h + layout.taken_at(), static_cast<uint64_t>(absl::ToUnixMicros(taken)));
  Put64(h + layout.filter_id, filter_id);
  Put64(h + layout.schedule_checksum_at(), ScheduleChecksum(schedule));
  std::memcpy(h + layout.log, log_identity.data(), log_identity.size());
  std::memcpy(h + layout.name, name.data(), name.size());
  return h + layout.shards_with_generation_at();
}

// The largest section of `filter`'s shards now, in the format
// WriteSnapshotFile writes.
uint64_t LargestSection(const CuckooFilter& filter, const std::vector<GenerationShape>& schedule) {
  const FilterShape& shape = filter.shape();
  uint64_t largest = 0;
  for (uint32_t i = 0; i < shape.shards; ++i) {
    uint64_t n = kWriteLayout.section_header_bytes + kSectionTrailerBytes;
    for (uint32_t g = 0; g < filter.ShardGenerations(i); ++g) {
      n += kGenerationHeaderBytes + TableShape(shape, schedule[g]).table_bytes_per_shard();
    }
    largest = std::max(largest, n);
  }
  return largest;
}

// What the sections of one WriteSnapshotFile call share: the file, the one
// buffer (buffer_bytes long) and the section checksum's state.
struct SectionSink {
  FileWriter& out;
  uint8_t* sec;
  size_t buffer_bytes;
  XXH3_state_t* section;
};

constexpr size_t kSectionHeaderBytes = kWriteLayout.section_header_bytes;

// Shard i's section, in the format WriteSnapshotFile writes, then its
// trailer (the section's checksum), kept in `trailer` for the footer's
// checksum. Counts the shard's generations in shards_with_generation, and
// adds its bytes, counters and position (at least `floor`) to `result`.
absl::Status WriteSection(const CuckooFilter& filter, uint32_t i, uint64_t floor,
                          const SectionSink& sink, uint8_t* trailer,
                          std::vector<uint32_t>& shards_with_generation,
                          SnapshotWriteResult& result) {
  FileWriter& out = sink.out;
  uint8_t* const sec = sink.sec;
  const size_t buffer_bytes = sink.buffer_bytes;
  XXH3_state_t* const section = sink.section;
  CuckooFilter::ShardState state;
  uint64_t section_bytes = 0;
  bool copied = false;
  absl::Status write_status;
  filter.ReadShardGenerations(i, [&](absl::Span<const CuckooFilter::GenerationView> gens,
                                     const CuckooFilter::ShardState& locked_state) {
    state = locked_state;
    state.position = std::max(state.position, floor);
    for (size_t g = 0; g < gens.size(); ++g) ++shards_with_generation[g];
    section_bytes = kSectionHeaderBytes + kSectionTrailerBytes;
    for (const CuckooFilter::GenerationView& v : gens) {
      section_bytes += kGenerationHeaderBytes + v.bytes.size();
    }
    Put32(sec, i);
    Put32(sec + kV3Generations, static_cast<uint32_t>(gens.size()));
    Put64(sec + kV3Items, state.items);
    Put64(sec + kV3Position, state.position);
    auto block_header = [&](uint8_t* p, uint32_t g) {
      const CuckooFilter::GenerationView& v = gens[g];
      Put32(p + kGenIndex, g);
      Put32(p + kGenFingerprintBits, v.fingerprint_bits);
      Put64(p + kGenBuckets, v.buckets);
      Put64(p + kGenItems, v.items);
      Put64(p + kGenRng, v.rng_state);
      Put64(p + kGenTableBytes, v.bytes.size());
    };
    if (section_bytes <= buffer_bytes) {
      size_t at = kSectionHeaderBytes;
      for (uint32_t g = 0; g < gens.size(); ++g) {
        block_header(sec + at, g);
        at += kGenerationHeaderBytes;
        std::memcpy(sec + at, gens[g].bytes.data(), gens[g].bytes.size());
        at += gens[g].bytes.size();
      }
      copied = true;
      return;
    }
    XXH3_64bits_reset(section);
    XXH3_64bits_update(section, sec, kSectionHeaderBytes);
    write_status = out.Write(sec, kSectionHeaderBytes);
    for (uint32_t g = 0; g < gens.size() && write_status.ok(); ++g) {
      block_header(sec, g);
      XXH3_64bits_update(section, sec, kGenerationHeaderBytes);
      write_status = out.Write(sec, kGenerationHeaderBytes);
      const absl::Span<const uint8_t> table = gens[g].bytes;
      for (size_t at = 0; at < table.size() && write_status.ok(); at += buffer_bytes) {
        const size_t n = std::min(buffer_bytes, table.size() - at);
        std::memcpy(sec, table.data() + at, n);
        XXH3_64bits_update(section, sec, n);
        write_status = out.Write(sec, n);
      }
    }
  });
  if (copied) {
    const size_t n = section_bytes - kSectionTrailerBytes;
    Put64(trailer, XXH3_64bits(sec, n));
    std::memcpy(sec + n, trailer, kSectionTrailerBytes);
    if (absl::Status s = out.Write(sec, section_bytes); !s.ok()) return s;
  } else {
    if (!write_status.ok()) return write_status;
    Put64(trailer, XXH3_64bits_digest(section));
    if (absl::Status s = out.Write(trailer, kSectionTrailerBytes); !s.ok()) return s;
  }
  result.bytes += section_bytes;
  result.items += state.items;
  result.changes += state.changes;
  result.min_position = std::min(result.min_position, state.position);
  result.max_position = std::max(result.max_position, state.position);
  return absl::OkStatus();
}

// Once every section is written: the footer, with the whole file's
// checksum over the header's checksum and the sections' `trailers`, then
// header `h` at its place, with the shard counts per generation (at
// `shards_with`) and its checksum.
absl::Status WriteFooterAndHeader(FileWriter& out, uint8_t* h, uint8_t* shards_with,
                                  const std::vector<uint32_t>& shards_with_generation,
                                  const std::vector<uint8_t>& trailers,
                                  SnapshotWriteResult& result) {
  constexpr const HeaderLayout& layout = kWriteLayout;
  result.bytes += kFooterBytes;
  for (uint32_t g = 0; g < kMaxGenerations; ++g) {
    Put32(shards_with + 4 * g, shards_with_generation[g]);
  }
  Put64(h + layout.checksum, XXH3_64bits(h, layout.checksum));
  uint8_t footer[kFooterBytes] = {};
  std::memcpy(footer, kFooterMagic, sizeof(kFooterMagic));
  Put64(footer + 8, result.bytes);
  Put64(footer + 16, result.items);
  const XxhState whole_state = NewXxhState();
  if (whole_state == nullptr) return NoMemoryForChecksums();
  XXH3_state_t* whole = whole_state.get();
  XXH3_64bits_reset(whole);
  XXH3_64bits_update(whole, h + layout.checksum, 8);
  XXH3_64bits_update(whole, trailers.data(), trailers.size());
  XXH3_64bits_update(whole, footer, kFooterBytes - 8);
  Put64(footer + 24, XXH3_64bits_digest(whole));
  if (absl::Status s = out.Write(footer, sizeof(footer)); !s.ok()) return s;
  return out.WriteAt(0, h, layout.header_bytes);
}

}  // namespace

std::string SnapshotFileName(absl::string_view name) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // SHA-256 cannot fail on a valid digest and a buffer this long.
  EVP_Digest(name.data(), name.size(), digest, &len, EVP_sha256(), nullptr);
  return absl::StrCat(
      "f-", absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), len)),
      kSnapshotSuffix);
}

bool IsSnapshotFileName(absl::string_view file) {
  if (!absl::ConsumePrefix(&file, "f-") || !absl::ConsumeSuffix(&file, kSnapshotSuffix)) {
    return false;
  }
  return file.size() == 64 && std::all_of(file.begin(), file.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string SnapshotPath(absl::string_view dir, absl::string_view name) {
  return absl::StrCat(dir, "/", SnapshotFileName(name));
}

std::string SnapshotTempPath(absl::string_view dir, absl::string_view name) {
  return absl::StrCat(dir, "/.", SnapshotFileName(name), kSnapshotTempSuffix);
}

bool IsLegacySnapshotName(absl::string_view name) {
  if (name.empty() || name.size() > kLegacyNameBytes || !absl::ascii_isalnum(name[0])) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
  });
}

std::string LegacySnapshotPath(absl::string_view dir, absl::string_view name) {
  return absl::StrCat(dir, "/", name, kSnapshotSuffix);
}

absl::StatusOr<SnapshotWriteResult> WriteSnapshotFile(const CuckooFilter& filter,
                                                      absl::string_view name, absl::string_view dir,
                                                      const SnapshotWriteOptions& options) {
  if (absl::Status st = FilterRegistry::ValidateName(name); !st.ok()) return st;
  const std::string& log_identity = options.log_identity;
  if (log_identity.size() > kSnapshotLogIdentityBytes ||
      !std::all_of(log_identity.begin(), log_identity.end(),
                   [](char c) { return c >= 0x20 && c < 0x7F; })) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a snapshot records a log identity of at most %u printable ASCII characters, not \"%s\"",
        kSnapshotLogIdentityBytes, absl::CHexEscape(log_identity)));
  }
  const absl::Time start = absl::Now();
  const FilterShape& shape = filter.shape();
  const std::vector<GenerationShape> schedule = GenerationSchedule(shape);
  SnapshotWriteResult result;
  result.path = SnapshotPath(dir, name);
  result.taken = start;
  result.filter_id = filter.id();
  const std::string tmp = SnapshotTempPath(dir, name);

  // The header is written last, once the shards' generation counts are
  // known (a shard may grow while the others are copied); its place is
  // written with zeros first.
  constexpr const HeaderLayout& layout = kWriteLayout;
  static_assert(layout.has_generations());
  uint8_t h[layout.header_bytes] = {};
  uint8_t* const shards_with =
      FillHeader(h, shape, schedule, name, result.filter_id, log_identity, start);

  // One buffer, reused for every shard. A section that fits is copied whole
  // (its tables in place between the block headers) under the shard's
  // shared lock, which is then released before the checksum and the write.
  // A larger one is written through the buffer in pieces while the lock is
  // held, so the buffer never exceeds options.buffer_bytes. The buffer is
  // as long as the largest section when the write starts; a shard that
  // grows past it meanwhile is written in pieces.
  const uint64_t largest = LargestSection(filter, schedule);
  const size_t buffer_bytes = static_cast<size_t>(
      std::max<uint64_t>(std::min<uint64_t>(largest, options.buffer_bytes), kMinBufferBytes));
  absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(buffer_bytes);
  if (!buf.ok()) return buf.status();
  buf->Prefault(0, buffer_bytes);
  uint8_t* sec = buf->data();

  Env* const env = options.env != nullptr ? options.env : PosixEnv();
  FileWriter out(env);
  absl::Status st = [&]() -> absl::Status {
    if (absl::Status s = out.Open(tmp); !s.ok()) return s;
    if (absl::Status s = out.Write(h, sizeof(h)); !s.ok()) return s;
    const XxhState section_state = NewXxhState();
    if (section_state == nullptr) return NoMemoryForChecksums();
    XXH3_state_t* section = section_state.get();
    std::vector<uint8_t> trailers(uint64_t{shape.shards} * kSectionTrailerBytes);
    std::vector<uint32_t> shards_with_generation(kMaxGenerations, 0);
    result.bytes = sizeof(h);
    result.min_position = std::numeric_limits<uint64_t>::max();
    const SectionSink sink{out, sec, buffer_bytes, section};
    for (uint32_t i = 0; i < shape.shards; ++i) {
      uint8_t* const trailer = trailers.data() + uint64_t{i} * kSectionTrailerBytes;
      const uint64_t floor = options.position_floor ? options.position_floor() : 0;
      if (absl::Status s =
              WriteSection(filter, i, floor, sink, trailer, shards_with_generation, result);
          !s.ok()) {
        return s;
      }
    }
    // The expiry after every shard's floor was read: an owner that sets it
    // before logging it (cuckood) never has a file whose positions pass
    // its record without its value. Its changes before its value
    // (CuckooFilter::expiry_changes), so a change the file does not hold
    // is never counted as held.
    result.changes += filter.expiry_changes();
    result.expire_at = filter.expire_at();
    Put64(h + layout.expire_at, static_cast<uint64_t>(result.expire_at));
    // Version 5 when there is none: the same bytes, loadable by builds from
    // before filter expiry (core/internal/snapshot_format.h, kVersion6).
    if (result.expire_at == 0) Put32(h + 8, kNoExpiryWriteVersion);
    if (absl::Status s =
            WriteFooterAndHeader(out, h, shards_with, shards_with_generation, trailers, result);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = out.SyncAndClose(); !s.ok()) return s;
    if (options.before_commit) {
      result.duration = absl::Now() - start;
      if (absl::Status s = options.before_commit(result); !s.ok()) return s;
    }
    if (absl::Status s = env->Rename(tmp, result.path); !s.ok()) {
      return EnvError(absl::StrCat("rename ", tmp, " to"), result.path, s);
    }
    return EnvError("fsync directory", dir, env->SyncDir(std::string(dir)));
  }();
  if (!st.ok()) {
    (void)env->Remove(tmp);
    return st;
  }
  result.duration = absl::Now() - start;
  return result;
}

absl::Status SyncSnapshotDirectory(absl::string_view dir, Env* env) {
  if (env == nullptr) env = PosixEnv();
  return EnvError("fsync directory", dir, env->SyncDir(std::string(dir)));
}
}  // namespace cuckoo
