// What the files of Cluster share (private to server/cluster/): the NATS
// handles (Cluster::Impl), a write in flight (Cluster::Call), the message
// id header, NATS's error texts and the callbacks NATS calls.
//
// cluster.cc holds starting, stopping and the status; cluster_connect.cc
// the connection's options (TLS, credentials) and why it is down; cluster_publish.cc publishing
// writes, their acknowledgements and settling them with their results; cluster_apply.cc applying
// the entries the stream delivers; cluster_stream.cc the maintenance thread: the stream's creation
// and state, consuming it, the replica records, retention and bootstrapping from a peer.
#ifndef CUCKOO_SERVER_CLUSTER_CLUSTER_INTERNAL_H_
#define CUCKOO_SERVER_CLUSTER_CLUSTER_INTERNAL_H_

#include <nats/nats.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/cluster/cluster.h"

namespace cuckoo::server {

constexpr char kMsgIdHeader[] = "Nats-Msg-Id";

std::string NatsError(natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0));
const char* ConnStatusName(natsConnStatus s);
// "cluster: connected to NATS at URL" (without user info).
void LogConnected(natsConnection* nc);

struct Cluster::Impl {
  natsOptions* opts = nullptr;
  // Null until the connect thread's first connection succeeds; then set
  // once, nc before js (so a js seen means an nc), and cleared by Stop after
  // the threads that set or use them ended.
  std::atomic<natsConnection*> nc{nullptr};
  std::atomic<jsCtx*> js{nullptr};
  natsSubscription* sub = nullptr;
  kvStore* kv = nullptr;         // The replica records (maintenance thread).
  kvStore* digest_kv = nullptr;  // The digest reports (maintenance thread).
  kvWatcher* digest_watch = nullptr;
};

struct Cluster::Call {
  WriteDone done;
  size_t parts = 0;
  size_t settled = 0;
  bool finished = false;
  absl::Time deadline;
  std::vector<WriteResult> outcomes;
};

void OnMessageTrampoline(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
void OnAckTrampoline(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_CLUSTER_INTERNAL_H_
