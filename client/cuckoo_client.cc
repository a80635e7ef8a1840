#include "client/cuckoo_client.h"

#include <arpa/inet.h>
#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/access_file.h"
#include "base/file.h"

namespace cuckoo::client {

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

namespace {

// The server's limit on request ids (proto: InsertRequest.request_id).
constexpr size_t kMaxRequestIdBytes = 128;

// The client's own retries, after gRPC's (kServiceConfig): backoff from
// kFirstBackoff doubling to kMaxBackoff, each wait a random time between
// half and all of it, so that clients that failed together do not come back
// together.
constexpr absl::Duration kFirstBackoff = absl::Milliseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Seconds(2);

// What the client's own retries retry: UNAVAILABLE, and RESOURCE_EXHAUSTED
// from the transport, whose message is gRPC's "Received RST_STREAM with
// error code 11" (the server's transport memory was full, and gRPC reset the
// stream: a retry after a backoff may find room). cuckood's own
// RESOURCE_EXHAUSTED (a limit reached) comes back at once: a repeat would be
// refused the same way. Both may follow a write that was applied; the
// client retries a write only with its request id, so the server applies it
// once. Not DEADLINE_EXCEEDED: the deadline is the caller's bound on an
// attempt (ClientOptions::timeout), and a server that took that long would
// likely take it again; nor CANCELLED.
bool Retriable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          absl::StartsWith(s.error_message(), "Received RST_STREAM"));
}

// Round-robin over every address of the target, and gRPC's retries of
// UNAVAILABLE: the failed attempt's successor is picked anew, so it goes to
// the next replica. gRPC caps maxAttempts at 5. Only the methods a repeat
// cannot harm: reads, and Insert/Delete (which this client always sends with
// a request id). CreateFilter, DropFilter and Snapshot are left to Call's
// own policy (a repeated drop would answer NOT_FOUND for a drop that
// happened).
constexpr char kServiceConfig[] = R"json({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "cuckoo.v1.FilterService", "method": "Lookup"},
             {"service": "cuckoo.v1.FilterService", "method": "Count"},
             {"service": "cuckoo.v1.FilterService", "method": "Insert"},
             {"service": "cuckoo.v1.FilterService", "method": "Delete"},
             {"service": "cuckoo.v1.FilterService", "method": "GetFilter"},
             {"service": "cuckoo.v1.FilterService", "method": "ListFilters"},
             {"service": "cuckoo.v1.FilterService", "method": "GetServerInfo"}],
    "retryPolicy": {
      "maxAttempts": 5,
      "initialBackoff": "0.05s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
})json";

bool HasScheme(absl::string_view target) {
  if (absl::StrContains(target, "://")) return true;
  for (absl::string_view scheme : {"dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:"}) {
    if (absl::StartsWith(target, scheme)) return true;
  }
  return false;
}

// The addresses of one HOST:PORT entry, as "a.b.c.d:port" and "[v6]:port".
struct EntryAddresses {
  std::vector<std::string> v4, v6;
};

absl::StatusOr<EntryAddresses> ResolveEntry(absl::string_view entry, const std::string& target) {
  std::string host, port;
  if (absl::StartsWith(entry, "[")) {
    const size_t close = entry.find(']');
    if (close == absl::string_view::npos || entry.substr(close + 1, 1) != ":") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "target \"%s\": \"%s\" is not HOST:PORT ([IPV6]:PORT for an IPv6 address)", target,
          entry));
    }
    host = std::string(entry.substr(1, close - 1));
    port = std::string(entry.substr(close + 2));
  } else {
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos || entry.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "target \"%s\": \"%s\" is not HOST:PORT ([IPV6]:PORT for an IPv6 address)", target,
          entry));
    }
    host = std::string(entry.substr(0, colon));
    port = std::string(entry.substr(colon + 1));
  }
  uint32_t port_number = 0;
  if (host.empty() || !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target \"%s\": \"%s\" is not HOST:PORT", target, entry));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); err != 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot resolve \"%s\": %s", host, gai_strerror(err)));
  }
  EntryAddresses out;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text,
                sizeof text);
      out.v4.push_back(absl::StrCat(text, ":", port_number));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, text,
                sizeof text);
      out.v6.push_back(absl::StrCat("[", text, "]:", port_number));
    }
  }
  freeaddrinfo(found);
  return out;
}

// Appends the addresses not in `out` yet.
void AppendNew(const std::vector<std::string>& addresses, std::vector<std::string>& out) {
  for (const std::string& a : addresses) {
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
  }
}

// The whole of file `path` (`what` names it in errors: "CA certificate").
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* what) {
  absl::StatusOr<std::string> contents = ReadFileToString(path);
  if (!contents.ok()) {
    return absl::Status(
        contents.status().code(),
        absl::StrFormat("cannot open %s file \"%s\": %s", what, path, contents.status().message()));
  }
  // gRPC would only fail the handshake, later and vaguely, on a DER file or
  // a wrong path that happens to exist.
  if (!absl::StrContains(*contents, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s file \"%s\" is not PEM (no \"-----BEGIN \" line)", what, path));
  }
  return contents;
}

}  // namespace

absl::StatusOr<TlsOptions> LoadTlsFiles(const std::string& ca_path, const std::string& cert_path,
                                        const std::string& key_path) {
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError(
        cert_path.empty()
            ? absl::StrFormat("private key file \"%s\" given without its certificate", key_path)
            : absl::StrFormat("certificate file \"%s\" given without its private key", cert_path));
  }
  TlsOptions tls;
  tls.enabled = true;
  if (!ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(ca_path, "CA certificate");
    if (!ca.ok()) return ca.status();
    tls.root_certs_pem = *std::move(ca);
  }
  if (!cert_path.empty()) {
    absl::StatusOr<std::string> cert = ReadPemFile(cert_path, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPemFile(key_path, "private key");
    if (!key.ok()) return key.status();
    tls.cert_chain_pem = *std::move(cert);
    tls.private_key_pem = *std::move(key);
  }
  return tls;
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials(const TlsOptions& tls,
                                                             grpc::ChannelArguments& args) {
  if (!tls.enabled) return grpc::InsecureChannelCredentials();
  if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.root_certs_pem;
  ssl.pem_cert_chain = tls.cert_chain_pem;
  ssl.pem_private_key = tls.private_key_pem;
  return grpc::SslCredentials(ssl);
}

absl::Status ValidateToken(std::string_view token) {
  if (token.empty() || token.size() > kMaxAccessTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the token is %u characters; a token is 1 to %u of the characters ! to ~",
                        token.size(), kMaxAccessTokenBytes));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = token[i];
    if (c < '!' || c > '~') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the token has character 0x%02x at position %u; a token is 1 to %u of the characters "
          "! to ~ (no spaces or line breaks)",
          c, i + 1, kMaxAccessTokenBytes));
    }
  }
  return absl::OkStatus();
}

void AddToken(std::string_view token, grpc::ClientContext& ctx) {
  if (token.empty()) return;
  ctx.AddMetadata(kAuthorizationMetadataKey,
                  absl::StrCat("Bearer ", absl::string_view(token.data(), token.size())));
}

absl::StatusOr<std::string> ChannelTarget(const std::string& target) {
  if (!absl::StrContains(target, ',') || HasScheme(target)) return target;
  std::vector<EntryAddresses> resolved;
  absl::Status unresolved;
  for (absl::string_view entry : absl::StrSplit(target, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    absl::StatusOr<EntryAddresses> addresses = ResolveEntry(entry, target);
    if (addresses.ok()) {
      resolved.push_back(*std::move(addresses));
    } else if (addresses.status().code() == absl::StatusCode::kUnavailable) {
      unresolved = addresses.status();  // Left out, if another one resolves.
    } else {
      return addresses.status();
    }
  }
  if (resolved.empty()) {
    return absl::UnavailableError(
        absl::StrFormat("target \"%s\": no entry resolves (%s)", target, unresolved.message()));
  }
  bool all_v4 = true, all_v6 = true;
  for (const EntryAddresses& e : resolved) {
    all_v4 &= !e.v4.empty();
    all_v6 &= !e.v6.empty();
  }
  if (!all_v4 && !all_v6) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "target \"%s\" mixes IPv4-only and IPv6-only entries; one channel takes addresses of "
        "one family",
        target));
  }
  std::vector<std::string> addresses;
  for (const EntryAddresses& e : resolved) AppendNew(all_v4 ? e.v4 : e.v6, addresses);
  return absl::StrCat(all_v4 ? "ipv4:" : "ipv6:", absl::StrJoin(addresses, ","));
}

std::unique_ptr<Client> Client::Connect(const std::string& target, ClientOptions options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  args.SetServiceConfigJSON(kServiceConfig);
  // Ours, not one a DNS TXT record might carry.
  args.SetInt(GRPC_ARG_SERVICE_CONFIG_DISABLE_RESOLUTION, 1);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  // gRPC retries a call only while it holds the whole request for a replay:
  // a request larger than the retry buffer is committed to its first attempt
  // and its UNAVAILABLE comes back unretried, silently. C-core's per-call
  // limit is 256 KiB by default, far below a batch of this client (up to a
  // quarter of the server's message limit, 4 MiB by default, plus framing,
  // or one key of any size); "grpc.retry_buffer_size" is the channel-wide
  // total in other gRPC implementations (grpc-js: 16 MiB), unknown to
  // C-core, which ignores it. Both are set to gRPC's largest message, so
  // every request this client can send is retried: the buffer only keeps the
  // serialized request, which the call holds anyway, until the response.
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, std::numeric_limits<int>::max());
  args.SetInt("grpc.retry_buffer_size", std::numeric_limits<int>::max());
  // A replica back from a restart is connected to again within a second or
  // two (gRPC's default backoff grows to two minutes), which matters most
  // for a single server.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  std::shared_ptr<grpc::ChannelCredentials> credentials = ChannelCredentials(options.tls, args);
  absl::StatusOr<std::string> channel_target = ChannelTarget(target);
  const bool half_a_key_pair = options.tls.enabled && options.tls.cert_chain_pem.empty() !=
                                                          options.tls.private_key_pem.empty();
  auto client = std::make_unique<Client>(
      grpc::CreateCustomChannel(channel_target.ok() ? *channel_target : target, credentials, args),
      options);
  if (client->connect_status_.ok() && half_a_key_pair) {
    client->connect_status_ = absl::InvalidArgumentError(
        options.tls.private_key_pem.empty()
            ? "TLS options: a client certificate without its private key"
            : "TLS options: a private key without its client certificate");
  }
  if (client->connect_status_.ok()) client->connect_status_ = channel_target.status();
  return client;
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(options), channel_(std::move(channel)), stub_(v1::FilterService::NewStub(channel_)) {
  // gRPC would refuse such a metadata value on every call, less clearly.
  if (!options_.token.empty()) connect_status_ = ValidateToken(options_.token);
}

void Client::PrepareContext(grpc::ClientContext& ctx, absl::Duration timeout) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  AddCallMetadata(ctx);
}

std::string Client::NewRequestId() {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
}

void Client::AdvanceLogPosition(uint64_t position) {
  uint64_t seen = last_log_position_.load(std::memory_order_relaxed);
  while (seen < position &&
         !last_log_position_.compare_exchange_weak(seen, position, std::memory_order_acq_rel)) {
  }
}

uint64_t Client::MinLogPosition() const {
  return options_.read_your_writes ? last_log_position() : 0;
}

template <typename Request, typename Response>
absl::Status Client::Call(Rpc<Request, Response> rpc, const Request& request, Response* response,
                          bool retry, absl::Duration timeout) {
  if (!connect_status_.ok()) return connect_status_;
  const absl::Time start = absl::Now();
  const absl::Time retry_until = start + options_.retry_timeout;
  absl::Duration backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    PrepareContext(ctx, timeout);
    response->Clear();
    const grpc::Status s = (stub_.get()->*rpc)(&ctx, request, response);
    if (s.ok()) return absl::OkStatus();
    const absl::Duration left = retry_until - absl::Now();
    if (!retry || !Retriable(s) || left <= absl::ZeroDuration()) {
      absl::Status status = FromGrpcStatus(s);
      if (attempt == 1) return status;
      return absl::Status(
          status.code(), absl::StrFormat("%s (after %d attempts in %s)", status.message(), attempt,
                                         absl::FormatDuration(absl::Trunc(absl::Now() - start,
                                                                          absl::Milliseconds(1)))));
    }
    thread_local absl::BitGen gen;
    absl::SleepFor(std::min(left, backoff * absl::Uniform(gen, 0.5, 1.0)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::StatusOr<v1::CreateFilterResponse> Client::CreateFilter(
    const v1::CreateFilterRequest& request) {
  v1::CreateFilterResponse resp;
  // A repeat of a create that was applied fails ALREADY_EXISTS, unless
  // if_not_exists makes it idempotent.
  if (absl::Status s = Call(&v1::FilterService::Stub::CreateFilter, request, &resp,
                            /*retry=*/request.if_not_exists());
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return resp;
}

absl::StatusOr<v1::FilterInfo> Client::GetFilter(std::string_view name) {
  v1::GetFilterRequest req;
  req.set_name(std::string(name));
  req.set_min_log_position(MinLogPosition());
  v1::GetFilterResponse resp;
  if (absl::Status s = Call(&v1::FilterService::Stub::GetFilter, req, &resp, /*retry=*/true);
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return std::move(*resp.mutable_filter());
}

absl::StatusOr<std::vector<v1::FilterInfo>> Client::ListFilters() {
  v1::ListFiltersRequest req;
  req.set_min_log_position(MinLogPosition());
  v1::ListFiltersResponse resp;
  if (absl::Status s = Call(&v1::FilterService::Stub::ListFilters, req, &resp, /*retry=*/true);
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return std::vector<v1::FilterInfo>(std::make_move_iterator(resp.mutable_filters()->begin()),
                                     std::make_move_iterator(resp.mutable_filters()->end()));
}

absl::StatusOr<v1::SetFilterExpiryResponse> Client::SetFilterExpiry(
    const v1::SetFilterExpiryRequest& request) {
  v1::SetFilterExpiryResponse resp;
  if (absl::Status s =
          Call(&v1::FilterService::Stub::SetFilterExpiry, request, &resp, /*retry=*/false);
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return resp;
}

absl::StatusOr<v1::RenameFilterResponse> Client::RenameFilter(std::string_view name,
                                                              std::string_view new_name,
                                                              bool replace) {
  v1::RenameFilterRequest req;
  req.set_name(std::string(name));
  req.set_new_name(std::string(new_name));
  req.set_replace(replace);
  v1::RenameFilterResponse resp;
  // Never retried: a repeat of a rename that was applied fails NOT_FOUND,
  // or renames a filter created again under the name meanwhile.
  if (absl::Status s = Call(&v1::FilterService::Stub::RenameFilter, req, &resp, /*retry=*/false);
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return resp;
}

absl::StatusOr<uint64_t> Client::DropFilter(std::string_view name) {
  v1::DropFilterRequest req;
  req.set_name(std::string(name));
  v1::DropFilterResponse resp;
  // Never retried: a repeat of a drop that was applied fails NOT_FOUND, or
  // drops a filter created again under the name meanwhile.
  if (absl::Status s = Call(&v1::FilterService::Stub::DropFilter, req, &resp, /*retry=*/false);
      !s.ok()) {
    return s;
  }
  AdvanceLogPosition(resp.log_position());
  return resp.freed_bytes();
}

absl::StatusOr<v1::SnapshotResponse> Client::Snapshot(std::string_view filter, bool changed_only,
                                                      absl::Duration timeout) {
  v1::SnapshotRequest req;
  req.set_filter(std::string(filter));
  req.set_changed_only(changed_only);
  v1::SnapshotResponse resp;
  if (absl::Status s =
          Call(&v1::FilterService::Stub::Snapshot, req, &resp, /*retry=*/true, timeout);
      !s.ok()) {
    return s;
  }
  return resp;
}

absl::StatusOr<v1::GetServerInfoResponse> Client::ServerInfo() {
  v1::GetServerInfoResponse resp;
  if (absl::Status s = Call(&v1::FilterService::Stub::GetServerInfo, v1::GetServerInfoRequest(),
                            &resp, /*retry=*/true);
      !s.ok()) {
    return s;
  }
  return resp;
}

namespace {

// What an import chunk may carry beyond its data (the name, framing).
constexpr uint64_t kImportChunkOverheadBytes = 1024;
constexpr size_t kTransferChunkBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<Client::ExportInfo> Client::ExportFilter(std::string_view name,
                                                        const ExportSink& sink,
                                                        absl::Duration timeout) {
  if (!connect_status_.ok()) return connect_status_;
  v1::ExportFilterRequest req;
  req.set_name(std::string(name));
  const absl::Time start = absl::Now();
  const absl::Time retry_until = start + options_.retry_timeout;
  absl::Duration backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    PrepareContext(ctx, timeout);
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader =
        stub_->ExportFilter(&ctx, req);
    ExportInfo info;
    uint64_t received = 0;
    bool first = true;
    absl::Status sink_status;
    v1::ExportFilterChunk chunk;
    while (reader->Read(&chunk)) {
      if (first) {
        first = false;
        info.total_bytes = chunk.total_bytes();
        info.items = chunk.items();
        info.log_position = chunk.log_position();
        info.filter_id = chunk.filter_id();
        info.filter = std::move(*chunk.mutable_filter());
      }
      received += chunk.data().size();
      if (received > info.total_bytes) {
        sink_status = absl::DataLossError(absl::StrFormat(
            "the export sent more than the %u bytes it announced", info.total_bytes));
      } else {
        sink_status = sink(chunk.data());
      }
      if (!sink_status.ok()) {
        ctx.TryCancel();
        while (reader->Read(&chunk)) {
        }
        (void)reader->Finish();
        return sink_status;
      }
    }
    const grpc::Status s = reader->Finish();
    if (s.ok()) {
      if (first || received != info.total_bytes) {
        return absl::DataLossError(absl::StrFormat(
            "the export ended after %u of the %u bytes it announced", received, info.total_bytes));
      }
      AdvanceLogPosition(info.log_position);
      return info;
    }
    const absl::Duration left = retry_until - absl::Now();
    if (!first || !Retriable(s) || left <= absl::ZeroDuration()) {
      absl::Status status = FromGrpcStatus(s);
      if (attempt == 1) return status;
      return absl::Status(status.code(),
                          absl::StrFormat("%s (after %d attempts)", status.message(), attempt));
    }
    thread_local absl::BitGen gen;
    absl::SleepFor(std::min(left, backoff * absl::Uniform(gen, 0.5, 1.0)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

absl::StatusOr<Client::ExportInfo> Client::ExportFilter(std::string_view name, std::ostream& out,
                                                        absl::Duration timeout) {
  return ExportFilter(
      name,
      [&out](std::string_view bytes) {
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!out) return absl::DataLossError("cannot write the exported snapshot to the stream");
        return absl::OkStatus();
      },
      timeout);
}

absl::StatusOr<v1::ImportFilterResponse> Client::ImportFilter(std::string_view name,
                                                              const ImportSource& source,
                                                              uint64_t total_bytes,
                                                              absl::Duration timeout) {
  if (!connect_status_.ok()) return connect_status_;
  // Chunks the server's messages can hold.
  absl::StatusOr<v1::GetServerInfoResponse> info = ServerInfo();
  if (!info.ok()) return info.status();
  const size_t chunk_bytes = static_cast<size_t>(
      std::clamp<uint64_t>(info->max_message_bytes() > kImportChunkOverheadBytes
                               ? info->max_message_bytes() - kImportChunkOverheadBytes
                               : 1,
                           1, kTransferChunkBytes));
  grpc::ClientContext ctx;
  PrepareContext(ctx, timeout);
  v1::ImportFilterResponse resp;
  std::unique_ptr<grpc::ClientWriter<v1::ImportFilterChunk>> writer =
      stub_->ImportFilter(&ctx, &resp);
  v1::ImportFilterChunk chunk;
  chunk.set_name(std::string(name));
  chunk.set_total_bytes(total_bytes);
  absl::Status local;
  for (bool first = true;; first = false) {
    std::string* data = chunk.mutable_data();
    data->resize(chunk_bytes);
    size_t filled = 0;
    // A whole chunk (or the rest of the source): few, full messages.
    while (filled < chunk_bytes) {
      absl::StatusOr<size_t> n =
          source(absl::Span<char>(data->data() + filled, chunk_bytes - filled));
      if (!n.ok()) {
        local = n.status();
        break;
      }
      if (*n == 0) break;
      filled += *n;
    }
    if (!local.ok()) break;
    data->resize(filled);
    if (filled == 0 && !first) break;
    if (!writer->Write(chunk)) break;  // The server has answered already: Finish says how.
    if (filled < chunk_bytes) break;   // The end of the source.
    chunk.Clear();
  }
  if (!local.ok()) {
    // Never let the server take a part for the whole.
    ctx.TryCancel();
    (void)writer->Finish();
    return local;
  }
  writer->WritesDone();
  if (absl::Status s = FromGrpcStatus(writer->Finish()); !s.ok()) return s;
  AdvanceLogPosition(resp.log_position());
  return resp;
}

absl::StatusOr<v1::ImportFilterResponse> Client::ImportFilter(std::string_view name,
                                                              std::istream& in,
                                                              absl::Duration timeout) {
  return ImportFilter(
      name,
      [&in](absl::Span<char> buffer) -> absl::StatusOr<size_t> {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        if (in.bad()) return absl::DataLossError("cannot read the snapshot to import");
        return static_cast<size_t>(in.gcount());
      },
      /*total_bytes=*/0, timeout);
}

absl::StatusOr<Client::Limits> Client::BatchLimits() {
  MutexLock lock(&limits_mu_);
  if (limits_) return *limits_;
  Limits limits{options_.max_batch_keys, options_.max_batch_bytes};
  if (limits.keys == 0 || limits.bytes == 0) {
    absl::StatusOr<v1::GetServerInfoResponse> info = ServerInfo();
    if (!info.ok()) return info.status();
    if (limits.keys == 0) limits.keys = std::max<uint32_t>(1, info->max_batch_keys());
    if (limits.bytes == 0) limits.bytes = std::max<uint64_t>(1, info->max_message_bytes() / 4);
  }
  limits_ = limits;
  return limits;
}

namespace {

// The server names a bad key by its index in the request ("keys[12] is
// empty"); a request that started at key `offset` of the caller's keys makes
// that keys[offset + 12], the index the caller knows.
std::string ShiftKeyIndex(absl::string_view message, size_t offset) {
  absl::string_view rest = message;
  size_t index = 0;
  const size_t close = rest.find(']');
  if (!absl::ConsumePrefix(&rest, "keys[") || close == absl::string_view::npos ||
      !absl::SimpleAtoi(rest.substr(0, close - 5), &index)) {
    return std::string(message);
  }
  return absl::StrCat("keys[", index + offset, message.substr(close));
}

}  // namespace

template <typename Send>
absl::Status Client::ForEachRequest(absl::Span<const std::string_view> keys, Send send) {
  if (keys.empty()) return absl::OkStatus();
  absl::StatusOr<Limits> limits = BatchLimits();
  if (!limits.ok()) return limits.status();
  // All the runs first: a request's id depends on how many there are.
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t begin = 0; begin < keys.size();) {
    // At least one key per request, however long: the server judges it.
    size_t end = begin + 1;
    uint64_t bytes = keys[begin].size();
    while (end < keys.size() && end - begin < limits->keys &&
           bytes + keys[end].size() <= limits->bytes) {
      bytes += keys[end].size();
      ++end;
    }
    runs.emplace_back(begin, end);
    begin = end;
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto [begin, end] = runs[i];
    if (absl::Status s = send(begin, end, i, runs.size()); !s.ok()) {
      if (begin == 0) return s;
      return absl::Status(s.code(),
                          absl::StrFormat("%s (the first %u of %u keys were applied)",
                                          ShiftKeyIndex(s.message(), begin), begin, keys.size()));
    }
  }
  return absl::OkStatus();
}

template <typename Result, typename Request, typename Response, typename Append>
absl::StatusOr<std::vector<Result>> Client::Batched(const Request& prototype,
                                                    absl::Span<const std::string_view> keys,
                                                    Rpc<Request, Response> rpc, Append append,
                                                    std::string_view request_id) {
  constexpr bool kWrite =
      std::is_same_v<Request, v1::InsertRequest> || std::is_same_v<Request, v1::DeleteRequest>;
  const std::string base_id = !kWrite              ? ""
                              : request_id.empty() ? NewRequestId()
                                                   : std::string(request_id);
  std::vector<Result> out;
  out.reserve(keys.size());
  absl::Status s = ForEachRequest(keys, [&](size_t begin, size_t end, size_t index, size_t count) {
    Request req = prototype;
    if constexpr (kWrite) {
      // Each request of a split batch is a request of its own to the server.
      std::string id = count == 1 ? base_id : absl::StrCat(base_id, ".", index);
      if (id.size() > kMaxRequestIdBytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "request_id \"%s\" is %u characters: with the suffix \".%u\" of the last of the %u "
            "requests its batch is split into it would be over the limit of %u",
            base_id, base_id.size(), count - 1, count, kMaxRequestIdBytes));
      }
      req.set_request_id(std::move(id));
    }
    req.set_min_log_position(MinLogPosition());
    req.mutable_keys()->Reserve(static_cast<int>(end - begin));
    for (size_t i = begin; i < end; ++i) req.add_keys(std::string(keys[i]));
    Response resp;
    // A write is retried only with its request id: the server applies it once.
    if (absl::Status c = Call(rpc, req, &resp, /*retry=*/!kWrite || !base_id.empty()); !c.ok()) {
      return c;
    }
    AdvanceLogPosition(resp.log_position());
    const size_t before = out.size();
    append(resp, out);
    if (out.size() - before != end - begin) {
      return absl::InternalError(
          absl::StrFormat("the server answered %u results for a request of %u keys",
                          out.size() - before, end - begin));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<v1::InsertResult>> Client::Insert(
    std::string_view filter, absl::Span<const std::string_view> keys, bool if_absent,
    std::string_view request_id) {
  v1::InsertRequest req;
  req.set_filter(std::string(filter));
  req.set_if_absent(if_absent);
  return Batched<v1::InsertResult>(
      req, keys, &v1::FilterService::Stub::Insert,
      [](const v1::InsertResponse& resp, std::vector<v1::InsertResult>& out) {
        for (int r : resp.results()) out.push_back(static_cast<v1::InsertResult>(r));
      },
      request_id);
}

absl::StatusOr<std::vector<bool>> Client::Lookup(std::string_view filter,
                                                 absl::Span<const std::string_view> keys) {
  v1::LookupRequest req;
  req.set_filter(std::string(filter));
  return Batched<bool>(req, keys, &v1::FilterService::Stub::Lookup,
                       [](const v1::LookupResponse& resp, std::vector<bool>& out) {
                         out.insert(out.end(), resp.present().begin(), resp.present().end());
                       });
}

absl::StatusOr<std::vector<v1::DeleteResult>> Client::Delete(
    std::string_view filter, absl::Span<const std::string_view> keys, std::string_view request_id) {
  v1::DeleteRequest req;
  req.set_filter(std::string(filter));
  return Batched<v1::DeleteResult>(
      req, keys, &v1::FilterService::Stub::Delete,
      [](const v1::DeleteResponse& resp, std::vector<v1::DeleteResult>& out) {
        for (int r : resp.results()) out.push_back(static_cast<v1::DeleteResult>(r));
      },
      request_id);
}

absl::StatusOr<std::vector<uint32_t>> Client::Count(std::string_view filter,
                                                    absl::Span<const std::string_view> keys) {
  v1::CountRequest req;
  req.set_filter(std::string(filter));
  return Batched<uint32_t>(req, keys, &v1::FilterService::Stub::Count,
                           [](const v1::CountResponse& resp, std::vector<uint32_t>& out) {
                             out.insert(out.end(), resp.counts().begin(), resp.counts().end());
                           });
}

}  // namespace cuckoo::client
