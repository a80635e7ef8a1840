#include "client/cuckoo_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace cuckoo::client {

absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

std::unique_ptr<Client> Client::Connect(const std::string& target, ClientOptions options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  return std::make_unique<Client>(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args), options);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::FilterService::NewStub(channel_)) {}

void Client::SetDeadline(grpc::ClientContext& ctx) const {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
}

absl::StatusOr<v1::CreateFilterResponse> Client::CreateFilter(
    const v1::CreateFilterRequest& request) {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::CreateFilterResponse resp;
  if (grpc::Status s = stub_->CreateFilter(&ctx, request, &resp); !s.ok()) {
    return FromGrpcStatus(s);
  }
  return resp;
}

absl::StatusOr<v1::FilterInfo> Client::GetFilter(std::string_view name) {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::GetFilterRequest req;
  req.set_name(std::string(name));
  v1::GetFilterResponse resp;
  if (grpc::Status s = stub_->GetFilter(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return std::move(*resp.mutable_filter());
}

absl::StatusOr<std::vector<v1::FilterInfo>> Client::ListFilters() {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::ListFiltersResponse resp;
  if (grpc::Status s = stub_->ListFilters(&ctx, v1::ListFiltersRequest(), &resp); !s.ok()) {
    return FromGrpcStatus(s);
  }
  return std::vector<v1::FilterInfo>(std::make_move_iterator(resp.mutable_filters()->begin()),
                                     std::make_move_iterator(resp.mutable_filters()->end()));
}

absl::StatusOr<uint64_t> Client::DropFilter(std::string_view name) {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::DropFilterRequest req;
  req.set_name(std::string(name));
  v1::DropFilterResponse resp;
  if (grpc::Status s = stub_->DropFilter(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp.freed_bytes();
}

absl::StatusOr<v1::SnapshotResponse> Client::Snapshot(std::string_view filter, bool changed_only,
                                                      absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::SnapshotRequest req;
  req.set_filter(std::string(filter));
  req.set_changed_only(changed_only);
  v1::SnapshotResponse resp;
  if (grpc::Status s = stub_->Snapshot(&ctx, req, &resp); !s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::GetServerInfoResponse> Client::ServerInfo() {
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::GetServerInfoResponse resp;
  if (grpc::Status s = stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &resp); !s.ok()) {
    return FromGrpcStatus(s);
  }
  return resp;
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
  size_t begin = 0;
  while (begin < keys.size()) {
    // At least one key per request, however long: the server judges it.
    size_t end = begin + 1;
    uint64_t bytes = keys[begin].size();
    while (end < keys.size() && end - begin < limits->keys &&
           bytes + keys[end].size() <= limits->bytes) {
      bytes += keys[end].size();
      ++end;
    }
    if (absl::Status s = send(begin, end); !s.ok()) {
      if (begin == 0) return s;
      return absl::Status(s.code(),
                          absl::StrFormat("%s (the first %u of %u keys were applied)",
                                          ShiftKeyIndex(s.message(), begin), begin, keys.size()));
    }
    begin = end;
  }
  return absl::OkStatus();
}

template <typename Result, typename Request, typename Response, typename Append>
absl::StatusOr<std::vector<Result>> Client::Batched(
    const Request& prototype, absl::Span<const std::string_view> keys,
    grpc::Status (v1::FilterService::Stub::*rpc)(grpc::ClientContext*, const Request&, Response*),
    Append append) {
  std::vector<Result> out;
  out.reserve(keys.size());
  absl::Status s = ForEachRequest(keys, [&](size_t begin, size_t end) {
    Request req = prototype;
    req.mutable_keys()->Reserve(static_cast<int>(end - begin));
    for (size_t i = begin; i < end; ++i) req.add_keys(std::string(keys[i]));
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    Response resp;
    if (grpc::Status g = (stub_.get()->*rpc)(&ctx, req, &resp); !g.ok()) {
      return FromGrpcStatus(g);
    }
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
    std::string_view filter, absl::Span<const std::string_view> keys, bool if_absent) {
  v1::InsertRequest req;
  req.set_filter(std::string(filter));
  req.set_if_absent(if_absent);
  return Batched<v1::InsertResult>(
      req, keys, &v1::FilterService::Stub::Insert,
      [](const v1::InsertResponse& resp, std::vector<v1::InsertResult>& out) {
        for (int r : resp.results()) out.push_back(static_cast<v1::InsertResult>(r));
      });
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
    std::string_view filter, absl::Span<const std::string_view> keys) {
  v1::DeleteRequest req;
  req.set_filter(std::string(filter));
  return Batched<v1::DeleteResult>(
      req, keys, &v1::FilterService::Stub::Delete,
      [](const v1::DeleteResponse& resp, std::vector<v1::DeleteResult>& out) {
        for (int r : resp.results()) out.push_back(static_cast<v1::DeleteResult>(r));
      });
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
