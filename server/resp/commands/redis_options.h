// RedisOptions: the Redis port's settings as the configuration builds them
// (RedisOptionsOf, server/config/config.h), and the memory the port's
// commands hold at most, apart from the commands (resp_commands.h) so that
// the configuration does not include them.
#ifndef CUCKOO_SERVER_RESP_COMMANDS_REDIS_OPTIONS_H_
#define CUCKOO_SERVER_RESP_COMMANDS_REDIS_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cuckoo::server {

class TransferDisk;  // server/service/transfers.h

// The AUTH throttle (RedisCommands::PeerAuthFailures): at most 65,536 peers
// remembered (~100 bytes each in the table) and the delayed replies of
// failing connections.
inline constexpr uint64_t kRedisAuthThrottleBytes = uint64_t{12} << 20;
// CF.SCANDUMP and CF.LOADCHUNK work on at most 6 threads (4 dumps, 2
// loads), each holding a chunk (1 MiB + 4 KiB) and its reply or a read
// buffer: 2 MiB each (static_assert in server/resp/commands/dump_commands.cc).
inline constexpr uint64_t kRedisTransferBytes = uint64_t{12} << 20;

// The first chunk of a dump: magic, snapshot bytes, items.
inline constexpr char kRedisDumpMagic[] = "CKDUMP01";
inline constexpr size_t kRedisDumpHeaderBytes = 24;
// Data bytes per dump chunk.
inline constexpr size_t kRedisDumpChunkBytes = size_t{1} << 20;
// Dumps and loads that may be unfinished at once (more get an error), on
// all connections together and on one connection (so that one client
// cannot take every slot; each ends with its connection).
inline constexpr size_t kMaxRedisDumps = 4;
inline constexpr size_t kMaxRedisLoads = 2;
inline constexpr size_t kMaxRedisDumpsPerConnection = 2;
inline constexpr size_t kMaxRedisLoadsPerConnection = 1;
// Dumps and loads dropped for their idle time that are remembered, for the
// error their client gets next: at most this many, for at most this long.
inline constexpr size_t kMaxRedisExpiredTransfers = 64;
inline constexpr absl::Duration kRedisExpiredTransferMemory = absl::Hours(1);

// A growing filter made over the Redis port may grow to this many times its
// capacity (its max_capacity; RedisBloom's with its default EXPANSION 1
// reach 32 times, with EXPANSION 2 2^32 times). This bounds the memory one
// key repeated without end can make it take (docs/GROWTH.md, "Repeated
// keys").
inline constexpr uint64_t kRedisMaxGrowth = 1024;

struct RedisOptions {
  // A filter that CF.ADD, CF.ADDNX, CF.INSERT or CF.INSERTNX creates (the
  // key does not exist) holds this many keys before it grows
  // (--redis-default-capacity; RedisBloom's default is 1024 too).
  uint64_t default_capacity = 1024;
  // The false-positive rate of filters made over this port
  // (--redis-error-rate): CF.RESERVE has no argument for it.
  double error_rate = 0.002;
  // The growth factor of a filter made with no EXPANSION
  // (--redis-default-expansion): 0 fixed, 2 to 8 growing.
  uint32_t default_expansion = 2;
  // As the gRPC API's limits (--max-batch-keys, --max-key-bytes).
  uint32_t max_batch_keys = 100'000;
  uint32_t max_key_bytes = 4096;
  // For CONFIG GET: --redis-max-clients and the longest argument.
  uint32_t max_clients = 10'000;
  uint64_t max_client_memory = 0;  // --redis-client-memory (CONFIG GET maxmemory-clients)
  size_t max_bulk_bytes = 0;
  // Where dumps and loads keep their private files.
  std::string data_dir;
  // An unfinished dump or load whose client sent or asked for no chunk for
  // this long is dropped (--transfer-idle-timeout).
  absl::Duration transfer_idle_timeout = absl::Seconds(60);
  // Where dumps and loads claim the disk space of their files; null: not
  // checked.
  TransferDisk* disk = nullptr;
};

// INVALID_ARGUMENT unless default_capacity is 1 to 2^40, error_rate in
// (0, 1) and default_expansion 0 or 2 to 8; the message names the flag
// (--redis-default-capacity, --redis-error-rate, --redis-default-expansion).
absl::Status ValidateRedisOptions(const RedisOptions& options);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_RESP_COMMANDS_REDIS_OPTIONS_H_
