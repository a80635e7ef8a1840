// The options each subsystem gets from the configuration (*OptionsOf).
#include <algorithm>
#include <string>

#include "server/config/config.h"
#include "server/service/listen.h"

namespace cuckoo::server {

TlsOptions TlsOptionsOf(const ServerConfig& config) {
  return {.cert = config.tls_cert,
          .key = config.tls_key,
          .client_ca = config.tls_client_ca,
          .peer_ca = config.peer_ca,
          .reload_interval = config.tls_reload_interval};
}

ServiceLimits ServiceLimitsOf(const ServerConfig& config) {
  return {.max_batch_keys = config.max_batch_keys,
          .max_key_bytes = config.max_key_bytes,
          .max_message_bytes = config.max_message_bytes,
          .dedup_window = config.dedup_window,
          .max_dedup_bytes = kRequestWindowBytes,
          .max_read_wait = config.max_read_wait,
          .transfer_idle_timeout = config.transfer_idle_timeout};
}

WalOptions WalOptionsOf(const ServerConfig& config) {
  WalOptions wal;
  wal.durability = config.durability;
  wal.sync_interval = config.wal_sync_interval;
  wal.segment_bytes = config.wal_segment_bytes;
  return wal;
}

std::string AdvertiseAddress(const ServerConfig& config) {
  if (!config.advertise.empty()) return config.advertise;
  return DefaultAdvertiseAddress(config.listen);
}

ClusterOptions ClusterOptionsOf(const ServerConfig& config) {
  return {.nats_urls = config.nats_urls,
          .stream = config.nats_stream,
          .stream_replicas = config.nats_replicas,
          .replica_id = config.replica_id,
          .dedup_window = config.dedup_window,
          .max_dedup_bytes = kRequestWindowBytes,
          .write_timeout = config.cluster_write_timeout,
          .ready_max_lag = config.ready_max_lag,
          .advertise = AdvertiseAddress(config),
          .replica_expiry = config.replica_expiry,
          .nats_security = {.tls_ca = config.nats_tls_ca,
                            .tls_cert = config.nats_tls_cert,
                            .tls_key = config.nats_tls_key,
                            .creds_file = config.nats_creds,
                            .user = config.nats_user,
                            .password_file = config.nats_password_file,
                            .token_file = config.nats_token_file}};
}

RedisOptions RedisOptionsOf(const ServerConfig& config) {
  return {.default_capacity = config.redis_default_capacity,
          .error_rate = config.redis_error_rate,
          .default_expansion = config.redis_default_expansion,
          .max_batch_keys = config.max_batch_keys,
          .max_key_bytes = config.max_key_bytes,
          .max_clients = config.redis_max_clients,
          .max_client_memory = EffectiveRedisClientMemory(config),
          .max_bulk_bytes = std::max<size_t>(config.max_key_bytes, kRedisDumpChunkBytes + 4096),
          .data_dir = config.data_dir,
          .transfer_idle_timeout = config.transfer_idle_timeout};
}

LogOptions LogOptionsOf(const ServerConfig& config) {
  return {.format = config.log_format, .level = config.log_level};
}

Authenticator::Options AuthOptionsOf(const ServerConfig& config) {
  return {.path = config.auth_tokens, .reload_interval = config.auth_reload_interval};
}

}  // namespace cuckoo::server
