#include "server/cluster/peer_copy.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/snapshot.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

namespace fs = std::filesystem;

// A unary call's deadline; an export's is per filter (see below).
constexpr absl::Duration kCallTimeout = absl::Seconds(10);
// An export may take this long per GiB, plus a minute.
constexpr absl::Duration kExportPerGiB = absl::Minutes(2);

absl::Status PeerError(const std::string& address, absl::string_view what, const grpc::Status& s) {
  return absl::UnavailableError(
      absl::StrFormat("peer %s: %s failed: %s (%s)", address, what, s.error_message(),
                      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
}

}  // namespace

absl::StatusOr<PeerCopy> CopyFromPeer(const std::string& address, const std::string& identity,
                                      const PeerAccess& access, FilterRegistry* registry,
                                      const std::string& scratch_dir,
                                      const std::atomic<bool>& stopping) {
  grpc::ChannelArguments args;
  // Snapshots come in chunks of a few MiB; the server's own limit applies.
  args.SetMaxReceiveMessageSize(64 << 20);
  auto stub = v1::FilterService::NewStub(grpc::CreateCustomChannel(
      address,
      access.credentials != nullptr ? access.credentials : grpc::InsecureChannelCredentials(),
      args));
  PeerCopy copy;
  copy.address = address;
  uint64_t server_filters = 0;  // GetServerInfo's count

  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    if (!access.token.empty()) ctx.AddMetadata("authorization", "Bearer " + access.token);
    v1::GetServerInfoRequest req;
    v1::GetServerInfoResponse info;
    if (grpc::Status s = stub->GetServerInfo(&ctx, req, &info); !s.ok()) {
      return PeerError(address, "GetServerInfo", s);
    }
    if (info.mode() != "cluster" || info.cluster().log_identity() != identity) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "peer %s applies the log \"%s\", not \"%s\" as this replica", address,
          info.mode() == "cluster" ? info.cluster().log_identity() : "(none: a single node)",
          identity));
    }
    if (!info.cluster().problem().empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "peer %s cannot apply the stream itself: %s", address, info.cluster().problem()));
    }
    if (info.applied_log_position() == 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("peer %s has applied nothing yet", address));
    }
    if (info.cluster().log_check() != "agreed" || !info.cluster().log_digest_known()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "peer %s does not serve: its copy of the log is %s", address,
          info.cluster().log_check().empty() ? "not checked (a cuckood before the end-to-end check)"
                                             : info.cluster().log_check()));
    }
    server_filters = info.filters();
    copy.anchor = {info.cluster().log_digest_position(), info.cluster().log_digest()};
  }

  v1::ListFiltersResponse list;
  {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kCallTimeout);
    if (!access.token.empty()) ctx.AddMetadata("authorization", "Bearer " + access.token);
    if (grpc::Status s = stub->ListFilters(&ctx, v1::ListFiltersRequest(), &list); !s.ok()) {
      return PeerError(address, "ListFilters", s);
    }
  }
  // With an access file the peer lists only what this replica's token or
  // certificate may read: a partial list would pass for the whole and leave
  // this replica without the other filters. (A filter dropped between the
  // two calls also fails it; the bootstrap then tries again.)
  if (static_cast<uint64_t>(list.filters_size()) < server_filters) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "peer %s listed %d of its %u filters: the peer token (--peer-token-file) or this "
        "replica's certificate must have admin:* in the peer's access file",
        address, list.filters_size(), server_filters));
  }
  copy.listed_at = list.log_position();
  // From the digest's position at the latest: the copy's digest chains on
  // from there (entries before a filter's own positions are not applied
  // to it again).
  copy.resume_from = std::min(copy.listed_at, copy.anchor.position) + 1;

  std::error_code ec;
  fs::create_directories(scratch_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrFormat("cannot create directory %s: %s", scratch_dir, ec.message()));
  }
  for (const v1::FilterInfo& info : list.filters()) {
    if (stopping.load(std::memory_order_acquire)) {
      return absl::CancelledError("cuckood is stopping");
    }
    // Named by the name's hash: a name is any key ("a/b", "../x") and never
    // a path.
    const std::string path =
        (fs::path(scratch_dir) / absl::StrCat("peer.", SnapshotFileName(info.name()))).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrFormat("cannot create %s: %s", path, std::strerror(errno)));
    }
    struct Cleanup {
      int fd;
      const std::string& path;
      ~Cleanup() {
        if (fd >= 0) ::close(fd);
        ::unlink(path.c_str());
      }
    } cleanup{fd, path};

    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Minutes(1) + kExportPerGiB * (static_cast<double>(info.memory_bytes()) /
                                                          static_cast<double>(1 << 30)));
    if (!access.token.empty()) ctx.AddMetadata("authorization", "Bearer " + access.token);
    v1::ExportFilterRequest req;
    req.set_name(info.name());
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader =
        stub->ExportFilter(&ctx, req);
    v1::ExportFilterChunk chunk;
    uint64_t received = 0;
    absl::Status write_error;
    while (reader->Read(&chunk)) {
      if (stopping.load(std::memory_order_acquire)) {
        ctx.TryCancel();
        break;
      }
      const std::string& data = chunk.data();
      for (size_t done = 0; done < data.size() && write_error.ok();) {
        const ssize_t w = ::write(fd, data.data() + done, data.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          write_error = absl::InternalError(
              absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
          break;
        }
        done += static_cast<size_t>(w);
      }
      if (!write_error.ok()) {
        ctx.TryCancel();
        break;
      }
      received += data.size();
    }
    const grpc::Status finished = reader->Finish();
    if (!write_error.ok()) return write_error;
    if (stopping.load(std::memory_order_acquire)) {
      return absl::CancelledError("cuckood is stopping");
    }
    if (finished.error_code() == grpc::StatusCode::NOT_FOUND) {
      // Dropped after the listing: the stream holds its drop, after listed_at.
      spdlog::info("cluster: bootstrap: filter {} was dropped on peer {} during the copy",
                   FilterRegistry::QuoteName(info.name()), address);
      continue;
    }
    if (!finished.ok())
      return PeerError(
          address, absl::StrCat("ExportFilter ", FilterRegistry::QuoteName(info.name())), finished);
    if (::close(std::exchange(cleanup.fd, -1)) != 0) {
      return absl::InternalError(
          absl::StrFormat("cannot write %s: %s", path, std::strerror(errno)));
    }

    PeerFilter f;
    f.name = info.name();
    absl::StatusOr<LoadedSnapshot> loaded =
        ReadSnapshotFile(path, info.name(), [&](const SnapshotHeader& h) {
          absl::StatusOr<FilterRegistry::Claim> c =
              registry->ClaimName(info.name(), CuckooFilter::MemoryBytes(h.shape));
          if (!c.ok()) return c.status();
          f.claim = *std::move(c);
          return absl::OkStatus();
        });
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrFormat("the copy of filter %s from peer %s: %s",
                                          FilterRegistry::QuoteName(info.name()), address,
                                          loaded.status().message()));
    }
    if (loaded->filter_id == 0) {
      return absl::DataLossError(
          absl::StrFormat("the copy of filter %s from peer %s records no filter id",
                          FilterRegistry::QuoteName(info.name()), address));
    }
    copy.resume_from =
        std::min(copy.resume_from, std::max(loaded->filter_id, loaded->min_position) + 1);
    f.items = loaded->items;
    f.filter = std::move(loaded->filter);
    copy.bytes += received;
    copy.filters.push_back(std::move(f));
  }
  return copy;
}

}  // namespace cuckoo::server
