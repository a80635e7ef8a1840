// cuckood: the server process. Reads the configuration (flags, then CUCKOOD_*
// environment variables, then built-in defaults), starts the gRPC server (and
// the admin HTTP server) and waits for SIGINT or SIGTERM, which Boost.Asio
// delivers: health turns NOT_SERVING (/healthz and /readyz 503), new calls
// are refused with UNAVAILABLE, calls in flight get --drain-timeout to
// finish, changed filters are snapshotted, and the process exits 0.
//
// Exit codes: 0 after a signal-initiated shutdown, 1 if the server cannot
// start (e.g. the port is taken, a snapshot cannot be loaded) or the final
// snapshot failed, 2 for a bad configuration.
#include <signal.h>
#include <string.h>

#include <cstdio>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/signal_set.hpp"
#include "cuckoo_version.h"
#include "server/config.h"
#include "server/logging.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

int Main(int argc, char** argv) {
  // Debian's abseil checks lock order on every absl::Mutex operation (gRPC
  // takes several per call): 5% of the server's CPU under load, for a debug
  // aid. cuckood's own locks are std::shared_mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::StatusOr<ServerConfig> config = ConfigFromCommandLine(argc, argv);
  if (!config.ok()) {
    absl::FPrintF(stderr, "cuckood: %s\n", config.status().message());
    return 2;
  }
  SetUpLogging(*config);

  // Signals first, so a SIGTERM during start-up is not lost.
  boost::asio::io_context io;
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);

  absl::StatusOr<std::unique_ptr<CuckooServer>> server = CuckooServer::Start(*config);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return 1;
  }
  spdlog::info(
      "cuckood {} serving on {} (data dir {}, memory budget {}, max filters {}, max batch keys "
      "{}, max key bytes {}, max message {})",
      kVersion, (*server)->address(), config->data_dir,
      FormatByteSize((*server)->registry().limits().memory_budget_bytes), config->max_filters,
      config->max_batch_keys, config->max_key_bytes, FormatByteSize(config->max_message_bytes));

  signals.async_wait([&](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received {}: shutting down, draining calls in flight for up to {}",
                 sigabbrev_np(signo), absl::FormatDuration(config->drain_timeout));
    (*server)->Shutdown(config->drain_timeout);
  });
  std::thread io_thread([&io] { io.run(); });

  (*server)->Wait();
  io.stop();
  io_thread.join();
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
