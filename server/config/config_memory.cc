// The sizes derived from the machine when a flag leaves them automatic
// (Effective*), and the memory the server states it uses besides its
// filters (StatedMemoryOverhead).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "server/config/config.h"
#include "server/wal/wal_apply.h"
#include "server/wal/wal_format.h"

namespace cuckoo::server {
namespace {

uint64_t ReadCgroupLimit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",  // cgroup v2
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string value;
    if (!(in >> value)) continue;
    uint64_t limit = 0;
    // "max" (v2) or a huge number (v1) mean no limit.
    if (absl::SimpleAtoi(value, &limit) && limit < (uint64_t{1} << 60)) return limit;
  }
  return 0;
}

}  // namespace

uint64_t AvailableMemoryBytes() {
  uint64_t physical =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t cgroup = ReadCgroupLimit();
  return cgroup > 0 ? std::min(cgroup, physical) : physical;
}

uint64_t EffectiveMemoryBudget(const ServerConfig& config) {
  if (config.memory_budget_bytes != 0) return config.memory_budget_bytes;
  // 75%, less if the stated overhead would not fit beside it (many CPUs in
  // a small container).
  const uint64_t available = AvailableMemoryBytes();
  const uint64_t overhead = StatedMemoryOverhead(config);
  const uint64_t room = available > overhead ? available - overhead : 0;
  return std::max(std::min(available / 4 * 3, room), available / 8);
}

uint64_t EffectiveSnapshotBuffer(const ServerConfig& config) {
  if (config.snapshot_buffer_bytes != 0) return config.snapshot_buffer_bytes;
  return std::clamp<uint64_t>(AvailableMemoryBytes() / 16, uint64_t{16} << 20, uint64_t{128} << 20);
}

uint64_t EffectiveTransportMemory(const ServerConfig& config) {
  if (config.transport_memory_bytes != 0) return config.transport_memory_bytes;
  return std::max(
      std::clamp<uint64_t>(AvailableMemoryBytes() / 32, uint64_t{32} << 20, uint64_t{1} << 30),
      2 * config.max_message_bytes);
}

uint64_t RedisMaxCommandBytes(const ServerConfig& config) {
  return std::max<uint64_t>(config.max_message_bytes, (uint64_t{1} << 20) + 8192);
}

uint64_t EffectiveRedisClientMemory(const ServerConfig& config) {
  if (config.redis_client_memory_bytes != 0) return config.redis_client_memory_bytes;
  return std::max(
      std::clamp<uint64_t>(AvailableMemoryBytes() / 16, uint64_t{32} << 20, uint64_t{1} << 30),
      4 * RedisMaxCommandBytes(config));
}

uint64_t RedisMemoryOverhead(const ServerConfig& config) {
  if (config.redis_listen.empty()) return 0;
  const uint64_t threads = config.redis_threads != 0
                               ? config.redis_threads
                               : std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  const uint64_t read_chunk = uint64_t{64} << 10;  // resp::ServerOptions::read_chunk
  return EffectiveRedisClientMemory(config) +
         threads * (RedisMaxCommandBytes(config) + read_chunk + (uint64_t{1} << 20)) +
         kRedisAuthThrottleBytes + kRedisTransferBytes;
}

uint64_t WalMemoryOverhead(const ServerConfig& config) {
  const uint64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  const uint64_t batch_bytes = WalBytesForBatch(config.max_batch_keys, kMaxShards);
  // Start-up (replay) and running (the pending buffer) never overlap.
  return std::max(
      WalMemoryBound(kWalDefaultMaxPendingBytes, batch_bytes),
      WalApplier::ReplayMemoryBound(config.wal_segment_bytes, std::max<uint64_t>(2, cpus)));
}

uint64_t ClusterMemoryOverhead(const ServerConfig& config) {
  return kRequestWindowBytes + (uint64_t{64} << 20) + EffectiveTransportMemory(config) / 2 +
         kClusterDigestBytes;
}

uint64_t StatedMemoryOverhead(const ServerConfig& config) {
  const uint64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  // A cluster replica keeps no write-ahead log of its own.
  const uint64_t log = config.nats_urls.empty() ? WalMemoryOverhead(config) + kRequestWindowBytes
                                                : ClusterMemoryOverhead(config);
  return (uint64_t{32} << 20) + cpus * (uint64_t{4} << 20) + 3 * EffectiveTransportMemory(config) +
         EffectiveSnapshotBuffer(config) + log + kTransferMemoryOverhead +
         RedisMemoryOverhead(config);
}

}  // namespace cuckoo::server
