// The helpers the snapshot writer and reader share (snapshot_format.h).
#include "core/internal/snapshot_format.h"

#include <cerrno>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/env.h"
#include "base/little_endian.h"
#include "cuckoo_version.h"

namespace cuckoo {

XxhState NewXxhState() { return XxhState(XXH3_createState()); }

absl::Status NoMemoryForChecksums() {
  return absl::ResourceExhaustedError("out of memory for a checksum state");
}

const HeaderLayout* LayoutOf(uint32_t version) {
  for (const HeaderLayout& layout : kLayouts) {
    if (layout.version == version) return &layout;
  }
  return nullptr;
}

namespace {

std::string SystemError(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

absl::Status IoError(absl::string_view op, absl::string_view path, int err) {
  std::string msg = absl::StrFormat("%s %s: %s", op, path, SystemError(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

FilterShape TableShape(const FilterShape& s, const GenerationShape& g) {
  return GenerationTableShape(s, g);
}

uint64_t ScheduleChecksum(const std::vector<GenerationShape>& schedule) {
  std::vector<uint8_t> b(schedule.size() * 12);
  for (size_t g = 0; g < schedule.size(); ++g) {
    Put32(b.data() + 12 * g, schedule[g].fingerprint_bits);
    Put64(b.data() + 12 * g + 4, schedule[g].buckets_per_shard);
  }
  return XXH3_64bits(b.data(), b.size());
}

absl::Status EnvError(absl::string_view op, absl::string_view path, absl::Status s) {
  if (s.ok()) return s;
  const int err = EnvErrno(s);
  return err != 0 ? IoError(op, path, err) : s;
}

constexpr absl::string_view kWriterName = "cuckood ";
static_assert(kWriterName.size() + sizeof(kVersion) - 1 <= kSnapshotWriterBytes,
              "the build's name does not fit a snapshot's writer field");
std::string ThisBuild() { return absl::StrCat(kWriterName, kVersion); }

}  // namespace cuckoo
