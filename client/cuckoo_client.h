// cuckoo::client::Client: a thin C++ client for cuckood, over the generated
// cuckoo.v1.FilterService stub.
//
// What it adds to the stub: a deadline on every call, absl::Status results,
// and batches of any size: keys are split into requests that respect the
// server's limits (asked once with GetServerInfo) and the per-key results are
// put back together in order.
//
//   auto client = cuckoo::client::Client::Connect("localhost:50051");
//   v1::CreateFilterRequest create;
//   create.set_name("users");
//   create.set_capacity(1'000'000);
//   create.set_false_positive_rate(0.001);
//   create.set_if_not_exists(true);
//   if (auto info = client->CreateFilter(create); !info.ok()) ...
//   std::vector<std::string_view> keys = {"alice", "bob"};
//   auto inserted = client->Insert("users", keys);           // per-key results
//   auto present = client->Lookup("users", keys);            // {true, true}
//
// Several servers (the replicas of a cluster, cuckood --nats): give them all,
// Connect("a:50051,b:50051,c:50051"), or a name that resolves to all of them
// (Connect("dns:///cuckood-headless:50051")). Calls are spread over them
// round-robin on one channel, and a call that fails UNAVAILABLE (a replica
// down or shutting down, a cluster electing the leader of its log, a replica
// too far behind) is retried, on the next replica, until
// ClientOptions::retry_timeout:
// - gRPC retries it first (its retry policy, at most 5 attempts in about a
//   second), then the client, with exponential backoff and jitter, each
//   attempt with a fresh ClientOptions::timeout deadline. The client also
//   retries RESOURCE_EXHAUSTED from the transport ("Received RST_STREAM
//   with error code 11": the server's gRPC memory was full), not cuckood's
//   own RESOURCE_EXHAUSTED (a limit: a repeat is refused alike). No other
//   code is retried: not DEADLINE_EXCEEDED (the caller's bound on an
//   attempt) nor CANCELLED.
// - Inserts and Deletes always carry a request id: the caller's, else a
//   random one (NewRequestId) made once per call, and every attempt of the
//   call, gRPC's and the client's, sends the same one. A write that failed
//   UNAVAILABLE or RESOURCE_EXHAUSTED from the transport may have been
//   applied (proto: "Retries"); with its id, the server (any replica)
//   answers a repeat within its dedup window (GetServerInfo) with the first
//   one's results instead of applying it again. A batch split into several
//   requests gives each its own id derived from the call's: ID.0, ID.1, ...
//   (only when there are several; one request sends the caller's id as it
//   is). To repeat a call that failed (DEADLINE_EXCEEDED, say, which is
//   not retried) without applying it twice, give the call an id
//   (NewRequestId()) and pass the same id and keys again.
// - CreateFilter is retried only with if_not_exists (a repeat of an applied
//   one would fail ALREADY_EXISTS), DropFilter and ImportFilter never,
//   ExportFilter until its first chunk arrives.
// - Read-your-writes (ClientOptions::read_your_writes): the client remembers
//   the largest log position any response carried (last_log_position()) and
//   asks every Lookup, Count, GetFilter, ListFilters, Insert and Delete to
//   wait until the answering replica has applied the log that far, so a read
//   through any replica sees this client's earlier writes.
//
// Errors are the server's gRPC status as an absl::Status with the same code
// and message (see proto/cuckoo/v1/filter_service.proto); after retries the
// message says how many attempts were made. A batch split into several
// requests is not atomic: if request k fails, the ones before it were
// applied, and the message says how many keys that was; a bad key is named
// by its index in the caller's keys.
//
// Security (ClientOptions::tls, ClientOptions::token): with tls.enabled the
// channel is TLS (the server's certificate checked against tls.root_certs_pem,
// else the system's roots), and mutual TLS when a client certificate is
// given; LoadTlsFiles reads them from PEM files. A token is sent with every
// call, the unary ones, the streams (ExportFilter, ImportFilter) and the
// GetServerInfo asked for the limits, as the metadata
// "authorization: Bearer TOKEN" (kAuthorizationMetadataKey). It goes over a
// plain channel too when TLS is off (a proxy in front of the server may
// terminate TLS), where anyone on the path can read it.
//
// Thread safety: a Client may be used from any number of threads at once.
// Use the stub directly (stub()) for asynchronous calls, with
// AddCallMetadata(&context) so that they carry the token. The stub's calls go
// through the same channel, so gRPC's retry policy applies to them too: set
// request_id on every Insert and Delete sent through it, or a retried one may
// be applied twice.
#ifndef CUCKOO_CLIENT_CUCKOO_CLIENT_H_
#define CUCKOO_CLIENT_CUCKOO_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"

namespace cuckoo::client {

namespace v1 = ::cuckoo::v1;

// The metadata key of the token: gRPC metadata keys are lowercase, and the
// value is "Bearer " then the token (RFC 6750's form, as the server expects).
inline constexpr char kAuthorizationMetadataKey[] = "authorization";

// How Connect secures its channel. PEM contents, not paths (LoadTlsFiles reads
// files); a client certificate needs its key and the other way round.
struct TlsOptions {
  bool enabled = false;
  // The CAs the server's certificate must chain to; empty: the system's roots.
  std::string root_certs_pem;
  // The client certificate (chain) and its private key, for mutual TLS.
  std::string cert_chain_pem;
  std::string private_key_pem;
  // The name the server's certificate is checked against instead of the
  // target's host (e.g. when connecting to an IP address, or to a replica by
  // its own name with a certificate issued for the service's name).
  std::string server_name;
};

// TlsOptions (enabled) from PEM files; an empty path is a file not given.
// INVALID_ARGUMENT for a certificate without a key or a key without a
// certificate, or a file that is not PEM; NOT_FOUND, PERMISSION_DENIED, ...
// for a file that cannot be read, naming the file and the OS error.
absl::StatusOr<TlsOptions> LoadTlsFiles(const std::string& ca_path, const std::string& cert_path,
                                        const std::string& key_path);

// The channel credentials for `tls`: TLS when enabled, else insecure. Sets
// the name override (tls.server_name) in `args`. For channels a caller makes
// itself (cuckoo-bench); Connect uses it.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsOptions& tls,
                                                             grpc::ChannelArguments& args);

// OK if `token` can be sent: 1 to 512 of the characters ! to ~ (what the
// server accepts; gRPC metadata values cannot hold control characters).
// INVALID_ARGUMENT naming the first bad character otherwise.
absl::Status ValidateToken(std::string_view token);

// Adds "authorization: Bearer TOKEN" to `ctx`; nothing for an empty token.
void AddToken(std::string_view token, grpc::ClientContext& ctx);

struct ClientOptions {
  // Deadline of each RPC (a large batch is several RPCs, each with this; so
  // is every retry of one).
  absl::Duration timeout = absl::Seconds(30);
  // How long the client goes on retrying a request that fails UNAVAILABLE
  // (or RESOURCE_EXHAUSTED from the transport): no new attempt starts later
  // than this after the first. Zero: no retries but gRPC's own (see the top
  // of this file). Keep it under the server's dedup window (2 minutes by
  // default), within which a write's retries are applied once.
  absl::Duration retry_timeout = absl::Seconds(30);
  // Send last_log_position() as min_log_position (see the top of this file).
  bool read_your_writes = true;
  // Most keys per request; 0: the server's max_batch_keys.
  uint32_t max_batch_keys = 0;
  // Most key bytes per request; 0: a quarter of the server's max message
  // size (a key costs a few bytes of framing on top of its own).
  uint64_t max_batch_bytes = 0;
  // Largest response accepted, in bytes.
  int max_receive_message_bytes = 64 << 20;
  // Sent with every call (see the top of this file); empty: none.
  std::string token;
  // Connect's channel: TLS or not (a channel given to the constructor is used
  // as it is).
  TlsOptions tls;
};

class Client {
 public:
  // A client for the cuckood at `target` ("host:port", or any gRPC target
  // such as "dns:///cuckood.svc:50051"), or for several, "a:50051,b:50051"
  // (see ChannelTarget), over one channel that balances calls
  // round-robin over every address and retries UNAVAILABLE, secured as
  // options.tls says. Connects lazily:
  // an unreachable server shows as UNAVAILABLE on the first call. A target
  // that cannot be used (a bad list, no name of it resolves) makes every
  // call fail with that error (connect_status()).
  static std::unique_ptr<Client> Connect(const std::string& target, ClientOptions options = {});
  // A client over an existing channel (with that channel's service config;
  // the client's own retries and read-your-writes apply).
  explicit Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});

  absl::StatusOr<v1::CreateFilterResponse> CreateFilter(const v1::CreateFilterRequest& request);
  absl::StatusOr<v1::FilterInfo> GetFilter(std::string_view name);
  absl::StatusOr<std::vector<v1::FilterInfo>> ListFilters();
  // Returns the bytes freed.
  absl::StatusOr<uint64_t> DropFilter(std::string_view name);
  // Sets (expire_at set) or clears a filter's expiry (SetFilterExpiry).
  // Never retried: a repeat could drop a filter created again meanwhile.
  absl::StatusOr<v1::SetFilterExpiryResponse> SetFilterExpiry(
      const v1::SetFilterExpiryRequest& request);
  // Renames filter `name` to `new_name`; with `replace` a filter named
  // new_name is dropped with it (else ALREADY_EXISTS). Never retried, as
  // DropFilter.
  absl::StatusOr<v1::RenameFilterResponse> RenameFilter(std::string_view name,
                                                        std::string_view new_name, bool replace);
  // Writes snapshots of `filter` (all filters when empty) now and returns
  // when they are on the server's disk. `timeout` replaces the client's
  // per-call deadline (writing a large filter takes a while).
  absl::StatusOr<v1::SnapshotResponse> Snapshot(std::string_view filter, bool changed_only,
                                                absl::Duration timeout);

  // Per-key results in the order of `keys`. `request_id` (1 to 128 of ! to
  // ~; empty: a random one, NewRequestId(), for this call) is sent with
  // every attempt, and makes a repeat of the same call, with the same keys,
  // within the server's dedup window answer with the first one's results
  // instead of applying again; a batch split into n > 1 requests sends
  // ID.0 ... ID.(n-1), so leave room for the suffix.
  absl::StatusOr<std::vector<v1::InsertResult>> Insert(std::string_view filter,
                                                       absl::Span<const std::string_view> keys,
                                                       bool if_absent = false,
                                                       std::string_view request_id = {});
  absl::StatusOr<std::vector<bool>> Lookup(std::string_view filter,
                                           absl::Span<const std::string_view> keys);
  absl::StatusOr<std::vector<v1::DeleteResult>> Delete(std::string_view filter,
                                                       absl::Span<const std::string_view> keys,
                                                       std::string_view request_id = {});
  absl::StatusOr<std::vector<uint32_t>> Count(std::string_view filter,
                                              absl::Span<const std::string_view> keys);

  absl::StatusOr<v1::GetServerInfoResponse> ServerInfo();

  // What an export's first chunk says (ExportFilterChunk's metadata).
  struct ExportInfo {
    uint64_t total_bytes = 0;   // The snapshot file's size: the bytes given to the sink.
    uint64_t items = 0;         // Items in the snapshot.
    uint64_t log_position = 0;  // The server's applied log position when the export started.
    uint64_t filter_id = 0;     // The filter's id recorded in the snapshot.
    v1::FilterInfo filter;
  };
  // Receives an export's bytes, in order, one chunk at a time; a non-OK
  // status cancels the export and is returned.
  using ExportSink = std::function<absl::Status(std::string_view bytes)>;
  // Streams filter `name`'s snapshot file (ExportFilter in the proto) to
  // `sink`, one chunk (at most 1 MiB) at a time: the client holds one chunk,
  // whatever the filter's size. The bytes, concatenated, are a snapshot file
  // that ImportFilter (or a server's data directory) takes. DATA_LOSS if the
  // stream ends before the total_bytes its first chunk announced. `timeout`
  // is the deadline of the whole stream. UNAVAILABLE before the first chunk
  // is retried as reads are (ClientOptions::retry_timeout); once the sink
  // has bytes, errors are returned as they are.
  absl::StatusOr<ExportInfo> ExportFilter(std::string_view name, const ExportSink& sink,
                                          absl::Duration timeout);
  // The same into `out` (a file opened in binary mode, a std::ostringstream).
  absl::StatusOr<ExportInfo> ExportFilter(std::string_view name, std::ostream& out,
                                          absl::Duration timeout);

  // Fills `buffer` with the next bytes of a snapshot file and returns how
  // many it put there: 0 at the end.
  using ImportSource = std::function<absl::StatusOr<size_t>(absl::Span<char> buffer)>;
  // Creates filter `name` from the snapshot file `source` reads
  // (ImportFilter in the proto), sent in chunks of 1 MiB (less when the
  // server's max_message_bytes is smaller): the client holds one chunk,
  // whatever the file's size. `total_bytes` (0: unknown) lets the server
  // refuse an upload cut short. `timeout` is the deadline of the whole
  // call. Never retried: a repeat of an import that was applied would fail
  // ALREADY_EXISTS (and the source cannot be read again).
  absl::StatusOr<v1::ImportFilterResponse> ImportFilter(std::string_view name,
                                                        const ImportSource& source,
                                                        uint64_t total_bytes,
                                                        absl::Duration timeout);
  // The same from `in`, read to its end (a file opened in binary mode, a
  // std::istringstream).
  absl::StatusOr<v1::ImportFilterResponse> ImportFilter(std::string_view name, std::istream& in,
                                                        absl::Duration timeout);

  // The largest log position of any response so far (0 before the first).
  uint64_t last_log_position() const { return last_log_position_.load(std::memory_order_acquire); }
  // Raises last_log_position() to `position` if it is below: e.g. a position
  // another client saw, so that this one reads that client's writes.
  void AdvanceLogPosition(uint64_t position);
  // A random request id: 32 hex digits (128 bits).
  static std::string NewRequestId();

  // OK, or why Connect could not use its target or its options (a token
  // ValidateToken refuses, a client certificate without its key).
  const absl::Status& connect_status() const { return connect_status_; }

  // Adds what every call of this client carries (the token) to `ctx`: for
  // calls made through stub() or on channel().
  void AddCallMetadata(grpc::ClientContext& ctx) const { AddToken(options_.token, ctx); }

  v1::FilterService::Stub& stub() { return *stub_; }
  // The channel, e.g. for the health service's stub.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const ClientOptions& options() const { return options_; }

 private:
  struct Limits {
    uint32_t keys;
    uint64_t bytes;
  };
  // The split sizes: the options', else the server's (asked once).
  absl::StatusOr<Limits> BatchLimits();
  template <typename Request, typename Response>
  using Rpc = grpc::Status (v1::FilterService::Stub::*)(grpc::ClientContext*, const Request&,
                                                        Response*);
  // One call of `rpc`, with the client's retries when `retry` (see the top of
  // this file), each attempt with deadline `timeout`.
  template <typename Request, typename Response>
  absl::Status Call(Rpc<Request, Response> rpc, const Request& request, Response* response,
                    bool retry, absl::Duration timeout);
  template <typename Request, typename Response>
  absl::Status Call(Rpc<Request, Response> rpc, const Request& request, Response* response,
                    bool retry) {
    return Call(rpc, request, response, retry, options_.timeout);
  }
  // A context for one call: deadline `timeout` from now, and the token. The
  // one place calls are given their metadata.
  void PrepareContext(grpc::ClientContext& ctx, absl::Duration timeout) const;
  // What read-your-writes asks for: last_log_position(), or 0 when off.
  uint64_t MinLogPosition() const;
  // Calls send(begin, end, index, count) for the `count` consecutive runs of
  // keys that fit one request; on failure returns its status, telling how
  // many keys went before.
  template <typename Send>
  absl::Status ForEachRequest(absl::Span<const std::string_view> keys, Send send);
  // Sends `keys` in as many copies of `prototype` (filter name and flags set)
  // as the limits need, calling `rpc`; append(response, out) collects results.
  // Writes (Insert, Delete) get request ids derived from `request_id` (a
  // random one if empty).
  template <typename Result, typename Request, typename Response, typename Append>
  absl::StatusOr<std::vector<Result>> Batched(const Request& prototype,
                                              absl::Span<const std::string_view> keys,
                                              Rpc<Request, Response> rpc, Append append,
                                              std::string_view request_id = {});

  ClientOptions options_;
  absl::Status connect_status_;
  std::atomic<uint64_t> last_log_position_{0};
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::FilterService::Stub> stub_;
  Mutex limits_mu_;
  std::optional<Limits> limits_ ABSL_GUARDED_BY(limits_mu_);
};

// grpc::Status -> absl::Status, same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

// The gRPC target Connect makes of `target`:
// - one target ("host:port", "dns:///svc:50051", "ipv4:...", "unix:..."), or
//   a list that already names its scheme: as it is;
// - a comma-separated list of HOST:PORT ("10.0.0.1:50051,10.0.0.2:50051",
//   "[::1]:50051,[::1]:50052", "a.example:50051,b.example:50051"): an
//   "ipv4:" (or "ipv6:") list of the addresses. Host names are resolved
//   once, here, with getaddrinfo: every address of every name is used, in
//   one family (IPv4 if every entry has an IPv4 address, else IPv6). A name
//   that does not resolve is left out if another entry resolves (a replica
//   that is down may have no DNS record); use a "dns:///" target to follow
//   changes of the names.
// INVALID_ARGUMENT for an entry that is not HOST:PORT or a list whose
// entries have no family in common; UNAVAILABLE when no entry resolves.
absl::StatusOr<std::string> ChannelTarget(const std::string& target);

}  // namespace cuckoo::client

#endif  // CUCKOO_CLIENT_CUCKOO_CLIENT_H_
