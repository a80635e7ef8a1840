// An in-process cuckood on an ephemeral port, for the service tests.
#ifndef CUCKOO_TESTS_UTIL_TEST_SERVER_H_
#define CUCKOO_TESTS_UTIL_TEST_SERVER_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"
#include "server/config/config.h"
#include "server/server.h"
#include "tests/util/forwarding_wal_env.h"
#include "tests/util/temp_dir.h"

namespace cuckoo::testing {

// Small limits so tests can reach them.
inline server::ServerConfig TestConfig(const std::string& data_dir) {
  server::ServerConfig c;
  c.listen = "127.0.0.1:0";
  c.admin_listen = "127.0.0.1:0";
  c.data_dir = data_dir;
  c.max_batch_keys = 1000;
  c.max_key_bytes = 64;
  c.max_filters = 4;
  c.memory_budget_bytes = 64 << 20;
  c.max_message_bytes = 1 << 20;
  c.drain_timeout = absl::Seconds(5);
  c.snapshot_interval = absl::ZeroDuration();  // Tests that want it set it.
  return c;
}

// The real file system on a volume that says it has `free_bytes` free (and
// twice that in all), whatever is written: for the transfers' disk checks
// (server/service/transfers.h). Hand it to a server as PersistenceOptions::wal.env.
class SmallDiskEnv : public server::testing::ForwardingWalEnv {
 public:
  explicit SmallDiskEnv(uint64_t free_bytes) : free_(free_bytes) {}
  absl::StatusOr<VolumeSpace> DiskSpace(const std::string&) override {
    return VolumeSpace{.total_bytes = 2 * free_, .free_bytes = free_};
  }

 private:
  const uint64_t free_;
};

// Stops `*server` when it goes, however the test ends: declared after a
// Env the server uses (a SmallDiskEnv), it keeps the env alive as long
// as the server.
class StopServerFirst {
 public:
  explicit StopServerFirst(std::unique_ptr<server::CuckooServer>* server) : server_(server) {}
  ~StopServerFirst() { server_->reset(); }
  StopServerFirst(const StopServerFirst&) = delete;
  StopServerFirst& operator=(const StopServerFirst&) = delete;

 private:
  std::unique_ptr<server::CuckooServer>* const server_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(TestConfig(dir_.path())); }

  // Replaces the running server, if any (stopping it first: it holds the
  // data directory's lock).
  void StartServer(const server::ServerConfig& config,
                   const server::PersistenceOptions& hooks = {}) {
    server_.reset();
    absl::StatusOr<std::unique_ptr<server::CuckooServer>> s =
        server::CuckooServer::Start(config, hooks);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
    stub_ = v1::FilterService::NewStub(channel_);
  }

  TempDir dir_;
  std::unique_ptr<server::CuckooServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::FilterService::Stub> stub_;
};

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_TEST_SERVER_H_
