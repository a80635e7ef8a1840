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
// Errors are the server's gRPC status as an absl::Status with the same code
// and message (see proto/cuckoo/v1/filter_service.proto). A batch split into
// several requests is not atomic: if request k fails, the ones before it were
// applied, and the message says how many keys that was; a bad key is named
// by its index in the caller's keys.
//
// Thread safety: a Client may be used from any number of threads at once.
// Use the stub directly (stub()) for asynchronous calls.
#ifndef CUCKOO_CLIENT_CUCKOO_CLIENT_H_
#define CUCKOO_CLIENT_CUCKOO_CLIENT_H_

#include <grpcpp/channel.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/mutex.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"

namespace cuckoo::client {

namespace v1 = ::cuckoo::v1;

struct ClientOptions {
  // Deadline of each RPC (a large batch is several RPCs, each with this).
  absl::Duration timeout = absl::Seconds(30);
  // Most keys per request; 0: the server's max_batch_keys.
  uint32_t max_batch_keys = 0;
  // Most key bytes per request; 0: a quarter of the server's max message
  // size (a key costs a few bytes of framing on top of its own).
  uint64_t max_batch_bytes = 0;
  // Largest response accepted, in bytes.
  int max_receive_message_bytes = 64 << 20;
};

class Client {
 public:
  // A client for the cuckood at `target` ("host:port", or any gRPC target
  // such as "dns:///cuckood.svc:50051"), over an insecure channel. Connects
  // lazily: an unreachable server shows as UNAVAILABLE on the first call.
  static std::unique_ptr<Client> Connect(const std::string& target, ClientOptions options = {});
  // A client over an existing channel.
  explicit Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options = {});

  absl::StatusOr<v1::CreateFilterResponse> CreateFilter(const v1::CreateFilterRequest& request);
  absl::StatusOr<v1::FilterInfo> GetFilter(std::string_view name);
  absl::StatusOr<std::vector<v1::FilterInfo>> ListFilters();
  // Returns the bytes freed.
  absl::StatusOr<uint64_t> DropFilter(std::string_view name);
  // Writes snapshots of `filter` (all filters when empty) now and returns
  // when they are on the server's disk. `timeout` replaces the client's
  // per-call deadline (writing a large filter takes a while).
  absl::StatusOr<v1::SnapshotResponse> Snapshot(std::string_view filter, bool changed_only,
                                                absl::Duration timeout);

  // Per-key results in the order of `keys`.
  absl::StatusOr<std::vector<v1::InsertResult>> Insert(std::string_view filter,
                                                       absl::Span<const std::string_view> keys,
                                                       bool if_absent = false);
  absl::StatusOr<std::vector<bool>> Lookup(std::string_view filter,
                                           absl::Span<const std::string_view> keys);
  absl::StatusOr<std::vector<v1::DeleteResult>> Delete(std::string_view filter,
                                                       absl::Span<const std::string_view> keys);
  absl::StatusOr<std::vector<uint32_t>> Count(std::string_view filter,
                                              absl::Span<const std::string_view> keys);

  absl::StatusOr<v1::GetServerInfoResponse> ServerInfo();

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
  // Calls send(begin, end) for consecutive runs of keys that fit one request;
  // on failure returns its status, telling how many keys went before.
  template <typename Send>
  absl::Status ForEachRequest(absl::Span<const std::string_view> keys, Send send);
  // Sends `keys` in as many copies of `prototype` (filter name and flags set)
  // as the limits need, calling `rpc`; append(response, out) collects results.
  template <typename Result, typename Request, typename Response, typename Append>
  absl::StatusOr<std::vector<Result>> Batched(
      const Request& prototype, absl::Span<const std::string_view> keys,
      grpc::Status (v1::FilterService::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
      Append append);
  void SetDeadline(grpc::ClientContext& ctx) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::FilterService::Stub> stub_;
  Mutex limits_mu_;
  std::optional<Limits> limits_ ABSL_GUARDED_BY(limits_mu_);
};

// grpc::Status -> absl::Status, same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace cuckoo::client

#endif  // CUCKOO_CLIENT_CUCKOO_CLIENT_H_
