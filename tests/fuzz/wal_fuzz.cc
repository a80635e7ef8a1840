// libFuzzer target for the write-ahead log reader (server/wal/wal_format.h,
// ScanWal): the files a restart reads after any crash, disk fault or
// tampering.
//
// The input is a log directory: it is cut into segment files at every later
// 8-aligned occurrence of the segment magic, named 1, 2, ... Each input is
// scanned twice:
//   1. as is, which exercises every check up to the first checksum (a random
//      mutation almost never keeps an XXH3 checksum valid);
//   2. resealed: every segment's sequence set to its file's and its header
//      checksum recomputed, and the checksum of every record the length
//      fields chain through recomputed, so mutations reach the checks behind
//      the checksums (types, flags, payload sizes, lsn order, torn versus
//      damaged).
// A scan must end in a result or an error, never a crash; when it succeeds,
// the records it delivered must be consistent (lsns increasing, each record
// durable-marker below its lsn, payloads as their types say, the count and
// last lsn as the scan reports), and each Insert or Delete record for a small
// filter created in the log must apply to it or be refused with
// INVALID_ARGUMENT. Any violation is __builtin_trap().
//
// Built with -fsanitize=fuzzer,address,undefined by clang (scripts/fuzz.sh),
// or with tests/fuzz/standalone_main.cc as a corpus replay under g++.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/cuckoo_filter.h"
#include "core/registry.h"
#include "server/wal/wal_format.h"
#include "tests/fuzz/mem_wal_env.h"

namespace {

using cuckoo::server::WalRecord;
using cuckoo::server::WalRecordType;

constexpr char kDir[] = "/wal";
constexpr uint8_t kMagic[8] = {0x89, 'C', 'K', 'W', 'A', 'L', '\n', 0};
// Filters created by a fuzzed log are built (and written to) only when small.
constexpr uint64_t kMaxFilterBytes = uint64_t{4} << 20;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void Put64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

std::vector<std::vector<uint8_t>> Split(const uint8_t* data, size_t size) {
  std::vector<std::vector<uint8_t>> segments;
  size_t begin = 0;
  for (size_t at = 8; at + 8 <= size; at += 8) {
    if (std::memcmp(data + at, kMagic, 8) == 0) {
      segments.emplace_back(data + begin, data + at);
      begin = at;
    }
  }
  segments.emplace_back(data + begin, data + size);
  return segments;
}

void Reseal(std::vector<std::vector<uint8_t>>& segments) {
  for (size_t i = 0; i < segments.size(); ++i) {
    std::vector<uint8_t>& s = segments[i];
    if (s.size() < cuckoo::server::kWalSegmentHeaderBytes) continue;
    Put64(s.data() + 16, i + 1);
    Put64(s.data() + 56, XXH3_64bits(s.data(), 56));
    size_t at = cuckoo::server::kWalSegmentHeaderBytes;
    while (at + 4 <= s.size()) {
      const uint32_t len = Get32(s.data() + at);
      if (len < 40 || len % 8 != 0 || len > cuckoo::server::kWalMaxRecordBytes ||
          len > s.size() - at) {
        break;
      }
      Put64(s.data() + at + len - 8, XXH3_64bits(s.data() + at, len - 8));
      at += len;
    }
  }
}

void Scan(const std::vector<std::vector<uint8_t>>& segments) {
  cuckoo::fuzz::MemWalEnv env;
  for (size_t i = 0; i < segments.size(); ++i) {
    env.files[absl::StrFormat("%s/%016x.wal", kDir, i + 1)] = segments[i];
  }
  uint64_t records = 0, last_lsn = 0;
  std::map<uint64_t, std::unique_ptr<cuckoo::CuckooFilter>> filters;
  absl::StatusOr<cuckoo::server::WalScan> scan =
      cuckoo::server::ScanWal(&env, kDir, [&](const WalRecord& r) -> absl::Status {
        Check(r.lsn > last_lsn);
        Check(r.synced_lsn < r.lsn);
        last_lsn = r.lsn;
        ++records;
        switch (r.type) {
          case WalRecordType::kCreateFilter:
            Check(!r.name.empty());
            if (cuckoo::CuckooFilter::MemoryBytes(r.shape) <= kMaxFilterBytes) {
              absl::StatusOr<std::unique_ptr<cuckoo::CuckooFilter>> f =
                  cuckoo::CuckooFilter::FromShape(r.shape);
              if (f.ok()) filters[r.lsn] = *std::move(f);
            }
            break;
          case WalRecordType::kDropFilter:
            filters.erase(r.filter_id);
            break;
          case WalRecordType::kRenameFilter:
            // What the decoder promises of a rename record: a valid name and
            // ids before the record, the renamed one never the replaced one.
            Check(cuckoo::FilterRegistry::ValidateName(r.name).ok());
            Check(r.filter_id != 0 && r.filter_id < r.lsn && r.replaced_id < r.lsn &&
                  r.replaced_id != r.filter_id);
            if (r.replaced_id != 0) filters.erase(r.replaced_id);
            break;
          case WalRecordType::kInsert:
          case WalRecordType::kDelete: {
            Check(r.write.hashes.size() == r.hashes.size());
            Check(r.hashes.empty() || r.write.hashes.data() == r.hashes.data());
            Check((r.type == WalRecordType::kInsert) ==
                  (r.write.kind == cuckoo::ShardWrite::kInsert));
            auto it = filters.find(r.filter_id);
            if (it != filters.end()) {
              absl::StatusOr<bool> applied = it->second->ApplyShardWrite(r.write, r.lsn);
              Check(applied.ok() || absl::IsInvalidArgument(applied.status()));
            }
            break;
          }
          case WalRecordType::kSetExpiry: {
            Check(r.filter_id != 0);
            Check(r.expire_at >= 0 && r.expire_at <= cuckoo::server::kWalMaxExpireAt);
            auto it = filters.find(r.filter_id);
            if (it != filters.end()) it->second->set_expire_at(r.expire_at);
            break;
          }
          case WalRecordType::kTxnBegin:
            Check(r.filter_id == 0);
            break;
          case WalRecordType::kTxnEnd:
            Check(r.filter_id != 0 && r.filter_id < r.lsn);
            break;
          case WalRecordType::kRequestStart:
          case WalRecordType::kRequestResults:
            Check(!r.request.key.empty());
            Check(r.request.offset + r.request.results.size() <= r.request.keys);
            break;
          default:
            Check(false);
        }
        return absl::OkStatus();
      });
  if (!scan.ok()) return;
  Check(scan->records == records);
  Check(records == 0 || scan->last_lsn == last_lsn);
  for (const cuckoo::server::WalSegmentInfo& s : scan->segments) Check(s.end <= s.file_bytes);
  // A log that ends cleanly, as Wal::Open leaves it (nothing unused), is
  // what a clean close records: read with that record (only the written
  // part of its last segment), it must give the same records.
  if (!scan->cut.empty() || !scan->unused.empty()) return;
  cuckoo::server::WalClosed closed;
  if (!scan->segments.empty()) {
    closed.segment_sequence = scan->segments.back().sequence;
    closed.end = scan->segments.back().end;
    closed.last_lsn = scan->segments.back().last_lsn;
  }
  if (!scan->prepared.path.empty()) {
    closed.prepared_sequence = scan->prepared.sequence;
    closed.prepared_bytes = scan->prepared.file_bytes;
  }
  std::vector<uint8_t>& file = env.files[absl::StrFormat("%s/CLOSED", kDir)];
  file.resize(cuckoo::server::kWalClosedBytes);
  cuckoo::server::EncodeWalClosed(closed, file.data());
  uint64_t again = 0, again_last = 0;
  absl::StatusOr<cuckoo::server::WalScan> closed_scan =
      cuckoo::server::ScanWal(&env, kDir, [&](const WalRecord& r) -> absl::Status {
        ++again;
        again_last = r.lsn;
        return absl::OkStatus();
      });
  Check(closed_scan.ok());
  Check(closed_scan->closed_cleanly);
  Check(again == records && again_last == last_lsn);
  Check(closed_scan->last_lsn == scan->last_lsn);
  Check(closed_scan->segments.size() == scan->segments.size());
  Check(closed_scan->prepared.path == scan->prepared.path);
  Check(closed_scan->read_bytes <= scan->read_bytes + cuckoo::server::kWalClosedBytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::vector<uint8_t>> segments = Split(data, size);
  Scan(segments);
  Reseal(segments);
  Scan(segments);
  return 0;
}
