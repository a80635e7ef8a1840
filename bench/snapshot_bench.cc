// snapshot_bench: how fast a filter is written to and loaded from its
// snapshot file (core/snapshot.h), next to what the disk itself does, and
// what a snapshot in progress costs concurrent inserts. bench/README.md has
// the details; GB are 10^9 bytes.
//
//   snapshot_bench                        10^8 items (158 MB file), ~1 minute
//   snapshot_bench --restart-items=1e9    restart time of 10^9 items (1.6 GB)
//   flags: --dir=D --items=N --fill=F --shards=S --reps=R --seconds=T
//          --rounds=P --keep --semi-sort (f=13 semi-sorted, same size as the
//          default packed f=12; a load also checks every bucket)
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cuckoo_filter.h"
#include "core/hash.h"  // xxhash.h
#include "core/internal/filter_loading.h"
#include "core/internal/page_buffer.h"
#include "core/snapshot.h"

namespace cuckoo::bench {
namespace {

constexpr size_t kBatch = 1024;
constexpr size_t kChunk = size_t{16} << 20;           // Disk test I/O size (dd bs=16M).
constexpr uint64_t kPrefillSalt = uint64_t{1} << 62;  // Key ranges of the insert test.
constexpr uint64_t kWindowSalt = uint64_t{3} << 61;

struct Options {
  std::string dir;               // Default: snapshot-bench-data next to the binary.
  uint64_t items = 100'000'000;  // Filter capacity.
  double fill = 1.0;             // Share of the capacity inserted.
  uint32_t shards = 0;           // 0: the default for the capacity.
  int reps = 3;
  double seconds = 3;      // Insert test: window length.
  int rounds = 4;          // Insert test: pairs of windows (without, with snapshots).
  bool keep = false;       // Keep the snapshot files.
  bool restart = false;    // --restart-items: no insert test.
  bool semi_sort = false;  // f=13 semi-sorted instead of f=12 packed.
};

[[noreturn]] void Fail(absl::string_view msg) {
  std::fflush(stdout);
  absl::FPrintF(stderr, "snapshot_bench: %s\n", msg);
  std::exit(1);
}

void Check(bool ok, absl::string_view what) {
  if (!ok) Fail(absl::StrCat(what, ": ", std::strerror(errno)));
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t KeyHash(uint64_t i) {  // splitmix64: random 64-bit "pre-hashed" keys.
  uint64_t x = i + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Inserts (or deletes) keys salt + [first, last) in batches on `threads`
// threads; returns the inserts that failed with kFull.
uint64_t Apply(CuckooFilter& f, uint64_t first, uint64_t last, uint64_t salt, int threads,
               bool erase = false) {
  std::atomic<uint64_t> next{first}, full{0};
  auto work = [&] {
    uint64_t h[kBatch];
    InsertResult r[kBatch];
    DeleteResult d[kBatch];
    for (uint64_t b; (b = next.fetch_add(kBatch)) < last;) {
      size_t n = std::min<uint64_t>(kBatch, last - b);
      for (size_t i = 0; i < n; ++i) h[i] = KeyHash(salt + b + i);
      if (erase) {
        f.DeleteHashed({h, n}, {d, n});
      } else {
        f.InsertHashed({h, n}, false, {r, n});
        full += std::count(r, r + n, InsertResult::kFull);
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return full.load();
}

// Bit-for-bit equality of two filters' tables and item counts.
bool SameTables(const CuckooFilter& a, const CuckooFilter& b) {
  if (!(a.shape() == b.shape()) || a.items() != b.items()) return false;
  std::vector<uint8_t> x(a.shape().table_bytes_per_shard()), y(x.size());
  for (uint32_t i = 0; i < a.shape().shards; ++i) {
    a.CopyShard(i, x.data());
    b.CopyShard(i, y.data());
    if (x != y) return false;
  }
  return true;
}

// Percent of `path`'s pages in the page cache (mincore), after writing them
// back (fsync) and dropping them from the cache if `drop` (needs no root).
double PageCache(const std::string& path, bool drop = false) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, path);
  Check(!drop || ::fdatasync(fd) == 0, "fdatasync");
  Check(!drop || ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0, "posix_fadvise");
  struct stat st;
  Check(::fstat(fd, &st) == 0, "fstat");
  const size_t size = st.st_size, page = ::sysconf(_SC_PAGESIZE), pages = (size + page - 1) / page;
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  Check(m != MAP_FAILED, "mmap");
  std::vector<unsigned char> in(pages);
  Check(::mincore(m, size, in.data()) == 0, "mincore");
  ::munmap(m, size);
  return 100.0 * std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }) /
         std::max<size_t>(1, pages);
}

// The disk's own sequential write and read in kChunk blocks, timed like dd
// (open, every block, fsync, close).
class Disk {
 public:
  explicit Disk(std::string path) : path_(std::move(path)) {
    absl::StatusOr<PageBuffer> b = PageBuffer::Allocate(kChunk);  // 2 MiB aligned.
    if (!b.ok()) Fail(b.status().ToString());
    buf_ = *std::move(b);
    auto* words = reinterpret_cast<uint64_t*>(buf_.data());         // Not zeros: a layer below
    for (size_t i = 0; i < kChunk / 8; ++i) words[i] = KeyHash(i);  // might shortcut them.
  }
  ~Disk() { ::unlink(path_.c_str()); }
  double Write(uint64_t bytes, bool direct) {
    double t0 = Now();
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
    Check(fd >= 0, path_);
    for (uint64_t done = 0; done < bytes; done += kChunk) {
      Check(::write(fd, buf_.data(), kChunk) == static_cast<ssize_t>(kChunk), "write");
    }
    Check(::fsync(fd) == 0, "fsync");
    ::close(fd);
    return Now() - t0;
  }
  double Read(bool direct) {  // Buffered reads start cold, as ReadSnapshotFile's.
    if (!direct) PageCache(path_, /*drop=*/true);
    double t0 = Now();
    int fd = ::open(path_.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
    Check(fd >= 0, path_);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (ssize_t r; (r = ::read(fd, buf_.data(), kChunk)) != 0;) Check(r > 0, "read");
    ::close(fd);
    return Now() - t0;
  }

 private:
  std::string path_;
  PageBuffer buf_;
};

// One measured quantity: seconds per rep, shown as GB/s (seconds).
struct Row {
  std::string name;
  uint64_t bytes = 0;
  std::vector<double> seconds;
};

void PrintRows(const std::vector<Row>& rows, int reps) {
  std::string line = absl::StrFormat("%-34s", "GB/s (seconds)");
  for (int r = 1; r <= reps; ++r) absl::StrAppendFormat(&line, "  %14s", absl::StrCat("rep ", r));
  absl::PrintF("%s  %14s  %14s\n", line, "best", "median");
  for (const Row& row : rows) {
    auto cell = [&](double s) {
      return absl::StrFormat("  %6.3f (%5.3f)", row.bytes / s / 1e9, s);
    };
    line = absl::StrFormat("%-34s", row.name);
    for (double s : row.seconds) absl::StrAppend(&line, cell(s));
    absl::PrintF("%s%s%s\n", line, cell(*std::min_element(row.seconds.begin(), row.seconds.end())),
                 cell(Median(row.seconds)));
  }
}

std::unique_ptr<CuckooFilter> NewFilter(const Options& o) {
  FilterOptions opts{.capacity = o.items,
                     .fingerprint_bits = o.semi_sort ? 13u : 12u,
                     .bucket_size = 4,
                     .semi_sort = o.semi_sort};
  opts.shards = o.shards;
  opts.seed = 7;
  auto f = CuckooFilter::Create(opts);
  if (!f.ok()) Fail(f.status().ToString());
  return *std::move(f);
}

SnapshotWriteResult Write(const CuckooFilter& f, absl::string_view name, const Options& o) {
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(f, name, o.dir);
  if (!w.ok()) Fail(w.status().ToString());
  return *std::move(w);
}

// Snapshot writes and loads next to the disk's own rates, rep by rep, then
// the in-memory parts alone. Returns the cold loads' seconds.
std::vector<double> WriteAndLoad(const Options& o, const CuckooFilter& f) {
  const std::string path = SnapshotPath(o.dir, "bench");
  Disk disk(absl::StrCat(o.dir, "/disk-test.tmp"));
  const uint64_t bytes = Write(f, "bench", o).bytes;  // A first, untimed write.
  const uint64_t disk_bytes = (bytes + kChunk - 1) / kChunk * kChunk;
  std::vector<Row> rows;
  for (const char* name : {"snapshot write (WriteSnapshotFile)", "  disk: O_DIRECT write + fsync",
                           "  disk: buffered write + fsync", "snapshot load, warm page cache",
                           "snapshot load, cold (fadvise)", "  disk: O_DIRECT read",
                           "  disk: buffered read, cold", "in memory: CopyShard (locked)",
                           "in memory: XXH3 of the copies", "in memory: new table, first touch"}) {
    rows.push_back({name, absl::StrContains(name, "disk:") ? disk_bytes : bytes, {}});
  }
  auto load = [&](bool check) {
    double t0 = Now();
    absl::StatusOr<LoadedSnapshot> l = ReadSnapshotFile(path, "bench");
    double s = Now() - t0;
    if (!l.ok()) Fail(l.status().ToString());
    if (check && !SameTables(f, *l->filter)) Fail("the loaded filter differs from the original");
    return s;
  };
  absl::StatusOr<PageBuffer> copy = PageBuffer::Allocate(f.shape().table_bytes_per_shard());
  if (!copy.ok()) Fail(copy.status().ToString());
  std::string resident;
  uint64_t sink = 0;
  for (int r = 0; r < o.reps; ++r) {
    SnapshotWriteResult w = Write(f, "bench", o);
    if (w.bytes != bytes || w.items != f.items()) Fail("unexpected snapshot size or items");
    rows[0].seconds.push_back(absl::ToDoubleSeconds(w.duration));
    rows[1].seconds.push_back(disk.Write(disk_bytes, true));
    rows[2].seconds.push_back(disk.Write(disk_bytes, false));
    absl::StrAppendFormat(&resident, " %.0f/", PageCache(path));
    rows[3].seconds.push_back(load(r == 0));
    absl::StrAppendFormat(&resident, "%.0f", PageCache(path, /*drop=*/true));
    rows[4].seconds.push_back(load(false));
    rows[5].seconds.push_back(disk.Read(true));
    rows[6].seconds.push_back(disk.Read(false));
    double copy_s = 0, hash_s = 0, t0 = Now();
    for (uint32_t i = 0; i < f.shape().shards; ++i) {
      f.CopyShard(i, copy->data());
      double t1 = Now();
      sink += XXH3_64bits(copy->data(), copy->size());
      copy_s += t1 - t0;
      hash_s += (t0 = Now()) - t1;
    }
    rows[7].seconds.push_back(copy_s);
    rows[8].seconds.push_back(hash_s);
    t0 = Now();  // What a load pays before it reads a byte: the new table's page faults.
    absl::StatusOr<std::unique_ptr<CuckooFilter>> fresh = CuckooFilter::FromShape(f.shape());
    if (!fresh.ok()) Fail(fresh.status().ToString());
    for (uint32_t i = 0; i < f.shape().shards; ++i) {
      absl::Span<uint8_t> t = internal::FilterLoading::MutableShardBytes(**fresh, i);
      std::memset(t.data(), static_cast<int>(sink & 1), t.size());
    }
    rows[9].seconds.push_back(Now() - t0);
  }
  absl::PrintF("\nsnapshot file %d bytes (disk tests %d bytes), %d reps\n", bytes, disk_bytes,
               o.reps);
  PrintRows(rows, o.reps);
  absl::PrintF("%% of the file in the page cache before each warm/cold load:%s\n", resident);
  absl::PrintF("first warm load compared bit for bit with the filter: equal\n");
  if (!o.keep) ::unlink(path.c_str());
  return rows[4].seconds;
}

// Window `i` of the insert test: inserts from this thread for o.seconds,
// while another thread writes snapshots of the filter in a loop if i is odd.
// Prints a line; returns keys per second.
double InsertWindow(const Options& o, CuckooFilter& f, int i) {
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  auto loop = [&] {
    for (; !stop.load(); ++written) Write(f, "inserts", o);
  };
  std::thread writer = i % 2 ? std::thread(loop) : std::thread();
  std::vector<double> lat;
  uint64_t h[kBatch], keys = 0;
  InsertResult r[kBatch];
  const double t0 = Now();
  for (double t = t0, now; t < t0 + o.seconds; t = now) {
    for (size_t j = 0; j < kBatch; ++j) h[j] = KeyHash(kWindowSalt + keys + j);
    f.InsertHashed({h, kBatch}, false, {r, kBatch});
    keys += kBatch;
    lat.push_back((now = Now()) - t);
  }
  const double rate = keys / (Now() - t0);
  const int snapshots = written.load();
  stop = true;
  if (writer.joinable()) writer.join();
  Apply(f, 0, keys, kWindowSalt, 1, /*erase=*/true);  // Back to the same load.
  std::sort(lat.begin(), lat.end());
  absl::PrintF("%-8d %-22s %10.2f %12.2f %12.2f %10s\n", i + 1,
               i % 2 ? "B: snapshots in a loop" : "A: no snapshot", rate / 1e6,
               lat[lat.size() * 99 / 100] * 1e3, lat.back() * 1e3,
               i % 2 ? absl::StrCat(snapshots) : "-");
  return rate;
}

void InsertTest(const Options& o) {
  std::unique_ptr<CuckooFilter> f = NewFilter(o);
  Apply(*f, 0, o.items / 2, kPrefillSalt, 2);
  absl::PrintF(
      "\ninserts while snapshots run: capacity %d, %d shards, %d items (load %.0f%%); 1 inserter "
      "thread, batches of %d pre-hashed keys, %.1f s windows; keys deleted after each window\n",
      o.items, f->shape().shards, f->items(), 100.0 * f->items() / f->shape().total_slots(), kBatch,
      o.seconds);
  absl::PrintF("%-8s %-22s %10s %12s %12s %10s\n", "window", "condition", "M keys/s",
               "p99 batch ms", "max batch ms", "snapshots");
  std::vector<double> rate[2];
  for (int i = 0; i < 2 * o.rounds; ++i) rate[i % 2].push_back(InsertWindow(o, *f, i));
  const double a = Median(rate[0]), b = Median(rate[1]);
  absl::PrintF("median M keys/s: without %.2f, with snapshots %.2f; ratio %.3f (target >= 0.80)\n",
               a / 1e6, b / 1e6, b / a);
  if (!o.keep) ::unlink(SnapshotPath(o.dir, "inserts").c_str());
}

// The 1, 5 and 15 minute load averages: other tenants' work shows here.
std::string LoadAverages() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return absl::StrCat(a, " ", b, " ", c);
}

std::string FsType(const std::string& dir) {
  struct statfs st;
  if (::statfs(dir.c_str(), &st) != 0) return "?";
  const auto t = static_cast<uint64_t>(st.f_type);
  return t == EXT4_SUPER_MAGIC ? "ext4"
         : t == TMPFS_MAGIC    ? "tmpfs: not a disk!"
                               : absl::StrFormat("f_type 0x%x", t);
}

constexpr char kUsage[] =
    "snapshot_bench [--dir=D] [--items=N] [--fill=F] [--shards=S] [--reps=R] [--seconds=T] "
    "[--rounds=P] [--restart-items=N] [--keep] [--semi-sort]";

bool ParseArgs(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const absl::string_view flag = arg.substr(0, eq);
    const absl::string_view v = eq == arg.npos ? "" : arg.substr(eq + 1);
    double d = 0;  // Counts may be written 1e9.
    const bool num = absl::SimpleAtod(v, &d) && d > 0 && d <= 1e13;
    bool ok = num || flag == "--keep" || flag == "--dir" || flag == "--semi-sort";
    if (flag == "--keep" && eq == arg.npos) {
      o.keep = true;
    } else if (flag == "--semi-sort" && eq == arg.npos) {
      o.semi_sort = true;
    } else if (flag == "--dir" && !v.empty()) {
      o.dir = std::string(v);
    } else if (flag == "--items" || flag == "--restart-items") {
      o.items = static_cast<uint64_t>(d);
      o.restart = flag == "--restart-items";
    } else if (flag == "--fill") {
      o.fill = d;
      ok = ok && d <= 1.05;
    } else if (flag == "--shards") {
      o.shards = static_cast<uint32_t>(d);
    } else if (flag == "--reps" || flag == "--rounds") {
      (flag == "--reps" ? o.reps : o.rounds) = static_cast<int>(d);
      ok = ok && d >= 1;
    } else if (flag == "--seconds") {
      o.seconds = d;
    } else {
      ok = false;
    }
    if (!ok) {
      absl::FPrintF(stderr, "snapshot_bench: bad argument %s\nusage: %s\n", arg, kUsage);
      return false;
    }
  }
  return true;
}

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, o)) return 2;
  if (o.dir.empty()) {  // In the build tree, never /tmp: that may be tmpfs.
    o.dir = std::filesystem::read_symlink("/proc/self/exe").parent_path() / "snapshot-bench-data";
  }
  const bool made_dir = ::mkdir(o.dir.c_str(), 0755) == 0;
  Check(made_dir || errno == EEXIST, absl::StrCat("mkdir ", o.dir));
  const double start = Now();
  std::unique_ptr<CuckooFilter> f = NewFilter(o);
  const FilterShape& s = f->shape();
  absl::PrintF("snapshot_bench: dir %s (%s), %d cpus, load averages %s\n", o.dir, FsType(o.dir),
               std::thread::hardware_concurrency(), LoadAverages());
  absl::PrintF("filter: capacity %d, f=%d b=%d %s, %d shards of %d bytes, table %.3f GB\n", o.items,
               s.fingerprint_bits, s.bucket_size, TableKindName(s.table_kind), s.shards,
               s.table_bytes_per_shard(), f->memory_bytes() / 1e9);
  double t0 = Now();
  const uint64_t n = static_cast<uint64_t>(o.items * o.fill);
  const uint64_t full = Apply(*f, 0, n, 0, 2);
  absl::PrintF(
      "filled with %d pre-hashed keys in %.1f s on 2 threads: %d items, load %.2f%%, %d "
      "inserts failed (full)\n",
      n, Now() - t0, f->items(), 100.0 * f->items() / s.total_slots(), full);
  std::fflush(stdout);

  std::vector<double> cold = WriteAndLoad(o, *f);
  if (o.restart) {
    absl::PrintF("restart of %d items: cold load %.2f s median, %.2f s best (target < 10 s)\n",
                 f->items(), Median(cold), *std::min_element(cold.begin(), cold.end()));
  }
  f.reset();
  std::fflush(stdout);
  if (!o.restart) InsertTest(o);
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  absl::PrintF("\npeak RSS %d MiB, total time %.0f s, load averages at the end %s\n",
               ru.ru_maxrss / 1024, Now() - start, LoadAverages());
  if (made_dir && !o.keep) ::rmdir(o.dir.c_str());
  return 0;
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) { return cuckoo::bench::Main(argc, argv); }
