// LossyProxy: an in-process FilterService in front of a real cuckood that
// forwards every unary call to it and can lose the answers of writes. A lost
// answer is one the server gave (the write was applied) replaced by a
// failure of the test's choosing, as a client sees when the answer never
// comes back: UNAVAILABLE (a broken connection), RESOURCE_EXHAUSTED
// "Received RST_STREAM with error code 11" (a stream the server's transport
// reset), DEADLINE_EXCEEDED. It records every Insert and Delete attempt that
// reaches it, with its request_id: each attempt of gRPC's retry policy is a
// call of its own here, so tests see exactly what a client sent on each.
//
//   LossyProxy proxy(server_address);
//   proxy.LoseAnswers(1, grpc::Status(grpc::StatusCode::UNAVAILABLE, "lost"));
//   auto client = client::Client::Connect(proxy.address());
//   client->Insert("f", keys);           // applied, answer lost, retried
//   proxy.attempts();                    // two Inserts, one request_id
//
// Streams (ExportFilter, ImportFilter) are not forwarded (UNIMPLEMENTED).
#ifndef CUCKOO_TESTS_UTIL_LOSSY_PROXY_H_
#define CUCKOO_TESTS_UTIL_LOSSY_PROXY_H_

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"

namespace cuckoo::testing {

class LossyProxy final : public cuckoo::v1::FilterService::Service {
 public:
  // One Insert or Delete call that reached the proxy.
  struct Attempt {
    std::string method;  // "Insert" or "Delete".
    std::string request_id;
    std::vector<std::string> keys;
    grpc::Status server;    // What the server answered.
    grpc::Status answered;  // What the proxy answered: the server's, or a loss.
  };

  // Listens on 127.0.0.1 (a port of the kernel's choice), forwarding to the
  // cuckood at `upstream` ("host:port").
  explicit LossyProxy(const std::string& upstream)
      : upstream_(cuckoo::v1::FilterService::NewStub(
            grpc::CreateChannel(upstream, grpc::InsecureChannelCredentials()))) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~LossyProxy() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  LossyProxy(const LossyProxy&) = delete;
  LossyProxy& operator=(const LossyProxy&) = delete;

  const std::string& address() const { return address_; }

  // The next `n` Insert and Delete calls that the server answers OK are
  // answered `lost` instead (the server applied them).
  void LoseAnswers(int n, grpc::Status lost) {
    absl::MutexLock lock(&mu_);
    to_lose_ = n;
    lost_ = std::move(lost);
  }

  // Every Insert and Delete call so far, in order of arrival.
  std::vector<Attempt> attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }
  void ClearAttempts() {
    absl::MutexLock lock(&mu_);
    attempts_.clear();
  }

  grpc::Status Insert(grpc::ServerContext* ctx, const cuckoo::v1::InsertRequest* req,
                      cuckoo::v1::InsertResponse* resp) override {
    return Write("Insert", req->request_id(), req->keys(), Forward(&Stub::Insert, ctx, *req, resp));
  }
  grpc::Status Delete(grpc::ServerContext* ctx, const cuckoo::v1::DeleteRequest* req,
                      cuckoo::v1::DeleteResponse* resp) override {
    return Write("Delete", req->request_id(), req->keys(), Forward(&Stub::Delete, ctx, *req, resp));
  }
  grpc::Status Lookup(grpc::ServerContext* ctx, const cuckoo::v1::LookupRequest* req,
                      cuckoo::v1::LookupResponse* resp) override {
    return Forward(&Stub::Lookup, ctx, *req, resp);
  }
  grpc::Status Count(grpc::ServerContext* ctx, const cuckoo::v1::CountRequest* req,
                     cuckoo::v1::CountResponse* resp) override {
    return Forward(&Stub::Count, ctx, *req, resp);
  }
  grpc::Status CreateFilter(grpc::ServerContext* ctx, const cuckoo::v1::CreateFilterRequest* req,
                            cuckoo::v1::CreateFilterResponse* resp) override {
    return Forward(&Stub::CreateFilter, ctx, *req, resp);
  }
  grpc::Status GetFilter(grpc::ServerContext* ctx, const cuckoo::v1::GetFilterRequest* req,
                         cuckoo::v1::GetFilterResponse* resp) override {
    return Forward(&Stub::GetFilter, ctx, *req, resp);
  }
  grpc::Status ListFilters(grpc::ServerContext* ctx, const cuckoo::v1::ListFiltersRequest* req,
                           cuckoo::v1::ListFiltersResponse* resp) override {
    return Forward(&Stub::ListFilters, ctx, *req, resp);
  }
  grpc::Status DropFilter(grpc::ServerContext* ctx, const cuckoo::v1::DropFilterRequest* req,
                          cuckoo::v1::DropFilterResponse* resp) override {
    return Forward(&Stub::DropFilter, ctx, *req, resp);
  }
  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const cuckoo::v1::GetServerInfoRequest* req,
                             cuckoo::v1::GetServerInfoResponse* resp) override {
    return Forward(&Stub::GetServerInfo, ctx, *req, resp);
  }
  grpc::Status Snapshot(grpc::ServerContext* ctx, const cuckoo::v1::SnapshotRequest* req,
                        cuckoo::v1::SnapshotResponse* resp) override {
    return Forward(&Stub::Snapshot, ctx, *req, resp);
  }

 private:
  using Stub = cuckoo::v1::FilterService::Stub;

  // The call to the server, with the caller's deadline.
  template <typename Request, typename Response>
  grpc::Status Forward(grpc::Status (Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
                       grpc::ServerContext* ctx, const Request& req, Response* resp) {
    std::unique_ptr<grpc::ClientContext> forward = grpc::ClientContext::FromServerContext(*ctx);
    return (upstream_.get()->*rpc)(forward.get(), req, resp);
  }

  template <typename Keys>
  grpc::Status Write(const char* method, const std::string& request_id, const Keys& keys,
                     const grpc::Status& server) {
    absl::MutexLock lock(&mu_);
    grpc::Status answer = server;
    if (server.ok() && to_lose_ > 0) {
      --to_lose_;
      answer = lost_;
    }
    attempts_.push_back(Attempt{.method = method,
                                .request_id = request_id,
                                .keys = std::vector<std::string>(keys.begin(), keys.end()),
                                .server = server,
                                .answered = answer});
    return answer;
  }

  std::unique_ptr<Stub> upstream_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  mutable absl::Mutex mu_;
  int to_lose_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status lost_ ABSL_GUARDED_BY(mu_);
  std::vector<Attempt> attempts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_LOSSY_PROXY_H_
