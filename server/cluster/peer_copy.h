// Copying a peer replica's filters, for a replica that bootstraps
// (docs/CLUSTER.md, "Bootstrap from a peer"): a brand-new empty replica, or
// one that was away longer than the stream keeps entries.
//
//   absl::StatusOr<PeerCopy> copy =
//       CopyFromPeer("cuckood-1.cuckood:50051", identity, &registry, scratch_dir, deadline);
//   for (PeerFilter& f : copy->filters) registry.AddClaimed(std::move(f.claim),
//   std::move(f.filter));
//
// Through the peer's public API (GetServerInfo, ListFilters, ExportFilter),
// so a peer keeps serving while it is copied. Each filter arrives as its
// snapshot file, checked like a snapshot loaded at start-up, with its filter
// id and each shard's stream position: the copy resumes the stream at
// `resume_from` and applies each later entry only to the shards that have
// not seen it (the same rule as a restart from snapshots).
#ifndef CUCKOO_SERVER_CLUSTER_PEER_COPY_H_
#define CUCKOO_SERVER_CLUSTER_PEER_COPY_H_

#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cuckoo_filter.h"
#include "core/registry.h"
#include "server/cluster/log_digest.h"

namespace cuckoo::server {

struct PeerFilter {
  std::string name;
  // Holds the name and its memory in the registry until AddClaimed.
  FilterRegistry::Claim claim;
  std::unique_ptr<CuckooFilter> filter;
  uint64_t items = 0;
};

struct PeerCopy {
  std::string address;
  // The peer's applied position when it listed its filters: every filter
  // it held then is here (minus those dropped before their export), and
  // the entries after it create, change or drop the rest.
  uint64_t listed_at = 0;
  // The first stream position the copy needs: the least of listed_at + 1
  // and, per filter, max(its id, its lowest shard position) + 1.
  uint64_t resume_from = 1;
  // The peer's digest of the log (log_digest.h) at a position at or past
  // resume_from - 1: the copy chains its own digest on from there.
  DigestPoint anchor;
  std::vector<PeerFilter> filters;
  uint64_t bytes = 0;  // Snapshot bytes received.
};

// Copies every filter of the replica at `address` (host:port). FAILED_-
// PRECONDITION when the peer is not a cluster replica of the log named
// `identity`, has applied nothing, or does not serve (its own copy of the
// log is not checked against the others', or disagrees); UNAVAILABLE (naming the peer) when it
// cannot be reached or a call fails; the snapshot reader's errors for a
// damaged copy; the registry's for a copy that does not fit (the names must
// be free: the caller dropped its own filters first). `stopping` set ends
// it early with CANCELLED. Files go through `scratch_dir` and are removed.
// How to reach a peer: the channel's credentials (TLS or not) and the
// token sent as "authorization: Bearer" (none if empty).
struct PeerAccess {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;
};

absl::StatusOr<PeerCopy> CopyFromPeer(const std::string& address, const std::string& identity,
                                      const PeerAccess& access, FilterRegistry* registry,
                                      const std::string& scratch_dir,
                                      const std::atomic<bool>& stopping);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_PEER_COPY_H_
