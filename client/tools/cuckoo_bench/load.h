// cuckoo-bench's load engine: connections, call slots driven by completion
// queues on client threads, pre-built requests, the churn window, and the
// phases of a run (populate, prime, run, cleanup). See main.cc's header
// comment for how it works.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LOAD_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LOAD_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "client/tools/cuckoo_bench/keys.h"
#include "client/tools/cuckoo_bench/options.h"
#include "client/tools/cuckoo_bench/stats.h"
#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::bench {

// Nanoseconds of the steady clock.
int64_t NowNs();

// This process's CPU time so far, all threads, in seconds.
double CpuSeconds();

// splitmix64 as a generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    const uint64_t r = SplitMix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return r;
  }

 private:
  uint64_t state_;
};

enum class Phase { kPopulate, kPrime, kRun, kCleanup };
enum Stage : int { kWarmup = 0, kMeasure = 1, kStop = 2 };

// A pre-built lookup/count request.
struct PoolRequest {
  grpc::ByteBuffer payload;
  std::vector<uint64_t> must_be_present;  // Bit i: key i is a present key.
  uint32_t present_keys = 0;
};

// A connection's insert/delete window (see the header comment). Touched only
// by the thread driving the connection, and by the main thread between phases.
struct Churn {
  std::vector<grpc::ByteBuffer> payloads;  // One per batch.
  std::deque<uint32_t> free;
  std::deque<uint32_t> inserted;
  uint64_t retired = 0;
  uint32_t to_prime = 0;
};

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  Churn churn;
};

// A call slot: one request in flight at a time.
struct Call {
  Connection* conn = nullptr;
  Op op = kLookup;
  uint32_t item = 0;  // Pool request or churn batch.
  uint32_t keys = 0;
  bool measured = false;
  int64_t start_ns = 0;
  grpc::ByteBuffer request;
  std::optional<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::ByteBuffer response;
  grpc::Status status;
};

struct Worker {
  explicit Worker(uint64_t seed) : rng(seed) {}
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls;
  Rng rng;
  size_t lookup_cursor = 0;
  size_t count_cursor = 0;
  int in_flight = 0;
  PhaseStats measured;
  PhaseStats unmeasured;
  // Reused, so parsing allocates nothing once warm.
  v1::InsertResponse insert_resp;
  v1::LookupResponse lookup_resp;
  v1::DeleteResponse delete_resp;
  v1::CountResponse count_resp;
};

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {}

  absl::Status Connect();

  // The lookup/count pool: --pool keys, in at most kMaxPoolRequests requests
  // (small batches would otherwise make millions of tiny slices) and at
  // least two per call slot.
  void BuildPool();
  size_t pool_requests() const { return pool_.size(); }

  // `batches` churn batches per connection, all FREE.
  void BuildChurn(uint32_t batches);
  uint64_t churn_retired() const;
  uint64_t churn_inserted_batches() const;

  PhaseResult RunPhase(Phase phase, bool populate_if_absent = false);

 private:
  // Thread body: issues on every slot, then re-issues on each completion
  // until no slot has anything in flight.
  void Drive(Worker& w);

  void Issue(Worker& w, Call& call);

  // Picks the slot's next request; false if there is none.
  bool Next(Worker& w, Call& call);

  // Insert: the oldest FREE batch; delete: the oldest INSERTED one.
  bool TakeChurn(Op op, Call& call);

  void Complete(Worker& w, Call& call, int64_t end_ns);

  const Options& o_;
  std::vector<Connection> conns_;
  std::vector<PoolRequest> pool_;
  Phase phase_ = Phase::kRun;
  bool populate_if_absent_ = false;
  uint64_t populate_batches_ = 0;
  std::atomic<int> stage_{kMeasure};
  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> next_populate_{0};
};

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LOAD_H_
