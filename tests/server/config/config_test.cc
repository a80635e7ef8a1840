#include "server/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/service/listen.h"
#include "tests/util/temp_dir.h"

namespace cuckoo::server {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, EveryFlagHasAnEnvironmentVariable) {
  EXPECT_EQ(EnvironmentVariableFor("max_batch_keys"), "CUCKOOD_MAX_BATCH_KEYS");
  EXPECT_EQ(EnvironmentVariableFor("listen"), "CUCKOOD_LISTEN");
}

TEST(ConfigTest, DefaultsAreValidAndBudgetComesFromAvailableMemory) {
  ServerConfig c;
  EXPECT_TRUE(ValidateConfig(c).ok());
  EXPECT_EQ(c.listen, "0.0.0.0:50051");
  EXPECT_EQ(c.admin_listen, "0.0.0.0:9090");
  EXPECT_EQ(EffectiveMemoryBudget(c), AvailableMemoryBytes() / 4 * 3);
  c.memory_budget_bytes = 12345;
  EXPECT_EQ(EffectiveMemoryBudget(c), 12345u);
  EXPECT_GT(AvailableMemoryBytes(), 0u);
}

TEST(ConfigTest, InvalidValuesNameTheFlag) {
  struct Case {
    void (*set)(ServerConfig&);
    const char* message;
  };
  const Case cases[] = {
      {[](ServerConfig& c) { c.listen = "nonsense"; }, "--listen=\"nonsense\""},
      {[](ServerConfig& c) { c.admin_listen = "9090"; }, "--admin-listen=\"9090\""},
      {[](ServerConfig& c) { c.admin_listen = "0.0.0.0:http"; }, "--admin-listen=\"0.0.0.0:http\""},
      {[](ServerConfig& c) { c.admin_listen = "0.0.0.0:65536"; }, "--admin-listen"},
      {[](ServerConfig& c) { c.max_batch_keys = 0; }, "--max-batch-keys"},
      {[](ServerConfig& c) { c.max_key_bytes = 0; }, "--max-key-bytes"},
      {[](ServerConfig& c) { c.max_filters = 0; }, "--max-filters"},
      {[](ServerConfig& c) { c.max_message_bytes = 100; }, "--max-message-size=100B"},
      {[](ServerConfig& c) { c.log_level = "loud"; }, "--log-level=\"loud\""},
      {[](ServerConfig& c) { c.log_format = "xml"; }, "--log-format=\"xml\""},
      {[](ServerConfig& c) { c.drain_timeout = absl::Seconds(-1); }, "--drain-timeout=-1s"},
      {[](ServerConfig& c) { c.wal_sync_interval = absl::Milliseconds(1); },
       "--wal-sync-interval=1ms must be between 10ms and 1h"},
      {[](ServerConfig& c) { c.wal_segment_bytes = (uint64_t{1} << 20) + 8; },
       "--wal-segment-size=1048584B must be a multiple of 4KiB"},
      {[](ServerConfig& c) { c.wal_max_bytes = uint64_t{64} << 20; },
       "--wal-max-size=64MiB must be at least twice --wal-segment-size=64MiB"},
      {[](ServerConfig& c) { c.snapshot_interval = absl::Seconds(-1); },
       "--snapshot-interval=-1s must be 0 (off) or at least 1s"},
      {[](ServerConfig& c) { c.snapshot_interval = absl::Milliseconds(500); },
       "--snapshot-interval=500ms"},
      {[](ServerConfig& c) { c.snapshot_buffer_bytes = 100; },
       "--snapshot-buffer=100B must be 0 (automatic) or at least 4KiB"},
      {[](ServerConfig& c) { c.transport_memory_bytes = 20 << 20; },
       "--transport-memory=20MiB must be 0 (automatic) or at least twice --max-message-size "
       "(16MiB)"},
      {[](ServerConfig& c) { c.grpc_threads = 1025; },
       "--grpc-threads=1025 must be 0 (one per CPU) to 1024"},
      {[](ServerConfig& c) { c.transfer_idle_timeout = absl::Milliseconds(10); },
       "--transfer-idle-timeout=10ms must be between 100ms and 24h"},
      {[](ServerConfig& c) { c.transfer_idle_timeout = absl::Hours(25); },
       "--transfer-idle-timeout=25h must be between 100ms and 24h"},
  };
  for (const Case& k : cases) {
    ServerConfig c;
    k.set(c);
    absl::Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message));
  }
}

TEST(ConfigTest, MemoryDefaultsFollowTheAvailableMemoryAndTheOverheadIsStated) {
  ServerConfig c;
  const uint64_t available = AvailableMemoryBytes();
  EXPECT_EQ(EffectiveSnapshotBuffer(c),
            std::clamp<uint64_t>(available / 16, uint64_t{16} << 20, uint64_t{128} << 20));
  EXPECT_EQ(EffectiveTransportMemory(c),
            std::clamp<uint64_t>(available / 32, uint64_t{32} << 20, uint64_t{1} << 30));
  c.max_message_bytes = uint64_t{1} << 30;  // The quota always holds two messages.
  EXPECT_EQ(EffectiveTransportMemory(c), uint64_t{2} << 30);
  c.transport_memory_bytes = uint64_t{64} << 20;
  c.snapshot_buffer_bytes = uint64_t{16} << 20;
  EXPECT_EQ(EffectiveTransportMemory(c), uint64_t{64} << 20);
  EXPECT_GE(StatedMemoryOverhead(c),
            (uint64_t{32} << 20) + 3 * (uint64_t{64} << 20) + (uint64_t{16} << 20));
}

// The log's memory is part of the stated overhead: a start-up replay reads
// a segment whole, so a larger --wal-segment-size states more.
TEST(ConfigTest, StatedOverheadCountsTheWriteAheadLogsBuffers) {
  ServerConfig c;
  const uint64_t overhead = StatedMemoryOverhead(c);
  const uint64_t wal = WalMemoryOverhead(c);
  EXPECT_GE(wal, c.wal_segment_bytes);
  EXPECT_GE(overhead, wal + (uint64_t{32} << 20));
  c.wal_segment_bytes *= 4;
  EXPECT_EQ(WalMemoryOverhead(c) - wal, 3 * (c.wal_segment_bytes / 4));
  EXPECT_EQ(StatedMemoryOverhead(c) - overhead, WalMemoryOverhead(c) - wal);
}

// A cluster replica has no write-ahead log, and states its own buffers.
TEST(ConfigTest, StatedOverheadOfAClusterReplicaCountsItsBuffersInsteadOfTheLog) {
  ServerConfig c;
  const uint64_t single = StatedMemoryOverhead(c);
  c.nats_urls = {"nats://a:4222"};
  EXPECT_EQ(StatedMemoryOverhead(c),
            single - WalMemoryOverhead(c) - kRequestWindowBytes + ClusterMemoryOverhead(c));
  EXPECT_GE(ClusterMemoryOverhead(c), kRequestWindowBytes + (uint64_t{64} << 20));
}

// The Redis port's clients and buffers are in the stated overhead when the
// port is on (issue 30: it had no term, and 200 connections took a 1 GiB
// container down).
TEST(ConfigTest, StatedOverheadCountsTheRedisPortsClientsWhenItIsOn) {
  ServerConfig c;
  const uint64_t without = StatedMemoryOverhead(c);
  EXPECT_EQ(RedisMemoryOverhead(c), 0u);
  c.redis_listen = "127.0.0.1:6379";
  c.redis_threads = 2;
  c.redis_client_memory_bytes = uint64_t{64} << 20;
  EXPECT_EQ(RedisMemoryOverhead(c), (uint64_t{64} << 20) +
                                        2 * ((uint64_t{16} << 20) + (64 << 10) + (1 << 20)) +
                                        kRedisAuthThrottleBytes + kRedisTransferBytes);
  EXPECT_EQ(StatedMemoryOverhead(c), without + RedisMemoryOverhead(c));
  // The default: 1/16 of the available memory, 32 MiB to 1 GiB, at least
  // four of the largest commands.
  c.redis_client_memory_bytes = 0;
  EXPECT_EQ(EffectiveRedisClientMemory(c),
            std::max(std::clamp<uint64_t>(AvailableMemoryBytes() / 16, uint64_t{32} << 20,
                                          uint64_t{1} << 30),
                     4 * RedisMaxCommandBytes(c)));
  c.max_message_bytes = uint64_t{256} << 20;
  EXPECT_GE(EffectiveRedisClientMemory(c), uint64_t{1} << 30);
}

TEST(ConfigTest, RedisClientMemoryBelowTwoLargestCommandsIsRefused) {
  ServerConfig c;
  c.redis_listen = "127.0.0.1:6379";
  c.redis_client_memory_bytes = uint64_t{16} << 20;
  const absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--redis-client-memory=16MiB must be 0 (automatic) or at "
                                     "least twice the largest Redis command (32MiB"));
  c.redis_client_memory_bytes = uint64_t{32} << 20;
  EXPECT_TRUE(ValidateConfig(c).ok());
}

// On a host of many CPUs in a small container, 75% of the limit plus the
// overhead was more than the limit: the default budget leaves it room.
TEST(ConfigTest, TheDefaultBudgetLeavesRoomForTheStatedOverhead) {
  ServerConfig c;
  const uint64_t available = AvailableMemoryBytes();
  c.transport_memory_bytes = available / 8;  // Counted three times.
  EXPECT_LT(EffectiveMemoryBudget(c), available / 4 * 3);
  EXPECT_LE(EffectiveMemoryBudget(c) + StatedMemoryOverhead(c), available);
  // An overhead larger than everything still leaves a usable budget.
  c.transport_memory_bytes = available;
  EXPECT_EQ(EffectiveMemoryBudget(c), available / 8);
}

absl::StatusOr<ServerConfig> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "cuckood");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ConfigFromCommandLine(static_cast<int>(argv.size()), argv.data());
}

// absl flags are process-wide: each test sets every value it checks.
TEST(ConfigTest, FlagsTakeDashesOrUnderscoresAndUnits) {
  auto c = Parse({"--max-batch-keys=77", "--max_key_bytes=99", "--memory-budget=2GiB",
                  "--drain-timeout=3s", "--listen", "127.0.0.1:6000"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_batch_keys, 77u);
  EXPECT_EQ(c->max_key_bytes, 99u);
  EXPECT_EQ(c->memory_budget_bytes, uint64_t{2} << 30);
  EXPECT_EQ(c->drain_timeout, absl::Seconds(3));
  EXPECT_EQ(c->listen, "127.0.0.1:6000");
}

TEST(ConfigTest, DurabilityComesFromFlagOrEnvironmentAndNamesTheChoicesWhenWrong) {
  EXPECT_EQ(Parse({})->durability, Durability::kSync);
  setenv("CUCKOOD_DURABILITY", "interval", 1);
  auto c = Parse({"--wal-sync-interval=250ms"});
  unsetenv("CUCKOOD_DURABILITY");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->durability, Durability::kInterval);
  EXPECT_EQ(c->wal_sync_interval, absl::Milliseconds(250));
  auto bad = Parse({"--durability=always"});
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("--durability"));
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("\"always\""));
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("interval"));
  // Flags are process-wide: put the defaults back for the tests after this.
  ASSERT_TRUE(Parse({"--durability=sync", "--wal-sync-interval=1s"}).ok());
}

TEST(ConfigTest, EnvironmentSetsFlagsAndTheCommandLineWins) {
  setenv("CUCKOOD_MAX_FILTERS", "12", 1);
  setenv("CUCKOOD_DATA_DIR", "/tmp/from-env", 1);
  auto c = Parse({"--max-filters=13"});
  unsetenv("CUCKOOD_MAX_FILTERS");
  unsetenv("CUCKOOD_DATA_DIR");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_filters, 13u);
  EXPECT_EQ(c->data_dir, "/tmp/from-env");
}

TEST(ConfigTest, AdminListenComesFromFlagOrEnvironmentAndEmptyTurnsItOff) {
  setenv("CUCKOOD_ADMIN_LISTEN", "127.0.0.1:9999", 1);
  auto from_env = Parse({});
  auto off = Parse({"--admin-listen="});
  unsetenv("CUCKOOD_ADMIN_LISTEN");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->admin_listen, "127.0.0.1:9999");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->admin_listen, "");
  auto flag = Parse({"--admin_listen=[::1]:0"});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->admin_listen, "[::1]:0");
}

TEST(ConfigTest, TlsSettingsThatNeedEachOtherAreRejectedNamingTheFlags) {
  struct Case {
    void (*set)(ServerConfig&);
    const char* message;
  };
  const Case cases[] = {
      {[](ServerConfig& c) { c.tls_cert = "server.crt"; },
       "--tls-cert is set without --tls-key: TLS needs both"},
      {[](ServerConfig& c) { c.tls_key = "server.key"; },
       "--tls-key is set without --tls-cert: TLS needs both"},
      {[](ServerConfig& c) { c.tls_client_ca = "ca.crt"; },
       "--tls-client-ca (mutual TLS) needs TLS"},
      {[](ServerConfig& c) { c.admin_tls = true; }, "--admin-tls serves the admin port"},
      {[](ServerConfig& c) { c.peer_ca = "ca.crt"; }, "--peer-ca is used only with TLS"},
      {[](ServerConfig& c) { c.tls_reload_interval = absl::Milliseconds(500); },
       "--tls-reload-interval=500ms must be between 1s and 24h"},
      {[](ServerConfig& c) { c.auth_reload_interval = absl::Milliseconds(10); },
       "--auth-reload-interval=10ms must be between 100ms and 24h"},
      // A peer token must not go to any host with a public certificate.
      {[](ServerConfig& c) {
         c.tls_cert = "server.crt";
         c.tls_key = "server.key";
         c.peer_token_file = "peer-token";
       },
       "--peer-token-file with TLS needs --peer-ca (or --tls-client-ca)"},
  };
  for (const Case& k : cases) {
    ServerConfig c;
    k.set(c);
    absl::Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message));
  }
  // Together they are fine (the files are checked when the server starts).
  ServerConfig c;
  c.tls_cert = "server.crt";
  c.tls_key = "server.key";
  c.tls_client_ca = "ca.crt";
  c.admin_tls = true;
  c.peer_ca = "ca.crt";
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
}

TEST(ConfigTest, SecurityFlagsComeFromFlagsOrEnvironment) {
  setenv("CUCKOOD_AUTH_TOKENS", "/etc/cuckood/access", 1);
  auto c =
      Parse({"--tls-cert=/tls/tls.crt", "--tls_key=/tls/tls.key", "--tls-client-ca=/tls/ca.crt",
             "--tls-reload-interval=30s", "--auth-reload-interval=250ms"});
  unsetenv("CUCKOOD_AUTH_TOKENS");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->tls_cert, "/tls/tls.crt");
  EXPECT_EQ(c->tls_key, "/tls/tls.key");
  EXPECT_EQ(c->tls_client_ca, "/tls/ca.crt");
  EXPECT_EQ(c->tls_reload_interval, absl::Seconds(30));
  EXPECT_EQ(c->auth_tokens, "/etc/cuckood/access");
  EXPECT_EQ(c->auth_reload_interval, absl::Milliseconds(250));
  auto half = Parse({"--tls-cert=/tls/tls.crt", "--tls-key=", "--tls-client-ca=",
                     "--tls-reload-interval=10s", "--auth-reload-interval=5s"});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(half.status().message()),
              HasSubstr("--tls-cert is set without --tls-key"));
  // absl's flags keep their values: back to the defaults for later tests.
  ASSERT_TRUE(
      Parse({"--tls-cert=", "--tls-key=", "--auth-tokens=", "--auth-reload-interval=5s"}).ok());
}

// Issue 29: CUCKOOD_MEMORY_BUDGT=1GiB was ignored, and the server ran on
// its default budget.
TEST(ConfigTest, UnknownCuckoodEnvironmentVariableIsRefusedNamingTheClosestFlag) {
  setenv("CUCKOOD_MEMORY_BUDGT", "1GiB", 1);
  absl::Status s = Parse({}).status();
  unsetenv("CUCKOOD_MEMORY_BUDGT");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUCKOOD_MEMORY_BUDGT"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--memory-budget"));
  // A {SVCNAME}_PORT without Kubernetes' tcp:// value is a typo too.
  setenv("CUCKOOD_REDIS_PORT", "6379", 1);
  s = Parse({}).status();
  unsetenv("CUCKOOD_REDIS_PORT");
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUCKOOD_REDIS_PORT"));
}

// Kubernetes sets these for Services named cuckood, cuckood-headless,
// cuckood-ready (deploy/k8s) in every pod without enableServiceLinks: false.
TEST(ConfigTest, KubernetesServiceLinkVariablesAreIgnored) {
  const std::vector<std::pair<std::string, std::string>> links = {
      {"CUCKOOD_SERVICE_HOST", "10.0.0.1"},
      {"CUCKOOD_SERVICE_PORT", "50051"},
      {"CUCKOOD_SERVICE_PORT_GRPC", "50051"},
      {"CUCKOOD_SERVICE_PORT_REDIS_PORT", "6379"},
      {"CUCKOOD_PORT", "tcp://10.0.0.1:50051"},
      {"CUCKOOD_PORT_50051_TCP", "tcp://10.0.0.1:50051"},
      {"CUCKOOD_PORT_50051_TCP_PROTO", "tcp"},
      {"CUCKOOD_PORT_50051_TCP_PORT", "50051"},
      {"CUCKOOD_PORT_50051_TCP_ADDR", "10.0.0.1"},
      {"CUCKOOD_HEADLESS_SERVICE_HOST", "None"},
      {"CUCKOOD_HEADLESS_PORT", "tcp://10.0.0.2:9090"},
      {"CUCKOOD_READY_PORT_9090_TCP_ADDR", "10.0.0.3"},
      {"CUCKOOD_READY_SERVICE_PORT_ADMIN", "9090"},
  };
  for (const auto& [name, value] : links) setenv(name.c_str(), value.c_str(), 1);
  auto c = Parse({});
  for (const auto& [name, value] : links) unsetenv(name.c_str());
  EXPECT_TRUE(c.ok()) << c.status();
}

// Issue 29: --memory-budget=1024 was 1 KiB.
TEST(ConfigTest, ByteSizeWithoutUnitIsRefusedNamingTheFlagAndTheUnits) {
  absl::Status s = Parse({"--memory-budget=1024"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("--memory-budget=\"1024\""));
  EXPECT_THAT(std::string(s.message()), HasSubstr("GiB"));
  setenv("CUCKOOD_WAL_MAX_SIZE", "1000000", 1);
  s = Parse({}).status();
  unsetenv("CUCKOOD_WAL_MAX_SIZE");
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUCKOOD_WAL_MAX_SIZE=\"1000000\""));
  EXPECT_THAT(std::string(s.message()), HasSubstr("needs a unit"));
  // A bare 0 ("the default" for these) and sizes with units are fine.
  auto c = Parse({"--memory-budget=0", "--transport-memory=0", "--wal-max-size=200000000B"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_budget_bytes, 0u);
  EXPECT_EQ(c->wal_max_bytes, 200'000'000u);
  ASSERT_TRUE(Parse({"--wal-max-size=1GiB"}).ok());
}

TEST(ConfigTest, BadBoolIsRefusedAndBoolsTakeEverySpelling) {
  EXPECT_THAT(std::string(Parse({"--admin-tls=ture"}).status().message()),
              HasSubstr("--admin-tls=\"ture\""));
  EXPECT_FALSE(Parse({"-reflection=false"})->reflection);
  EXPECT_TRUE(Parse({"--reflection"})->reflection);
  EXPECT_FALSE(Parse({"--noreflection"})->reflection);
  EXPECT_TRUE(Parse({"--reflection=true"})->reflection);
}

TEST(ConfigTest, FlagfileIsReadAndABadOneIsRefused) {
  cuckoo::testing::TempDir dir;
  const std::string file = dir.path() + "/flags";
  std::ofstream(file) << "# settings\n\n--max-filters=21\n--tls-reload-interval=7s\n";
  auto c = Parse({"--flagfile=" + file});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_filters, 21u);
  EXPECT_EQ(c->tls_reload_interval, absl::Seconds(7));
  EXPECT_THAT(std::string(Parse({"--flagfile=" + dir.path() + "/none"}).status().message()),
              HasSubstr("cannot read it"));
  std::ofstream(file) << "max-filters=3\n";
  EXPECT_THAT(std::string(Parse({"--flagfile", file}).status().message()),
              HasSubstr("is not a flag"));
  ASSERT_TRUE(Parse({"--max-filters=1024", "--tls-reload-interval=10s"}).ok());
}

TEST(ConfigTest, HelpSpellsFlagsWithDashesWithTheirVariablesAndNoBuildPaths) {
  const std::string help = HelpText();
  EXPECT_THAT(help, HasSubstr("--tls-key"));
  EXPECT_THAT(help, HasSubstr("CUCKOOD_TLS_KEY"));
  EXPECT_THAT(help, HasSubstr("--redis-default-expansion"));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("--tls_key")));
  EXPECT_THAT(help, ::testing::Not(HasSubstr("config.cc")));
}

TEST(ConfigTest, BadFlagsAndEnvironmentAreInvalidArgumentNamingThem) {
  EXPECT_THAT(std::string(Parse({"--no-such-flag=1"}).status().message()),
              HasSubstr("unknown flag --no-such-flag"));
  EXPECT_THAT(std::string(Parse({"--max-filters=many"}).status().message()),
              HasSubstr("--max-filters=\"many\""));
  EXPECT_THAT(std::string(Parse({"--max-filters"}).status().message()),
              HasSubstr("--max-filters needs a value"));
  EXPECT_THAT(std::string(Parse({"stray"}).status().message()),
              HasSubstr("unexpected argument \"stray\""));
  EXPECT_THAT(std::string(Parse({"--max-filters=0"}).status().message()),
              HasSubstr("--max-filters must be at least 1"));
  setenv("CUCKOOD_MEMORY_BUDGET", "lots", 1);
  absl::Status s = Parse({}).status();
  unsetenv("CUCKOOD_MEMORY_BUDGET");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUCKOOD_MEMORY_BUDGET=\"lots\""));
}

}  // namespace
}  // namespace cuckoo::server

namespace cuckoo::server {
namespace {

TEST(ConfigTest, NatsUrlsMakeClusterModeAndBadOnesNameTheValue) {
  // absl's flags keep their last values: every parse sets all it relies on.
  auto with = [](std::vector<std::string> args) {
    std::vector<std::string> all = {"--max-filters=4",
                                    "--nats=",
                                    "--nats-replicas=0",
                                    "--dedup-window=2m",
                                    "--max-read-wait=5s",
                                    "--ready-max-lag=1000",
                                    "--advertise=",
                                    "--replica-expiry=24h",
                                    "--transfer-idle-timeout=60s"};
    all.insert(all.end(), args.begin(), args.end());
    return Parse(all);
  };
  EXPECT_TRUE(with({})->nats_urls.empty());
  auto c = with({"--nats=nats://a:4222, nats://b:4222", "--nats-stream=S1", "--replica-id=r7",
                 "--dedup-window=5m", "--max-read-wait=2s", "--ready-max-lag=10",
                 "--transfer-idle-timeout=90s"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nats_urls, (std::vector<std::string>{"nats://a:4222", "nats://b:4222"}));
  EXPECT_EQ(c->nats_stream, "S1");
  EXPECT_EQ(c->replica_id, "r7");
  EXPECT_EQ(c->dedup_window, absl::Minutes(5));
  EXPECT_EQ(c->max_read_wait, absl::Seconds(2));
  EXPECT_EQ(c->ready_max_lag, 10u);
  EXPECT_EQ(c->transfer_idle_timeout, absl::Seconds(90));
  EXPECT_EQ(with({})->transfer_idle_timeout, absl::Seconds(60));
  auto bad = with({"--nats=localhost:4222"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("\"localhost:4222\" is not a NATS URL"));
  auto replicas = with({"--nats=nats://a:1", "--nats-replicas=7"});
  EXPECT_THAT(std::string(replicas.status().message()), HasSubstr("--nats-replicas=7"));
  auto window = with({"--dedup-window=0s"});
  EXPECT_THAT(std::string(window.status().message()), HasSubstr("--dedup-window=0 must be"));
  auto peers = with({"--advertise=cuckood-1.cuckood-headless:50051", "--replica-expiry=90m"});
  ASSERT_TRUE(peers.ok()) << peers.status();
  EXPECT_EQ(peers->advertise, "cuckood-1.cuckood-headless:50051");
  EXPECT_EQ(peers->replica_expiry, absl::Minutes(90));
  for (const char* bad_address : {"--advertise=cuckood-1", "--advertise=:50051",
                                  "--advertise=host:0", "--advertise=host:99999"}) {
    auto a = with({bad_address});
    ASSERT_FALSE(a.ok()) << bad_address;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("expected host:port")) << bad_address;
  }
  auto expiry = with({"--replica-expiry=1s"});
  EXPECT_THAT(std::string(expiry.status().message()),
              HasSubstr("--replica-expiry=1s must be between 2s and 720h"));
}

TEST(ConfigTest, NatsSecurityFlagsComeFromFlagsOrEnvironment) {
  // absl's flags keep their last values: every parse sets all it relies on,
  // and the last one puts the NATS security flags back to empty.
  auto with = [](std::vector<std::string> args) {
    std::vector<std::string> all = {
        "--nats=",          "--nats-replicas=0",     "--dedup-window=2m",
        "--advertise=",     "--replica-expiry=24h",  "--nats-tls-ca=",
        "--nats-tls-cert=", "--nats-tls-key=",       "--nats-creds=",
        "--nats-user=",     "--nats-password-file=", "--nats-token-file="};
    all.insert(all.end(), args.begin(), args.end());
    return Parse(all);
  };
  setenv("CUCKOOD_NATS_PASSWORD_FILE", "/etc/cuckood/nats/password", 1);
  auto c = with({"--nats=tls://nats-0:4222", "--nats-tls-ca=/nats/ca.crt",
                 "--nats-tls-cert=/nats/tls.crt", "--nats_tls_key=/nats/tls.key",
                 "--nats-user=cuckood"});
  // The command line's empty --nats-password-file wins over the variable:
  // parse again without it.
  unsetenv("CUCKOOD_NATS_PASSWORD_FILE");
  EXPECT_FALSE(c.ok());
  setenv("CUCKOOD_NATS_PASSWORD_FILE", "/etc/cuckood/nats/password", 1);
  c = Parse({"--nats=tls://nats-0:4222", "--nats-tls-ca=/nats/ca.crt",
             "--nats-tls-cert=/nats/tls.crt", "--nats_tls_key=/nats/tls.key", "--nats-user=cuckood",
             "--nats-creds=", "--nats-token-file="});
  unsetenv("CUCKOOD_NATS_PASSWORD_FILE");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nats_tls_ca, "/nats/ca.crt");
  EXPECT_EQ(c->nats_tls_cert, "/nats/tls.crt");
  EXPECT_EQ(c->nats_tls_key, "/nats/tls.key");
  EXPECT_EQ(c->nats_user, "cuckood");
  EXPECT_EQ(c->nats_password_file, "/etc/cuckood/nats/password");
  const ClusterOptions options = ClusterOptionsOf(*c);
  EXPECT_EQ(options.nats_security.tls_ca, "/nats/ca.crt");
  EXPECT_EQ(options.nats_security.password_file, "/etc/cuckood/nats/password");
  EXPECT_TRUE(NatsTlsOn(options));
  auto token = with({"--nats=nats://nats-0:4222", "--nats-token-file=/nats/token"});
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(ClusterOptionsOf(*token).nats_security.token_file, "/nats/token");
  EXPECT_FALSE(NatsTlsOn(ClusterOptionsOf(*token)));
  ASSERT_TRUE(with({}).ok());
}

TEST(ConfigTest, NatsUrlsAreShownWithoutTheirUserInfo) {
  EXPECT_EQ(NatsUrlWithoutUserInfo("nats://nats-0:4222"), "nats://nats-0:4222");
  EXPECT_EQ(NatsUrlWithoutUserInfo("nats://user:secret@nats-0:4222"), "nats://nats-0:4222");
  EXPECT_EQ(NatsUrlWithoutUserInfo("tls://token@nats-0:4222"), "tls://nats-0:4222");
  // A password may hold '@', '/' and '?'.
  EXPECT_EQ(NatsUrlWithoutUserInfo("nats://u:p@s/s?w@rd@10.0.0.1:4222"), "nats://10.0.0.1:4222");
}

TEST(ConfigTest, NatsSecurityFlagsThatExcludeOrNeedEachOtherAreRefusedNamingThem) {
  struct Case {
    void (*set)(ServerConfig&);
    const char* message;
  };
  const Case cases[] = {
      {[](ServerConfig& c) { c.nats_token_file = "t"; },
       "--nats-token-file: set for the connections to NATS, but there are none without --nats"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_tls_cert = "c";
       },
       "--nats-tls-cert is set without --nats-tls-key"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_tls_key = "k";
       },
       "--nats-tls-key is set without --nats-tls-cert"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_tls_cert = "c";
         c.nats_tls_key = "k";
       },
       "--nats-tls-cert (mutual TLS) needs TLS to NATS"},
      {[](ServerConfig& c) {
         c.nats_urls = {"tls://a:1", "nats://b:1"};
       },
       "--nats mixes tls:// URLs with others"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_user = "u";
       },
       "--nats-user is set without --nats-password-file"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_password_file = "p";
       },
       "--nats-password-file is set without --nats-user"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_creds = "c.creds";
         c.nats_user = "u";
         c.nats_password_file = "p";
       },
       "--nats-creds and --nats-user/--nats-password-file are mutually exclusive"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1"};
         c.nats_creds = "c.creds";
         c.nats_token_file = "t";
       },
       "--nats-creds and --nats-token-file are mutually exclusive"},
      {[](ServerConfig& c) {
         c.nats_urls = {"nats://a:1", "nats://user:hunter2@b:1"};
         c.nats_token_file = "t";
       },
       "--nats: URL 2 of 2 holds credentials (user@host), and --nats-token-file gives them too"},
  };
  for (const Case& k : cases) {
    ServerConfig c;
    k.set(c);
    absl::Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.message));
    EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr("hunter2")));
  }
  // TLS from tls:// URLs alone, a client certificate, and one kind of
  // credentials are fine (the files are read when the replica starts).
  ServerConfig c;
  c.nats_urls = {"tls://a:1", "TLS://b:1"};
  c.nats_tls_cert = "c";
  c.nats_tls_key = "k";
  c.nats_creds = "c.creds";
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  EXPECT_TRUE(NatsTlsOn(ClusterOptionsOf(c)));
}

}  // namespace
}  // namespace cuckoo::server

// --listen: TCP addresses, Unix sockets (gRPC's forms) and lists of both.
namespace cuckoo::server {
namespace {

std::string ListenError(const std::string& listen) {
  return std::string(ParseListenAddresses(listen).status().message());
}

TEST(ListenConfigTest, TakesHostPortUnixSocketsAndListsOfBoth) {
  cuckoo::testing::TempDir dir;
  auto one = ParseListenAddresses("0.0.0.0:50051");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_FALSE((*one)[0].is_unix());
  EXPECT_EQ((*one)[0].text, "0.0.0.0:50051");

  const std::string absolute = dir.path() + "/cuckood.sock";
  auto both = ParseListenAddresses("[::]:0, unix://" + absolute + ",unix:" + absolute + "2");
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 3u);
  EXPECT_EQ((*both)[0].text, "[::]:0");
  EXPECT_EQ((*both)[1].text, "unix://" + absolute);
  EXPECT_EQ((*both)[1].path, absolute);  // unix:///ABS: the path is /ABS.
  EXPECT_EQ((*both)[2].path, absolute + "2");

  // Relative to the working directory, as gRPC binds it.
  auto relative = ParseListenAddresses("unix:cuckood.sock");
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ((*relative)[0].path, "cuckood.sock");
}

TEST(ListenConfigTest, BadAddressesAreRefusedNamingTheProblem) {
  cuckoo::testing::TempDir dir;
  EXPECT_THAT(ListenError(""), HasSubstr("--listen is empty"));
  EXPECT_THAT(ListenError("nonsense"), HasSubstr("is neither host:port"));
  EXPECT_THAT(ListenError("0.0.0.0:http"), HasSubstr("is neither host:port"));
  EXPECT_THAT(ListenError("0.0.0.0:65536"), HasSubstr("is neither host:port"));
  EXPECT_THAT(ListenError("::1:50051"), HasSubstr("is neither host:port"));  // No brackets.
  EXPECT_THAT(ListenError("dns:///h:50051"), HasSubstr("is neither host:port"));
  EXPECT_THAT(ListenError("127.0.0.1:1,,127.0.0.1:2"), HasSubstr("has an empty entry"));
  EXPECT_THAT(ListenError("unix:"), HasSubstr("the Unix socket's path is empty"));
  EXPECT_THAT(ListenError("unix://"), HasSubstr("unix:///ABSOLUTE/PATH or unix:RELATIVE/PATH"));
  EXPECT_THAT(ListenError("unix://run/x.sock"),
              HasSubstr("unix:///ABSOLUTE/PATH or unix:RELATIVE/PATH"));
  EXPECT_THAT(ListenError("unix:" + dir.path() + "/50%.sock"), HasSubstr("has a %, ? or #"));

  // sun_path holds 107 bytes and a NUL: 107 is fine, 108 is not.
  std::string name(kMaxUnixSocketPath - dir.path().size() - 1, 'x');
  ASSERT_EQ((dir.path() + "/" + name).size(), 107u);
  EXPECT_TRUE(ParseListenAddresses("unix:" + dir.path() + "/" + name).ok());
  const std::string too_long = "unix:" + dir.path() + "/" + name + "y";
  EXPECT_THAT(ListenError(too_long), HasSubstr("the Unix socket's path is 108 bytes long;"));
  EXPECT_THAT(ListenError(too_long), HasSubstr("the most a socket address holds is 107"));
  // gRPC's server binds "///PATH" for unix:///PATH: two bytes more.
  EXPECT_THAT(ListenError("unix://" + dir.path() + "/" + name),
              HasSubstr("is 109 bytes long as gRPC binds it"));
  const std::string shorter = dir.path() + "/" + name.substr(2);
  EXPECT_TRUE(ParseListenAddresses("unix://" + shorter).ok());

  EXPECT_THAT(ListenError("unix://" + dir.path() + "/missing/cuckood.sock"),
              HasSubstr("the Unix socket's directory " + dir.path() + "/missing does not exist"));
  std::ofstream(dir.path() + "/file") << "x";
  EXPECT_THAT(ListenError("unix:" + dir.path() + "/file/cuckood.sock"),
              HasSubstr("the Unix socket's directory " + dir.path() + "/file is not a directory"));

  EXPECT_THAT(ListenError("127.0.0.1:5000,127.0.0.1:5000"),
              HasSubstr("names \"127.0.0.1:5000\" twice"));
  // The same file in both of gRPC's forms.
  EXPECT_THAT(ListenError("unix:" + dir.path() + "/a.sock,unix://" + dir.path() + "/./a.sock"),
              HasSubstr("twice"));
  // In a list, the message names the entry too.
  EXPECT_THAT(ListenError("127.0.0.1:5000,unix:"),
              HasSubstr("--listen=\"127.0.0.1:5000,unix:\": \"unix:\""));
}

TEST(ListenConfigTest, ValidateConfigChecksTheListAndTheSocketMode) {
  cuckoo::testing::TempDir dir;
  ServerConfig c;
  c.listen = "127.0.0.1:0,unix://" + dir.path() + "/c.sock";
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  c.listen = "unix:" + dir.path() + "/nowhere/c.sock";
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("does not exist"));
  c.listen = "unix:" + dir.path() + "/c.sock";
  c.listen_socket_mode = 01777;
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("--listen-socket-mode=1777"));
  // The Redis port is not one of the gRPC port's addresses.
  c.listen_socket_mode = 0660;
  c.listen = "unix:" + dir.path() + "/c.sock,127.0.0.1:6379";
  c.redis_listen = "127.0.0.1:6379";
  EXPECT_THAT(std::string(ValidateConfig(c).message()), HasSubstr("--redis-listen=127.0.0.1:6379"));
}

TEST(ListenConfigTest, AClusterWithOnlyAUnixSocketNeedsAdvertise) {
  cuckoo::testing::TempDir dir;
  ServerConfig c;
  c.nats_urls = {"nats://a:4222"};
  c.listen = "unix://" + dir.path() + "/c.sock";
  const absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("has no TCP address"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("set --advertise=HOST:PORT"));
  c.advertise = "cuckood-0.cuckood:50051";
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
  // With a TCP address too, the default (host name and its port) is used.
  c.advertise.clear();
  c.listen = "unix://" + dir.path() + "/c.sock,0.0.0.0:50051";
  EXPECT_TRUE(ValidateConfig(c).ok()) << ValidateConfig(c);
}

TEST(ListenConfigTest, TheAdvertisedDefaultIsTheFirstTcpAddress) {
  EXPECT_EQ(DefaultAdvertiseAddress("unix:/run/x.sock,10.1.2.3:50051,10.1.2.4:6000"),
            "10.1.2.3:50051");
  EXPECT_EQ(DefaultAdvertiseAddress("unix:/run/x.sock"), "");
  EXPECT_EQ(DefaultAdvertiseAddress("10.1.2.3:0"), "");
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(DefaultAdvertiseAddress("unix:/run/x.sock,0.0.0.0:7000"), std::string(host) + ":7000");
}

TEST(ListenConfigTest, OnlyLoopbackAndUnixSocketsAreLocal) {
  EXPECT_TRUE(ListenIsLocal("127.0.0.1:1,unix:/run/x.sock,[::1]:2,localhost:3"));
  EXPECT_TRUE(ListenIsLocal("unix:/run/x.sock"));
  EXPECT_FALSE(ListenIsLocal("unix:/run/x.sock,0.0.0.0:50051"));
  EXPECT_FALSE(ListenIsLocal("0.0.0.0:50051"));
}

TEST(ListenConfigTest, SocketModeComesFromFlagOrEnvironmentInOctal) {
  cuckoo::testing::TempDir dir;
  // absl's flags keep the values earlier tests left: every parse sets what
  // would be invalid with a socket alone.
  auto Parse = [](std::vector<std::string> args) {
    std::vector<std::string> all = {"--nats=", "--advertise=", "--replica-expiry=24h",
                                    "--dedup-window=2m", "--redis-listen="};
    all.insert(all.end(), args.begin(), args.end());
    return ::cuckoo::server::Parse(all);
  };
  const std::string listen = "--listen=unix:" + dir.path() + "/c.sock";
  auto c = Parse({listen, "--listen-socket-mode=0600"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen, "unix:" + dir.path() + "/c.sock");
  EXPECT_EQ(c->listen_socket_mode, 0600u);
  setenv("CUCKOOD_LISTEN_SOCKET_MODE", "666", 1);
  auto env = Parse({listen});
  unsetenv("CUCKOOD_LISTEN_SOCKET_MODE");
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->listen_socket_mode, 0666u);
  for (const char* bad : {"--listen-socket-mode=rw", "--listen-socket-mode=0999",
                          "--listen-socket-mode=4755", "--listen-socket-mode="}) {
    auto b = Parse({listen, bad});
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("--listen-socket-mode")) << bad;
  }
  // The defaults back, for the tests after this.
  ASSERT_TRUE(Parse({"--listen=0.0.0.0:50051", "--listen-socket-mode=0660"}).ok());
}

// The file checks before a socket is bound, with real sockets.
class StaleSocketTest : public ::testing::Test {
 protected:
  // A socket file at `path`, listening or (closed) left behind.
  static int Bind(const std::string& path, bool listening) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    if (listening) {
      EXPECT_EQ(listen(fd, 4), 0);
      return fd;
    }
    close(fd);  // The file stays: what a killed server leaves.
    return -1;
  }
  cuckoo::testing::TempDir dir_;
};

TEST_F(StaleSocketTest, NothingThereIsFine) {
  bool removed = true;
  EXPECT_TRUE(RemoveStaleSocket(dir_.path() + "/none.sock", &removed).ok());
  EXPECT_FALSE(removed);
}

TEST_F(StaleSocketTest, ASocketNoOneAcceptsOnIsRemoved) {
  const std::string path = dir_.path() + "/stale.sock";
  Bind(path, /*listening=*/false);
  ASSERT_TRUE(std::filesystem::exists(path));
  bool removed = false;
  EXPECT_TRUE(RemoveStaleSocket(path, &removed).ok());
  EXPECT_TRUE(removed);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(StaleSocketTest, ASocketAProcessServesOnIsRefusedAndKept) {
  const std::string path = dir_.path() + "/live.sock";
  const int fd = Bind(path, /*listening=*/true);
  const absl::Status s = RemoveStaleSocket(path);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("another process is serving on the Unix socket " + path));
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST_F(StaleSocketTest, AFileThatIsNotASocketIsNeverRemoved) {
  const std::string path = dir_.path() + "/data";
  std::ofstream(path) << "precious";
  const absl::Status s = RemoveStaleSocket(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr(path + " exists and is not a socket"));
  EXPECT_TRUE(std::filesystem::exists(path));
  std::filesystem::create_directory(dir_.path() + "/dir");
  EXPECT_THAT(std::string(RemoveStaleSocket(dir_.path() + "/dir").message()),
              HasSubstr("is not a socket"));
}

}  // namespace
}  // namespace cuckoo::server
