// cuckood: the server process. Reads the configuration (flags, then CUCKOOD_*
// environment variables, then built-in defaults), starts the gRPC server (and
// the admin HTTP server) and waits for signals, which Boost.Asio delivers:
//
//   SIGTERM, SIGINT  shut down: health turns NOT_SERVING (/healthz and
//                    /readyz 503), new calls are refused with UNAVAILABLE,
//                    calls in flight get --drain-timeout to finish, changed
//                    filters are snapshotted, and the process exits 0.
//   a second one     ends the drain at once; the final snapshot is still
//                    written.
//   a third one      exits at once with code 1, without the final snapshot
//                    (nothing acknowledged is lost: the write-ahead log
//                    holds it; the next start replays it).
//   SIGHUP           re-reads the access file (--auth-tokens) at once; a
//                    bad one is logged and the previous one stays. Without
//                    --auth-tokens it is logged and ignored (a terminal that
//                    goes away must not take the server with it).
//
// Exit codes: 0 after a signal-initiated shutdown, 1 if the server cannot
// start (e.g. the port is taken, a snapshot cannot be loaded), the final
// snapshot failed or a third signal cut it short, 2 for a bad configuration,
// 3 after the write-ahead log failed (an I/O error or a full disk while a
// write was being made durable; see server/wal/wal.h).
#include <malloc.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <string.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/signal_set.hpp"
#include "boost/asio/steady_timer.hpp"
#include "cuckoo_version.h"
#include "server/config/config.h"
#include "server/observability/logging.h"
#include "server/server.h"
#include "server/storage/persistence.h"
#include "server/wal/wal.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

int Main(int argc, char** argv) {
  // No OpenSSL cleanup at exit (first, before gRPC starts OpenSSL): it
  // deletes OpenSSL's thread-local keys, and a thread that ends after it
  // (gRPC's, during exit) leaks its error queue; under LeakSanitizer that
  // changes the exit code. See cuckooctl's main.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  // One malloc arena, unless MALLOC_ARENA_MAX says otherwise: with glibc's
  // default of one per thread, memory freed by one gRPC thread was not
  // reused by another, and 64 concurrent 16 MiB requests under a 64 MiB
  // transport quota peaked at 191 MiB RSS instead of 86; batched lookups
  // were 1.3-1.4x faster too (docs/BENCHMARKS.md). Small allocations still
  // come from each thread's tcache without a lock. Before any thread starts.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  // Buffers of 1 MiB and more (a Redis connection's input of a large
  // command, its unread replies, a 16 MiB message) are mapped on their own
  // and unmapped when freed, so what a burst of clients took goes back to
  // the system once they are gone. glibc's default threshold rises to the
  // largest such buffer freed, and after that they stay in the heap: 500
  // Redis connections that never read left RSS at 1.8 GB after all had
  // closed (issue 30). Setting it fixes the trim threshold too (at 128 KiB),
  // hence M_TRIM_THRESHOLD. The environment's MALLOC_*_ variables win.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 1 << 20);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 32 << 20);
  // Debian's abseil checks lock order on every absl::Mutex operation (gRPC
  // takes several per call): 5% of the server's CPU under load, for a debug
  // aid. cuckood's own locks are std::shared_mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<ServerConfig> config = ConfigFromCommandLine(argc, argv);
  if (!config.ok()) {
    absl::FPrintF(stderr, "cuckood: %s\n", config.status().message());
    return 2;
  }
  SetUpLogging(LogOptionsOf(*config));
  // A log segment size the data directory's volume cannot hold beside the
  // snapshots is a configuration error (issue 29: on a 64 MiB volume the
  // first segment filled the disk and every snapshot failed).
  if (config->nats_urls.empty()) {
    if (absl::Status s =
            CheckWalDiskSpace(PosixEnv(), config->data_dir, config->data_dir + "/" + kWalDir,
                              config->wal_segment_bytes);
        !s.ok()) {
      absl::FPrintF(stderr, "cuckood: %s\n", s.message());
      return 2;
    }
  }

  // Signals first, so a SIGTERM during start-up is not lost.
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);

  absl::StatusOr<std::unique_ptr<CuckooServer>> server = CuckooServer::Start(*config);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }
  // Said before the "serving on" line, which tools and tests wait for.
  if (const uint64_t most =
          (*server)->registry().limits().memory_budget_bytes + StatedMemoryOverhead(*config);
      most > AvailableMemoryBytes()) {
    spdlog::warn(
        "the memory budget plus the stated overhead, {}, is more than the {} this process may "
        "use (its cgroup's limit, else RAM): filled up, it may be killed for memory; lower "
        "--memory-budget, --transport-memory or --snapshot-buffer, or give it more memory",
        FormatByteSize(most), FormatByteSize(AvailableMemoryBytes()));
  }
  spdlog::info(
      "cuckood {} serving on {} (data dir {}, memory budget {}, max filters {}, max batch keys "
      "{}, max key bytes {}, max message {}, transport memory {}, snapshot buffer {}; memory "
      "at most the budget plus {})",
      kVersion, (*server)->address(), config->data_dir,
      FormatByteSize((*server)->registry().limits().memory_budget_bytes), config->max_filters,
      config->max_batch_keys, config->max_key_bytes, FormatByteSize(config->max_message_bytes),
      FormatByteSize(EffectiveTransportMemory(*config)),
      FormatByteSize(EffectiveSnapshotBuffer(*config)),
      FormatByteSize(StatedMemoryOverhead(*config)));

  // The shutdown runs on a thread of its own, so that this one stays free
  // to take the next signal.
  std::thread shutdown;
  int stop_signals = 0;
  std::function<void()> wait_for_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int signo) {
      if (ec) return;
      if (signo == SIGHUP) {
        if (config->auth_tokens.empty()) {
          spdlog::info("received SIGHUP: no --auth-tokens file to reload; ignored");
        } else {
          spdlog::info("received SIGHUP: re-reading the access file {}", config->auth_tokens);
          // Logged by the reload either way.
          (*server)->ReloadAccess().IgnoreError();
        }
      } else if (++stop_signals == 1) {
        spdlog::info(
            "received {}: shutting down, draining calls in flight for up to {} (send it again to "
            "end the drain now)",
            sigabbrev_np(signo), absl::FormatDuration(config->drain_timeout));
        shutdown = std::thread([&] { (*server)->Shutdown(config->drain_timeout); });
      } else if (stop_signals == 2) {
        spdlog::warn(
            "received {} again: ending the drain now; the final snapshot is still written (a "
            "third signal exits at once without it)",
            sigabbrev_np(signo));
        (*server)->Hurry();
      } else {
        spdlog::critical(
            "received {} a third time: exiting now without the final snapshot; the next start "
            "replays the write-ahead log (every acknowledged write is in it)",
            sigabbrev_np(signo));
        spdlog::default_logger()->flush();
        std::_Exit(1);
      }
      wait_for_signal();
    });
  };
  wait_for_signal();
  // Free memory inside the heap (not at its top, where free() gives it
  // back) is returned every 5 s when there is more than 64 MiB of it: after
  // thousands of connections' smaller buffers were freed. On this thread,
  // not an I/O thread: malloc_trim holds the arena's lock while it walks.
  boost::asio::steady_timer trim_timer(io);
  std::function<void()> trim = [&] {
    trim_timer.expires_after(std::chrono::seconds(5));
    trim_timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      if (const size_t free_bytes = mallinfo2().fordblks; free_bytes > (size_t{64} << 20)) {
        const absl::Time start = absl::Now();
        malloc_trim(0);
        spdlog::debug("malloc_trim over {} of free heap took {}", FormatByteSize(free_bytes),
                      absl::FormatDuration(absl::Now() - start));
      }
      trim();
    });
  };
  trim();
  std::thread io_thread([&io] { io.run(); });

  (*server)->Wait();
  io.stop();
  io_thread.join();
  if (shutdown.joinable()) shutdown.join();
  if (!(*server)->final_snapshot_status().ok()) {
    spdlog::critical(
        "stopped; the final snapshot failed, changes since the last good one are lost");
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace cuckoo::server

int main(int argc, char** argv) { return cuckoo::server::Main(argc, argv); }
