// Fuzzes the cluster log's entry decoder (server/cluster/log_entry.h:
// DecodeLogEntry), which every replica runs on every message of the
// JetStream stream: anyone allowed to publish on the stream's subject can put
// bytes there. Checked beyond "no crash, no sanitizer report":
//   - a decoded entry encodes back to exactly the input bytes (so nothing
//     the decoder accepts is ambiguous or ignored), and its fields are in
//     range (a name of 1 to kMaxFilterNameBytes, 512; a create's shape passes
//     ValidateShape; writes name a filter id; a rename's new name is a valid
//     filter name, and it never replaces itself, nor anything unless it
//     may);
//   - anything refused is DATA_LOSS or FAILED_PRECONDITION (a newer format),
//     never another code.
// Each input is also tried with its checksum recomputed, so that mutations
// get past it to the structure checks.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/registry.h"  // kMaxFilterNameBytes
#include "server/cluster/log_entry.h"
#include "xxhash.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "log_entry_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

void Check(const std::string& bytes) {
  using namespace cuckoo::server;
  absl::StatusOr<LogEntry> e = DecodeLogEntry(bytes);
  if (!e.ok()) {
    if (!absl::IsDataLoss(e.status()) && !absl::IsFailedPrecondition(e.status())) {
      Fail("refused with an unexpected code", e.status().ToString());
    }
    return;
  }
  if (e->name.empty() || e->name.size() > cuckoo::kMaxFilterNameBytes) {
    Fail("name length", std::to_string(e->name.size()));
  }
  std::string again;
  switch (e->type) {
    case LogEntryType::kInsert:
      again = EncodeInsertEntry(e->filter_id, e->name, e->if_absent, e->hashes);
      break;
    case LogEntryType::kDelete:
      again = EncodeDeleteEntry(e->filter_id, e->name, e->hashes);
      break;
    case LogEntryType::kCreateFilter:
      if (!cuckoo::ValidateShape(e->shape).ok()) Fail("create with a bad shape", "");
      again = EncodeCreateEntry(e->name, e->shape);
      break;
    case LogEntryType::kDropFilter:
      again = EncodeDropEntry(e->filter_id, e->name);
      break;
    case LogEntryType::kSetExpiry:
      if (e->expire_at < 0 || e->expire_at > kLogEntryMaxExpireAt) {
        Fail("expiry out of range", std::to_string(e->expire_at));
      }
      again = EncodeSetExpiryEntry(e->filter_id, e->name, e->expire_at);
      break;
    case LogEntryType::kRenameFilter:
      if (!cuckoo::FilterRegistry::ValidateName(e->new_name).ok()) Fail("rename to a bad name", "");
      if (e->replaced_id == e->filter_id) Fail("rename replacing itself", "");
      if (!e->replace && e->replaced_id != 0) Fail("RENAMENX replacing a filter", "");
      again = EncodeRenameEntry(e->filter_id, e->name, e->new_name, e->replaced_id, e->replace);
      break;
  }
  if (e->type != LogEntryType::kCreateFilter && e->filter_id == 0) Fail("filter id 0", "");
  if (again != bytes) Fail("accepted bytes do not encode back to themselves", "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);
  // The same bytes with a checksum that matches, so that mutations reach
  // the checks behind it.
  if (bytes.size() >= 8) {
    std::string sealed = bytes;
    const uint64_t sum = XXH3_64bits(sealed.data(), sealed.size() - 8);
    std::memcpy(sealed.data() + sealed.size() - 8, &sum, 8);
    Check(sealed);
  }
  return 0;
}
