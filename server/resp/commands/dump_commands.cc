// CF.SCANDUMP and CF.LOADCHUNK: a filter moved as chunks of its snapshot
// file (server/resp/commands/resp_commands.h).
//
// Every file operation of a dump or load runs on transfer_threads_, and the
// command is answered from there; transfer_mu_ guards only the maps and the
// bookkeeping, never file work. A load runs one step at a time (`busy`); a
// dump's chunks are read with pread on the dump's descriptor. Both belong
// to the connection that started them (Session::id): another connection's
// iterator is refused, and they end with their connection (Closed, RESET).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/little_endian.h"
#include "base/units.h"
#include "boost/asio/post.hpp"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using redis::A;
using redis::kCfLoadChunk;
using redis::kCfScanDump;
using redis::NameError;
using redis::ParseInt;
using redis::Shown;
using redis::StatusError;
using resp::Command;
using resp::Session;
using resp::Writer;

static_assert((kMaxRedisDumps + kMaxRedisLoads) * 2 * (kRedisDumpChunkBytes + 4096) <=
                  kRedisTransferBytes + (kMaxRedisDumps + kMaxRedisLoads) * 8192,
              "the transfer threads' chunks are in the stated overhead (kRedisTransferBytes)");

// A dump's iterators: the dump's id in the high 31 bits, the chunk in the
// low 32 (1 = the header).
constexpr uint64_t Iterator(uint64_t id, uint64_t chunk) { return id << 32 | chunk; }

std::string Errno(int err) { return std::error_code(err, std::generic_category()).message(); }

// Creates `path` for reading and writing and removes it from its directory
// at once: the descriptor is the file's only reference, so the file and its
// space go when the descriptor closes, whatever ends the process (a crash,
// kill -9). A crash between the two calls leaves the name, which the next
// start-up removes with the rest of the directory (persistence_load.cc).
// -1 with errno on failure.
int OpenUnlinked(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (::unlink(path.c_str()) != 0) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

void RedisCommands::Discard(std::shared_ptr<Dump> dump) {
  boost::asio::post(transfer_threads_, [dump = std::move(dump)]() mutable {
    // The descriptor (the removed file's last reference) closes with the
    // last reference to the dump: a chunk read may hold one still.
    dump.reset();
  });
}

void RedisCommands::Discard(std::shared_ptr<Load> load) {
  // Not busy (no step of it runs): its descriptor and claim are free.
  boost::asio::post(transfer_threads_, [load = std::move(load)] {
    if (load->fd >= 0) ::close(std::exchange(load->fd, -1));
    load->claim.Reset();
  });
}

void RedisCommands::EndLoad(const std::shared_ptr<Load>& load) {
  {
    MutexLock lock(&transfer_mu_);
    auto found = loads_.find(load->name);
    if (found != loads_.end() && found->second == load) loads_.erase(found);
  }
  if (load->fd >= 0) ::close(std::exchange(load->fd, -1));
  load->claim.Reset();
}

bool RedisCommands::StepDone(Load& load) {
  MutexLock lock(&transfer_mu_);
  load.busy = false;
  load.touched = Clock::now();
  return !load.owner_gone;
}

void RedisCommands::Closed(Session* session) {
  ExecPaused(session);  // (The connection ended it already.)
  EndTransfersOf(session->id);
}

void RedisCommands::EndTransfersOf(uint64_t owner) {
  std::vector<std::shared_ptr<Dump>> dumps;
  std::vector<std::shared_ptr<Load>> loads;
  {
    MutexLock lock(&transfer_mu_);
    for (auto it = dumps_.begin(); it != dumps_.end();) {
      Dump& d = *it->second;
      if (d.owner != owner) {
        ++it;
      } else if (!d.ready) {
        d.owner_gone = true;  // The export's end removes it.
        ++it;
      } else {
        dumps.push_back(std::move(it->second));
        it = dumps_.erase(it);
      }
    }
    for (auto it = loads_.begin(); it != loads_.end();) {
      Load& l = *it->second;
      if (l.owner != owner) {
        ++it;
      } else if (l.busy) {
        l.owner_gone = true;  // The step's end removes it.
        ++it;
      } else {
        loads.push_back(std::move(it->second));
        it = loads_.erase(it);
      }
    }
  }
  for (std::shared_ptr<Dump>& d : dumps) Discard(std::move(d));
  for (std::shared_ptr<Load>& l : loads) Discard(std::move(l));
}

bool RedisCommands::FilterDropped(const Dump& dump) const {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> now = registry_->GetLive(A(dump.name));
  // The same filter has the same control block; a weak reference that
  // expired matches none the registry holds.
  return !now.ok() || dump.filter.owner_before(*now) || now->owner_before(dump.filter);
}

std::vector<std::shared_ptr<RedisCommands::Dump>> RedisCommands::TakeDroppedDumps(
    Clock::time_point now) {
  std::vector<std::shared_ptr<Dump>> dropped;
  for (auto it = dumps_.begin(); it != dumps_.end();) {
    const Dump& d = *it->second;
    if (d.ready && FilterDropped(d)) {
      expired_.push_back({.load = false,
                          .filter_dropped = true,
                          .name = d.name,
                          .id = d.id,
                          .done = d.bytes,
                          .when = now});
      dropped.push_back(std::move(it->second));
      it = dumps_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

void RedisCommands::ExpireTransfers(Clock::time_point now) {
  const auto timeout = absl::ToChronoNanoseconds(options_.transfer_idle_timeout);
  std::vector<std::shared_ptr<Dump>> dumps, dropped;
  std::vector<std::shared_ptr<Load>> loads;
  {
    MutexLock lock(&transfer_mu_);
    dropped = TakeDroppedDumps(now);
    for (auto it = dumps_.begin(); it != dumps_.end();) {
      const Dump& d = *it->second;
      // A dump whose copy is still being written, or whose chunk is being
      // read, is not idle.
      if (d.ready && d.reading == 0 && now - d.touched > timeout) {
        expired_.push_back(
            {.load = false, .name = d.name, .id = d.id, .done = d.bytes, .when = now});
        dumps.push_back(std::move(it->second));
        it = dumps_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = loads_.begin(); it != loads_.end();) {
      const Load& l = *it->second;
      if (!l.busy && now - l.touched > timeout) {
        expired_.push_back(
            {.load = true, .name = l.name, .id = l.id, .done = l.received, .when = now});
        loads.push_back(std::move(it->second));
        it = loads_.erase(it);
      } else {
        ++it;
      }
    }
    while (!expired_.empty() &&
           (expired_.size() > kMaxRedisExpiredTransfers ||
            now - expired_.front().when > absl::ToChronoNanoseconds(kRedisExpiredTransferMemory))) {
      expired_.pop_front();
    }
  }
  for (std::shared_ptr<Dump>& d : dropped) {
    spdlog::info("CF.SCANDUMP of filter {} (dump {}) ended: the filter was dropped", d->name,
                 d->id);
    Discard(std::move(d));
  }
  const std::string idle = absl::FormatDuration(options_.transfer_idle_timeout);
  for (std::shared_ptr<Dump>& d : dumps) {
    spdlog::warn(
        "CF.SCANDUMP of filter {} (dump {}) abandoned: no chunk was asked for in {} "
        "(--transfer-idle-timeout); its copy of {} is removed",
        d->name, d->id, idle, FormatByteSize(d->bytes));
    Discard(std::move(d));
  }
  for (std::shared_ptr<Load>& l : loads) {
    spdlog::warn(
        "CF.LOADCHUNK of filter {} (dump {}) abandoned: no chunk arrived for {} "
        "(--transfer-idle-timeout); the {} of {} received are removed",
        l->name, l->id, idle, FormatByteSize(l->received), FormatByteSize(l->bytes));
    Discard(std::move(l));
  }
}

std::string RedisCommands::NoDump(std::string_view key, int64_t iterator, uint64_t id) {
  const std::string idle = absl::FormatDuration(options_.transfer_idle_timeout);
  for (auto it = expired_.rbegin(); it != expired_.rend(); ++it) {
    if (!it->load && it->id == id && it->name == key && it->filter_dropped) {
      return absl::StrFormat(
          "ERR not found: filter '%s' was dropped or renamed during its CF.SCANDUMP (iterator "
          "%d), so the dump's copy was removed",
          Shown(key), iterator);
    }
    if (!it->load && it->id == id && it->name == key) {
      return absl::StrFormat(
          "ERR the CF.SCANDUMP of '%s' with iterator %d was abandoned: no chunk was asked for in "
          "%s (--transfer-idle-timeout), so its copy was removed; start again with iterator 0",
          Shown(key), iterator, idle);
    }
  }
  return absl::StrFormat(
      "ERR no CF.SCANDUMP of '%s' is in progress on this connection with iterator %d (finished, "
      "idle for more than %s, ended with the connection that started it, or not from this "
      "server; a dump's iterators are valid only on its own connection): start again with "
      "iterator 0",
      Shown(key), iterator, idle);
}

std::string RedisCommands::NoLoad(std::string_view key, uint64_t id) {
  for (auto it = expired_.rbegin(); it != expired_.rend(); ++it) {
    if (it->load && it->id == id && it->name == key) {
      return absl::StrFormat(
          "ERR the CF.LOADCHUNK of '%s' (dump %u) was abandoned: no chunk arrived for %s "
          "(--transfer-idle-timeout), so the %s received were removed; load the dump again from "
          "its first chunk",
          Shown(key), id, absl::FormatDuration(options_.transfer_idle_timeout),
          FormatByteSize(it->done));
    }
  }
  return absl::StrFormat(
      "ERR no CF.LOADCHUNK of '%s' is in progress on this connection (a load ends with the "
      "connection that sent its first chunk): load the dump's first chunk first",
      Shown(key));
}

void RedisCommands::ScanDump(Session* s, absl::Span<const Command> run, size_t,
                             resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  const std::string_view key = c.args[1];
  const int protocol = s->protocol;
  DumpReply reply = [this, start, protocol](resp::Completion& d, std::string_view error,
                                            uint64_t iterator, std::string_view data) {
    std::string out;
    Writer w(&out, protocol);
    if (!error.empty()) {
      w.Error(error);
    } else {
      // RedisBloom's shapes: [iterator, chunk], and [0, nil] for the end
      // (or an empty filter).
      w.Array(2);
      w.Integer(static_cast<int64_t>(iterator));
      if (iterator == 0) {
        w.Null();
      } else {
        w.Bulk(data);
      }
    }
    Record(kCfScanDump, out, start, 0);
    d.Reply(std::move(out));
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return reply(done, NameError(key, v), 0, "");
  }
  int64_t it;
  if (!ParseInt(c.args[2], &it) || it < 0) {
    return reply(done, "Invalid position: the iterator is a non-negative integer, 0 to start", 0,
                 "");
  }
  {
    std::string e;
    Writer ew(&e, protocol);
    Caller caller;
    if (!Authorize(s, ew, kCfScanDump, Access::kAdmin, key, &caller)) {
      Record(kCfScanDump, e, start, 0);
      return done.Reply(std::move(e));
    }
  }
  if (it != 0) return ReadDumpChunk(s->id, key, it, std::move(done), std::move(reply));
  // As RedisBloom: a missing filter is "ERR not found", and an empty one's
  // dump is [0, nil] at once (nothing to load).
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->GetLive(A(key));
  if (!filter.ok()) return reply(done, "ERR not found", 0, "");
  if ((*filter)->items() == 0) return reply(done, "", 0, "");
  StartDump(s->id, key, *std::move(filter), s->token, std::move(done), std::move(reply));
}

void RedisCommands::ReadDumpChunk(uint64_t owner, std::string_view key, int64_t it,
                                  resp::Completion done, DumpReply reply) {
  const uint64_t id = static_cast<uint64_t>(it) >> 32;
  const uint64_t chunk = static_cast<uint64_t>(it) & 0xffffffffu;
  std::shared_ptr<Dump> dump;
  std::string error;
  bool finished = false;
  uint64_t offset = 0;
  {
    MutexLock lock(&transfer_mu_);
    auto found = dumps_.find(id);
    if (found == dumps_.end() || !found->second->ready || found->second->name != key ||
        chunk == 0) {
      error = NoDump(key, it, id);
    } else if (found->second->owner != owner) {
      error = absl::StrFormat(
          "ERR iterator %d is of a CF.SCANDUMP of '%s' started on another connection: a dump "
          "belongs to the connection that started it, so run the whole CF.SCANDUMP loop on one "
          "connection (with a connection pool, hold one connection for it)",
          it, Shown(key));
    } else if (FilterDropped(*found->second)) {
      expired_.push_back({.load = false,
                          .filter_dropped = true,
                          .name = found->second->name,
                          .id = id,
                          .done = found->second->bytes,
                          .when = Clock::now()});
      error = NoDump(key, it, id);
      dump = std::move(found->second);
      dumps_.erase(found);
    } else {
      dump = found->second;
      dump->touched = Clock::now();
      offset = (chunk - 1) * kRedisDumpChunkBytes;
      if (offset >= dump->bytes) {
        dumps_.erase(found);
        finished = true;
      } else {
        ++dump->reading;
      }
    }
  }
  if (!error.empty()) {
    if (dump != nullptr) Discard(std::move(dump));
    return reply(done, error, 0, "");
  }
  if (finished) {
    Discard(std::move(dump));
    return reply(done, "", 0, "");
  }
  // Read on a transfer thread: the file may be out of the page cache, and
  // the disk slow.
  boost::asio::post(transfer_threads_, [this, dump = std::move(dump), offset, chunk, id, reply,
                                        done = std::move(done)]() mutable {
    std::string data(std::min<uint64_t>(kRedisDumpChunkBytes, dump->bytes - offset), '\0');
    size_t got = 0;
    int err = 0;
    while (got < data.size()) {
      const ssize_t n =
          ::pread(dump->fd, data.data() + got, data.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        err = n < 0 ? errno : 0;
        break;
      }
      got += static_cast<size_t>(n);
    }
    {
      MutexLock lock(&transfer_mu_);
      --dump->reading;
      dump->touched = Clock::now();
    }
    const std::string path = dump->path;
    dump.reset();  // (Here, not on the connection's thread, if it is the last.)
    if (got != data.size()) {
      return reply(done,
                   absl::StrFormat("ERR cannot read the dump file %s: %s", path,
                                   err != 0 ? Errno(err) : std::string("short read")),
                   0, "");
    }
    reply(done, "", Iterator(id, chunk + 1), data);
  });
}

void RedisCommands::StartDump(uint64_t owner, std::string_view key,
                              std::shared_ptr<const CuckooFilter> filter, const std::string& token,
                              resp::Completion done, DumpReply reply) {
  // Iterator 0: export the filter, whole, to a private file.
  auto dump = std::make_shared<Dump>();
  dump->id = next_dump_.fetch_add(1, std::memory_order_relaxed) & 0x7fffffffu;
  dump->owner = owner;
  dump->name = std::string(key);
  dump->filter = filter;
  filter.reset();
  const fs::path dir = fs::path(options_.data_dir) / kRedisDumpDir;
  dump->path = (dir / absl::StrCat("dump-", dump->id)).string();
  dump->touched = Clock::now();
  std::vector<std::shared_ptr<Dump>> ended;
  std::string error;
  {
    MutexLock lock(&transfer_mu_);
    ended = TakeDroppedDumps(dump->touched);
    // Iterator 0 again on this connection restarts its dump of `key`.
    size_t mine = 0;
    for (auto it = dumps_.begin(); it != dumps_.end();) {
      if (it->second->owner == owner && it->second->ready && it->second->name == key) {
        ended.push_back(std::move(it->second));
        it = dumps_.erase(it);
      } else {
        mine += it->second->owner == owner;
        ++it;
      }
    }
    if (mine >= kMaxRedisDumpsPerConnection) {
      error = absl::StrFormat(
          "ERR this connection has %u CF.SCANDUMPs in progress already (the most per "
          "connection): read one to its end (iterator 0 back), or close the connection",
          mine);
    } else if (dumps_.size() >= kMaxRedisDumps) {
      error = absl::StrFormat(
          "ERR %u CF.SCANDUMPs are in progress already on all connections (the most at once); "
          "retry once one ends (read to its end, its connection closed, or %s idle)",
          dumps_.size(), absl::FormatDuration(options_.transfer_idle_timeout));
    } else {
      dumps_[dump->id] = dump;
    }
  }
  for (std::shared_ptr<Dump>& d : ended) Discard(std::move(d));
  if (!error.empty()) return reply(done, error, 0, "");
  boost::asio::post(transfer_threads_, [this, dump, dir = dir.string(), token, reply,
                                        done = std::move(done)]() mutable {
    if (const std::string error = ExportDump(dump, dir, token); !error.empty()) {
      {
        MutexLock lock(&transfer_mu_);
        dumps_.erase(dump->id);
      }
      if (dump->fd >= 0) ::close(std::exchange(dump->fd, -1));
      dump->claim.Reset();
      return reply(done, error, 0, "");
    }
    char header[kRedisDumpHeaderBytes];
    std::memcpy(header, kRedisDumpMagic, 8);
    Put64(header + 8, dump->bytes);
    Put64(header + 16, dump->items);
    bool gone;
    {
      MutexLock lock(&transfer_mu_);
      dump->ready = true;
      dump->touched = Clock::now();
      gone = dump->owner_gone;
      if (gone) dumps_.erase(dump->id);
    }
    const uint64_t id = dump->id;
    if (gone) {
      // Its connection ended meanwhile: nobody will read it (the reply is
      // dropped).
      if (dump->fd >= 0) ::close(std::exchange(dump->fd, -1));
      dump->claim.Reset();
      return reply(done, "ERR the connection that started this CF.SCANDUMP ended", 0, "");
    }
    dump.reset();  // (Here, if the dump was dropped meanwhile.)
    reply(done, "", Iterator(id, 1), std::string_view(header, sizeof(header)));
  });
}

std::string RedisCommands::ExportDump(const std::shared_ptr<Dump>& dump, const std::string& dir,
                                      const std::string& token) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::StrFormat("ERR cannot create %s: %s", dir, ec.message());
  }
  // Read and written here; then read by the chunks' reads.
  dump->fd = OpenUnlinked(dump->path);
  if (dump->fd < 0) {
    return absl::StrFormat("ERR cannot create %s: %s", dump->path, Errno(errno));
  }
  grpc::ClientContext ctx;
  if (auth_ != nullptr) ctx.AddMetadata("authorization", "Bearer " + token);
  v1::ExportFilterRequest req;
  req.set_name(dump->name);
  std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader =
      stub_->ExportFilter(&ctx, req);
  v1::ExportFilterChunk chunk;
  uint64_t written = 0;
  std::string write_error;
  while (reader->Read(&chunk)) {
    if (chunk.total_bytes() != 0) {
      dump->bytes = chunk.total_bytes();
      dump->items = chunk.items();
      // The copy's disk space, before any of it is written.
      if (options_.disk != nullptr) {
        absl::StatusOr<TransferDisk::Claim> claim = options_.disk->Take(
            dump->bytes, absl::StrFormat("the CF.SCANDUMP of '%s'", Shown(dump->name)));
        if (claim.ok()) {
          dump->claim = *std::move(claim);
        } else {
          write_error = absl::StrCat("ERR ", claim.status().message());
        }
      }
    }
    const std::string& data = chunk.data();
    size_t off = 0;
    while (write_error.empty() && off < data.size()) {
      const ssize_t n = ::write(dump->fd, data.data() + off, data.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        write_error = absl::StrFormat("ERR cannot write %s: %s", dump->path, Errno(errno));
      } else {
        off += static_cast<size_t>(n);
      }
    }
    written += data.size();
    dump->claim.Wrote(data.size());
    if (!write_error.empty()) {
      ctx.TryCancel();
      break;
    }
  }
  const grpc::Status st = reader->Finish();
  if (!write_error.empty()) return write_error;
  if (!st.ok()) {
    return st.error_code() == grpc::StatusCode::NOT_FOUND ? std::string("ERR not found")
                                                          : StatusError(st);
  }
  if (written != dump->bytes || written == 0) {
    return absl::StrFormat("ERR the export sent %u bytes of %u", written, dump->bytes);
  }
  return "";
}

void RedisCommands::LoadChunk(Session* s, absl::Span<const Command> run, size_t,
                              resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  const std::string_view key = c.args[1];
  // A view into the connection's input, valid until the reply.
  const std::string_view data = c.args[3];
  const int protocol = s->protocol;
  LoadReply reply = [this, start, protocol](resp::Completion& d, std::string_view error) {
    std::string out;
    Writer w(&out, protocol);
    if (error.empty()) {
      w.SimpleString("OK");
    } else {
      w.Error(error);
    }
    Record(kCfLoadChunk, out, start, 0);
    d.Reply(std::move(out));
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return reply(done, NameError(key, v));
  }
  int64_t it;
  if (!ParseInt(c.args[2], &it) || it <= 0 || (it & 0xffffffff) == 0) {
    return reply(done, "Invalid position: use the iterator CF.SCANDUMP returned with this chunk");
  }
  {
    std::string e;
    Writer ew(&e, protocol);
    Caller caller;
    if (!Authorize(s, ew, kCfLoadChunk, Access::kAdmin, key, &caller)) {
      Record(kCfLoadChunk, e, start, 0);
      return done.Reply(std::move(e));
    }
  }
  const uint64_t id = static_cast<uint64_t>(it) >> 32;
  const uint64_t chunk = static_cast<uint64_t>(it) & 0xffffffffu;
  if (chunk == 1) return LoadHeader(s->id, key, id, data, std::move(done), std::move(reply));
  LoadNextChunk(s->id, key, id, chunk, data, s->token, std::move(done), std::move(reply));
}

void RedisCommands::LoadHeader(uint64_t owner, std::string_view key, uint64_t id,
                               std::string_view data, resp::Completion done, LoadReply reply) {
  const std::string name(key);
  // The header: starts (or restarts) the load of `key`.
  if (data.size() != kRedisDumpHeaderBytes || std::memcmp(data.data(), kRedisDumpMagic, 8) != 0) {
    return reply(done,
                 "Invalid header: this is not the first chunk of a cuckood CF.SCANDUMP (chunks "
                 "of RedisBloom's own dumps cannot be loaded: see docs/REDIS_COMPATIBILITY.md)");
  }
  if (registry_->GetLive(A(key)).ok()) {
    return reply(done, absl::StrFormat("ERR item exists: filter '%s' exists; DEL it first, or "
                                       "load the dump under another name",
                                       Shown(key)));
  }
  const uint64_t bytes = Get64(data.data() + 8);
  // What ImportFilter would refuse is refused now, before any upload.
  const uint64_t budget = registry_->limits().memory_budget_bytes;
  if (bytes == 0) {
    return reply(done, "ERR the dump's header declares an empty snapshot (0 bytes)");
  }
  if (bytes > budget + kImportSlackBytes) {
    return reply(done,
                 absl::StrFormat("ERR the dump's header declares a snapshot of %u bytes (%s), "
                                 "more than this server imports: its memory budget of %s plus "
                                 "%s (no filter it can hold has a snapshot that large)",
                                 bytes, FormatByteSize(bytes), FormatByteSize(budget),
                                 FormatByteSize(kImportSlackBytes)));
  }
  auto load = std::make_shared<Load>();
  load->id = id;
  load->owner = owner;
  load->name = name;
  load->bytes = bytes;
  load->busy = true;  // Until its file is created.
  load->touched = Clock::now();
  // Its own sequence number: a file of an earlier load of the same dump
  // may still be being removed. Not the name: a name is any key ("../x")
  // and never part of a path.
  load->path = (fs::path(options_.data_dir) / kRedisDumpDir /
                absl::StrCat("load-", next_load_.fetch_add(1, std::memory_order_relaxed)))
                   .string();
  std::shared_ptr<Load> old;
  std::string error;
  {
    MutexLock lock(&transfer_mu_);
    auto found = loads_.find(name);
    if (found != loads_.end() && found->second->owner != owner) {
      error = absl::StrFormat(
          "ERR a CF.LOADCHUNK of '%s' is in progress on another connection: a load belongs to "
          "the connection that sent its first chunk; wait for it to end, or load under another "
          "name",
          Shown(key));
    } else if (found != loads_.end() && found->second->busy) {
      error = absl::StrFormat(
          "ERR the load of '%s' is busy with a chunk or its import: restart it once that is "
          "answered",
          Shown(key));
    } else {
      if (found != loads_.end()) {
        old = std::move(found->second);
        loads_.erase(found);
      }
      size_t mine = 0;
      for (const auto& [n, l] : loads_) mine += l->owner == owner;
      if (mine >= kMaxRedisLoadsPerConnection) {
        error = absl::StrFormat(
            "ERR this connection has %u CF.LOADCHUNK load in progress already (the most per "
            "connection): send it to its last chunk, or close the connection",
            mine);
      } else if (loads_.size() >= kMaxRedisLoads) {
        error = absl::StrFormat(
            "ERR %u CF.LOADCHUNK loads are in progress already on all connections (the most at "
            "once); retry once one ends (loaded, its connection closed, or %s idle)",
            loads_.size(), absl::FormatDuration(options_.transfer_idle_timeout));
      } else {
        loads_[name] = load;
      }
    }
  }
  if (old != nullptr) Discard(std::move(old));
  if (!error.empty()) return reply(done, error);
  boost::asio::post(transfer_threads_, [this, load, reply, done = std::move(done)]() mutable {
    reply(done, StartLoad(load));
  });
}

void RedisCommands::LoadNextChunk(uint64_t owner, std::string_view key, uint64_t id, uint64_t chunk,
                                  std::string_view data, const std::string& token,
                                  resp::Completion done, LoadReply reply) {
  const std::string name(key);
  std::shared_ptr<Load> load, dropped;
  std::string error;
  {
    MutexLock lock(&transfer_mu_);
    auto found = loads_.find(name);
    if (found == loads_.end()) {
      error = NoLoad(key, id);
    } else if (found->second->owner != owner) {
      error = absl::StrFormat(
          "ERR the CF.LOADCHUNK of '%s' was started on another connection: a load belongs to "
          "the connection that sent its first chunk, so send all its chunks on that one",
          Shown(key));
    } else if (found->second->busy) {
      error = absl::StrFormat(
          "ERR chunk %u of dump %u arrived while the load of '%s' is still busy with its "
          "previous chunk (or its import): send a load's chunks one at a time, each once the one "
          "before is answered",
          chunk, id, Shown(key));
    } else if (found->second->id != id || chunk != found->second->next_chunk) {
      error = absl::StrFormat(
          "ERR chunk %u of dump %u arrived, but chunk %u of dump %u was expected next: load the "
          "chunks in the order CF.SCANDUMP returned them",
          chunk, id, found->second->next_chunk, found->second->id);
    } else if (found->second->received + data.size() > found->second->bytes) {
      error = absl::StrFormat(
          "ERR the chunks hold more than the %u bytes the dump's header announced; the load is "
          "abandoned",
          found->second->bytes);
      dropped = std::move(found->second);
      loads_.erase(found);
    } else {
      load = found->second;
      load->busy = true;
      load->touched = Clock::now();
    }
  }
  if (dropped != nullptr) Discard(std::move(dropped));
  if (!error.empty()) return reply(done, error);
  boost::asio::post(transfer_threads_,
                    [this, load, data, token, reply, done = std::move(done)]() mutable {
                      reply(done, WriteChunk(load, data, token));
                    });
}

std::string RedisCommands::StartLoad(const std::shared_ptr<Load>& load) {
  if (options_.disk != nullptr) {
    absl::StatusOr<TransferDisk::Claim> claim = options_.disk->Take(
        load->bytes, absl::StrFormat("the CF.LOADCHUNK of '%s'", Shown(load->name)));
    if (!claim.ok()) {
      EndLoad(load);
      return absl::StrCat("ERR ", claim.status().message());
    }
    load->claim = *std::move(claim);
  }
  const fs::path dir = fs::path(load->path).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    EndLoad(load);
    return absl::StrFormat("ERR cannot create %s: %s", dir.string(), ec.message());
  }
  load->fd = OpenUnlinked(load->path);
  if (load->fd < 0) {
    const std::string error = absl::StrFormat("ERR cannot create %s: %s", load->path, Errno(errno));
    EndLoad(load);
    return error;
  }
  if (!StepDone(*load)) {
    EndLoad(load);
    return "ERR the connection that started this CF.LOADCHUNK ended";
  }
  return "";
}

std::string RedisCommands::WriteChunk(const std::shared_ptr<Load>& load, std::string_view data,
                                      const std::string& token) {
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::write(load->fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string error = absl::StrFormat("ERR cannot write %s: %s; the load is abandoned",
                                                load->path, Errno(errno));
      EndLoad(load);
      return error;
    }
    off += static_cast<size_t>(n);
  }
  load->claim.Wrote(data.size());
  std::string error;
  {
    MutexLock lock(&transfer_mu_);
    load->received += data.size();
    ++load->next_chunk;
    load->touched = Clock::now();
    if (load->received < load->bytes && !load->owner_gone) {
      load->busy = false;
      return "";
    }
    if (load->owner_gone) error = "ERR the connection that started this CF.LOADCHUNK ended";
  }
  if (!error.empty()) {
    EndLoad(load);
    return error;
  }
  // The last chunk: import the file, then answer.
  return ImportLoad(load, token);
}

std::string RedisCommands::ImportLoad(const std::shared_ptr<Load>& load, const std::string& token) {
  std::string error;
  // The file has no name any more: read back through its descriptor.
  const int fd = load->fd;
  {
    grpc::ClientContext ctx;
    if (auth_ != nullptr) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ImportFilterResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::ImportFilterChunk>> writer =
        stub_->ImportFilter(&ctx, &resp);
    v1::ImportFilterChunk chunk;
    chunk.set_name(load->name);
    chunk.set_total_bytes(load->bytes);
    std::string buffer(kRedisDumpChunkBytes, '\0');
    uint64_t sent = 0;
    while (sent < load->bytes) {
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(sent));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = absl::StrFormat("ERR cannot read %s: %s", load->path,
                                n < 0 ? Errno(errno) : std::string("short file"));
        ctx.TryCancel();
        break;
      }
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      sent += static_cast<uint64_t>(n);
      if (!writer->Write(chunk)) break;
      chunk.clear_name();
      chunk.clear_total_bytes();
    }
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    if (error.empty() && !st.ok()) {
      error = st.error_code() == grpc::StatusCode::ALREADY_EXISTS
                  ? absl::StrFormat(
                        "ERR item exists: filter '%s' exists; DEL it first, or load the dump "
                        "under another name",
                        Shown(load->name))
                  : StatusError(st);
    }
  }
  EndLoad(load);
  return error;
}

}  // namespace cuckoo::server
