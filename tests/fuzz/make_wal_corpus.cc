// Writes the seed corpus of the log reader's fuzzer (tests/fuzz/wal_fuzz.cc)
// into a directory: logs written by the real writer (server/wal/wal.h) into a
// scratch directory, then cut after their last record: creations, inserts
// (if_absent, past full), deletes, a drop, a second filter; and the same log
// torn inside its last record, with a flipped byte in the middle, and with
// only its header. Generated at build or test time, never committed.
//
//   make_wal_corpus <dir>
//
// Each seed must scan as this file expects (ScanWal over an in-memory copy),
// so a change that breaks the corpus fails here, not silently in the
// fuzzer. Exits non-zero on any failure.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cuckoo_filter.h"
#include "server/wal/wal.h"
#include "server/wal/wal_format.h"
#include "tests/fuzz/mem_wal_env.h"

namespace {

namespace fs = std::filesystem;
using cuckoo::Env;
using cuckoo::server::Wal;

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "make_wal_corpus: %s\n", msg.c_str());
  std::exit(1);
}

// A log written by Wal into `dir`: its segments' bytes, concatenated, each
// cut 8 bytes after its last record (the zeros the reader stops at).
std::vector<uint8_t> WriteLog(const std::string& dir) {
  absl::StatusOr<cuckoo::server::WalScan> empty = cuckoo::server::ScanWal(
      cuckoo::PosixEnv(), dir, [](const cuckoo::server::WalRecord&) { return absl::OkStatus(); });
  if (!empty.ok()) Fail(empty.status().ToString());
  absl::StatusOr<std::unique_ptr<Wal>> wal =
      Wal::Open({.dir = dir, .segment_bytes = cuckoo::server::kWalMinSegmentBytes}, *empty, 0);
  if (!wal.ok()) Fail(wal.status().ToString());
  uint64_t last = 0;
  for (int f = 0; f < 2; ++f) {
    absl::StatusOr<std::unique_ptr<cuckoo::CuckooFilter>> filter =
        cuckoo::CuckooFilter::Create({.capacity = 200,
                                      .shards = 2,
                                      .max_kicks = 20,
                                      .seed = uint64_t(7 + f),
                                      // The second filter grows (its create record has the growth
                                      // block; its 360 keys pass its capacity).
                                      .growth_factor = f == 1 ? 2u : 0u});
    if (!filter.ok()) Fail(filter.status().ToString());
    const std::string name = f == 0 ? "users" : "urls";
    const uint64_t id = (*wal)->AppendCreateFilter(name, (*filter)->shape());
    (*filter)->set_id(id);
    auto log = [&](const cuckoo::ShardWrite& w) { return last = (*wal)->AppendShardWrite(id, w); };
    for (int batch = 0; batch < 3; ++batch) {
      std::vector<uint64_t> hashes;
      for (int k = 0; k < 120; ++k) {
        hashes.push_back((*filter)->Hash(absl::StrCat(name, batch, ":", k)));
      }
      // A request id's records around the batch (as a request with an id
      // logs them): its start before the writes, its results after.
      cuckoo::server::WalRequest request{.key = absl::StrCat("i/req-", name, batch, "/digest"),
                                         .method = cuckoo::ShardWrite::kInsert,
                                         .keys = static_cast<uint32_t>(hashes.size()),
                                         .time = absl::FromUnixSeconds(1'700'000'000 + batch)};
      // The second batch inside a transaction (as a Redis EXEC's writes).
      const uint64_t transaction = batch == 1 ? (*wal)->BeginTransaction() : 0;
      last = (*wal)->AppendRequestStart(id, request);
      std::vector<cuckoo::InsertResult> out(hashes.size());
      (*filter)->InsertHashed(
          hashes, batch == 1, absl::MakeSpan(out), [] { return false; }, log);
      for (cuckoo::InsertResult r : out) request.results.push_back(static_cast<uint8_t>(r));
      last = (*wal)->AppendRequestResults(id, request);
      std::vector<cuckoo::DeleteResult> del(10);
      (*filter)->DeleteHashed(
          absl::MakeConstSpan(hashes).subspan(0, 10), absl::MakeSpan(del), [] { return false; },
          log);
      if (transaction != 0) (*wal)->EndTransaction(transaction);
      // Durable before the next batch: later records then carry a synced
      // lsn that proves this one was written (what tells damage from a tear).
      if (absl::Status s = (*wal)->WaitDurable(last); !s.ok()) Fail(s.ToString());
    }
    // An expiry set, then (the first filter) cleared, or the filter dropped.
    last = (*wal)->AppendSetExpiry(id, 1'796'083'200'000 + f);
    if (f == 1) last = (*wal)->AppendSetExpiry(id, 0);
    if (f == 0) last = (*wal)->AppendDropFilter(id);
    // The second filter is renamed (RENAME urls seen, as RENAMENX), then
    // over a name it replaces (a filter created for it).
    if (f == 1) {
      (*wal)->AppendRenameFilter(id, "seen", 0, false);
      const uint64_t other = (*wal)->AppendCreateFilter("seen:yesterday", (*filter)->shape());
      last = (*wal)->AppendRenameFilter(id, "seen:yesterday", other, true);
    }
  }
  if (absl::Status s = (*wal)->WaitDurable(last); !s.ok()) Fail(s.ToString());
  (*wal)->Close();
  std::vector<uint8_t> all;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    size_t end = bytes.size();
    while (end > cuckoo::server::kWalSegmentHeaderBytes && bytes[end - 1] == 0) --end;
    if (end <= cuckoo::server::kWalSegmentHeaderBytes) continue;  // The prepared segment.
    end = std::min(bytes.size(), (end + 7) / 8 * 8 + 8);
    all.insert(all.end(), bytes.begin(), bytes.begin() + end);
  }
  return all;
}

// Scans `bytes` as one segment, as the fuzzer does.
absl::StatusOr<cuckoo::server::WalScan> ScanBytes(const std::vector<uint8_t>& bytes) {
  cuckoo::fuzz::MemWalEnv env;
  env.files["/wal/0000000000000001.wal"] = bytes;
  return cuckoo::server::ScanWal(&env, "/wal",
                                 [](const cuckoo::server::WalRecord&) { return absl::OkStatus(); });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Fail("usage: make_wal_corpus <dir>");
  const fs::path out = argv[1];
  std::error_code ec;
  fs::create_directories(out, ec);
  const fs::path scratch = fs::temp_directory_path() / absl::StrFormat("wal-corpus-%d", getpid());
  fs::remove_all(scratch, ec);
  fs::create_directories(scratch / "wal", ec);
  const std::vector<uint8_t> log = WriteLog((scratch / "wal").string());
  fs::remove_all(scratch, ec);

  absl::StatusOr<cuckoo::server::WalScan> whole = ScanBytes(log);
  if (!whole.ok() || whole->records < 10 || !whole->cut.empty()) {
    Fail(absl::StrCat("the written log does not scan cleanly: ",
                      whole.ok() ? absl::StrCat(whole->records, " records, cut ", whole->cut)
                                 : whole.status().ToString()));
  }
  struct Seed {
    std::string name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Seed> seeds = {{"log", log}};
  // Torn: the last record cut in half (the 8 zero bytes and half of it).
  std::vector<uint8_t> torn(log.begin(), log.end() - 8 - 24);
  torn.resize(log.size(), 0);
  seeds.push_back({"torn", torn});
  // Damaged in the middle: not a tear, a later record proves it durable.
  std::vector<uint8_t> damaged = log;
  damaged[damaged.size() / 3] ^= 0x40;
  seeds.push_back({"damaged", damaged});
  seeds.push_back({"header-only", std::vector<uint8_t>(log.begin(), log.begin() + 64)});
  for (const Seed& s : seeds) {
    std::ofstream f(out / s.name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(s.bytes.data()), s.bytes.size());
    if (!f) Fail(absl::StrCat("cannot write ", (out / s.name).string()));
  }
  absl::StatusOr<cuckoo::server::WalScan> torn_scan = ScanBytes(torn);
  if (!torn_scan.ok() || torn_scan->cut.empty()) Fail("the torn seed is not cut off");
  if (absl::Status s = ScanBytes(damaged).status(); !absl::IsDataLoss(s)) {
    Fail(absl::StrCat("the damaged seed scans as ", s.ToString(), ", not DATA_LOSS"));
  }
  std::printf("make_wal_corpus: %zu seeds in %s (log: %llu records, %zu bytes)\n", seeds.size(),
              out.c_str(), static_cast<unsigned long long>(whole->records), log.size());
  return 0;
}
