#include "client/tools/cuckoo_bench/load.h"

#include <grpcpp/create_channel.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cuckoo_client.h"

namespace cuckoo::bench {
namespace {

namespace v1 = ::cuckoo::v1;

const std::string& Method(Op op) {
  static const std::array<std::string, kNumOps>* const kMethods =
      new std::array<std::string, kNumOps>{
          "/cuckoo.v1.FilterService/Insert", "/cuckoo.v1.FilterService/Lookup",
          "/cuckoo.v1.FilterService/Delete", "/cuckoo.v1.FilterService/Count"};
  return (*kMethods)[op];
}

template <typename M>
bool Parse(grpc::ByteBuffer* buffer, M* msg) {
  return grpc::SerializationTraits<M>::Deserialize(buffer, msg).ok();
}

uint64_t Bit(const std::vector<uint64_t>& bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

// Bit i = b[i], for n <= 64 bools (each 0 or 1). Eight at a time: the
// multiplication moves byte k's low bit to bit 56 + k, with no carries.
uint64_t PackBools(const bool* b, uint32_t n) {
  uint64_t mask = 0;
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    std::memcpy(&x, b + i, 8);
    mask |= ((x * 0x0102040810204080ull) >> 56) << i;
  }
  for (; i < n; ++i) mask |= static_cast<uint64_t>(b[i]) << i;
  return mask;
}

}  // namespace

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

absl::Status Bench::Connect() {
  conns_.resize(o_.connections);
  // Several servers (a cluster's replicas): connection c goes to the
  // (c mod n)-th, so the load is spread evenly over them.
  const std::vector<std::string> targets = absl::StrSplit(o_.target, ',', absl::SkipEmpty());
  for (int c = 0; c < o_.connections; ++c) {
    grpc::ChannelArguments args;
    // Channels with equal arguments would share one subchannel, i.e. one
    // TCP connection; a local pool plus a distinct argument prevents that.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("cuckoo_bench.connection", c);
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    std::shared_ptr<grpc::ChannelCredentials> credentials =
        client::ChannelCredentials(o_.tls_options, args);
    conns_[c].channel = grpc::CreateCustomChannel(targets[c % targets.size()], credentials, args);
    conns_[c].stub = std::make_unique<grpc::GenericStub>(conns_[c].channel);
  }
  for (int c = 0; c < o_.connections; ++c) {
    if (!conns_[c].channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
      return absl::UnavailableError(absl::StrFormat("connection %d to %s not ready after 10s", c,
                                                    targets[c % targets.size()]));
    }
  }
  return absl::OkStatus();
}

void Bench::BuildPool() {
  constexpr uint64_t kMaxPoolRequests = 65536;
  const uint64_t min_requests = 2 * static_cast<uint64_t>(o_.connections) * o_.depth;
  const uint64_t n = std::max<uint64_t>(
      std::min((o_.pool_keys + o_.batch - 1) / o_.batch, kMaxPoolRequests), min_requests);
  pool_.resize(n);
  Rng rng(SplitMix64(o_.seed ^ 0x706F6F6CULL));
  std::vector<uint64_t> indices(o_.batch);
  for (PoolRequest& r : pool_) {
    r.must_be_present.assign((o_.batch + 63) / 64, 0);
    for (int k = 0; k < o_.batch; ++k) {
      const uint64_t a = rng.Next();
      const uint64_t b = rng.Next();
      if (static_cast<int>(a % 100) < o_.positive) {
        indices[k] = b % o_.keyspace;
        r.must_be_present[k >> 6] |= uint64_t{1} << (k & 63);
        ++r.present_keys;
      } else {
        indices[k] = kAbsentBase | (b >> 1);
      }
    }
    r.payload = EncodeKeysRequest(o_.filter, o_.key_bytes, o_.batch,
                                  [&indices](size_t i) { return indices[i]; });
  }
}

void Bench::BuildChurn(uint32_t batches) {
  for (int c = 0; c < o_.connections; ++c) {
    Churn& ch = conns_[c].churn;
    ch.payloads.resize(batches);
    for (uint32_t b = 0; b < batches; ++b) {
      const uint64_t first =
          kChurnBase + (static_cast<uint64_t>(c) * batches + b) * static_cast<uint64_t>(o_.batch);
      ch.payloads[b] = EncodeKeysRequest(o_.filter, o_.key_bytes, o_.batch,
                                         [first](size_t i) { return first + i; });
      ch.free.push_back(b);
    }
    // With deletes in the mix, start half full (full for delete only).
    ch.to_prime = o_.uses(kDelete) ? (o_.uses(kInsert) ? batches / 2 : batches) : 0;
  }
}

uint64_t Bench::churn_retired() const {
  uint64_t n = 0;
  for (const Connection& c : conns_) n += c.churn.retired;
  return n;
}

uint64_t Bench::churn_inserted_batches() const {
  uint64_t n = 0;
  for (const Connection& c : conns_) n += c.churn.inserted.size();
  return n;
}

PhaseResult Bench::RunPhase(Phase phase, bool populate_if_absent) {
  phase_ = phase;
  populate_if_absent_ = populate_if_absent;
  populate_batches_ = (o_.keyspace + o_.batch - 1) / o_.batch;
  next_populate_.store(0);
  issued_.store(0);
  errors_.store(0);
  const bool warmup = phase == Phase::kRun && o_.warmup > absl::ZeroDuration();
  stage_.store(warmup ? kWarmup : kMeasure);

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < o_.threads; ++t) {
    auto w = std::make_unique<Worker>(
        SplitMix64(o_.seed * 31 + t * 7 + static_cast<int>(phase) * 1'000'003));
    for (int c = t; c < o_.connections; c += o_.threads) {
      for (int d = 0; d < o_.depth; ++d) {
        w->calls.push_back(std::make_unique<Call>());
        w->calls.back()->conn = &conns_[c];
      }
    }
    // Spread the threads over the pool.
    w->lookup_cursor = pool_.empty() ? 0 : pool_.size() * t / o_.threads;
    w->count_cursor = pool_.empty() ? 0 : pool_.size() * (2 * t + 1) / (2 * o_.threads);
    workers.push_back(std::move(w));
  }

  PhaseResult result;
  const double cpu0 = CpuSeconds();
  const int64_t start = NowNs();
  int64_t t0 = start;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([this, &w, &done] {
      Drive(*w);
      done.fetch_add(1);
    });
  }
  auto wait_until = [&](int64_t until_ns) {
    while (done.load() < o_.threads && NowNs() < until_ns) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return done.load() < o_.threads;  // Still running.
  };
  bool ran_to_end = true;
  if (phase == Phase::kRun) {
    if (warmup) {
      ran_to_end = wait_until(start + absl::ToInt64Nanoseconds(o_.warmup));
      t0 = NowNs();
      // Not over a kStop that --max-errors set during the warmup.
      int expected = kWarmup;
      stage_.compare_exchange_strong(expected, kMeasure, std::memory_order_release);
    }
    if (ran_to_end && o_.requests == 0) {
      ran_to_end = wait_until(t0 + absl::ToInt64Nanoseconds(o_.duration));
      stage_.store(kStop, std::memory_order_release);
    }
  }
  for (std::thread& t : threads) t.join();
  result.cpu_s = CpuSeconds() - cpu0;
  for (auto& w : workers) {
    result.measured.Merge(w->measured);
    result.unmeasured.Merge(w->unmeasured);
  }
  if (result.measured.end_ns > t0) result.elapsed_s = (result.measured.end_ns - t0) / 1e9;
  if (o_.max_errors > 0 && errors_.load() >= o_.max_errors) {
    result.stopped_early = absl::StrFormat("%u requests failed (--max-errors)", errors_.load());
  } else if (phase == Phase::kRun) {
    const OpStats total = result.measured.Total();
    const bool short_of_requests =
        o_.requests > 0 && total.requests + total.errors_total() < o_.requests;
    if (!ran_to_end || short_of_requests) {
      result.stopped_early =
          "no operation of the mix had work left: inserts need a FREE churn batch, deletes an "
          "INSERTED one (raise --churn, or mix inserts with deletes)";
    }
  }
  return result;
}

void Bench::Drive(Worker& w) {
  for (auto& call : w.calls) Issue(w, *call);
  void* tag = nullptr;
  bool ok = false;
  while (w.in_flight > 0) {
    if (!w.cq.Next(&tag, &ok)) break;
    Call& call = *static_cast<Call*>(tag);
    --w.in_flight;
    Complete(w, call, NowNs());
    Issue(w, call);
  }
  w.cq.Shutdown();
  while (w.cq.Next(&tag, &ok)) {
  }
  for (auto& call : w.calls) {
    call->reader.reset();
    call->ctx.reset();
  }
}

void Bench::Issue(Worker& w, Call& call) {
  const int stage = stage_.load(std::memory_order_acquire);
  if (stage == kStop) return;
  const bool measured = stage == kMeasure;
  if (measured && phase_ == Phase::kRun && o_.requests > 0 &&
      issued_.fetch_add(1, std::memory_order_relaxed) >= o_.requests) {
    stage_.store(kStop, std::memory_order_relaxed);
    return;
  }
  if (!Next(w, call)) return;
  call.measured = measured;
  call.reader.reset();
  call.ctx.reset();
  call.ctx.emplace();
  call.ctx->set_deadline(absl::ToChronoTime(absl::Now() + o_.timeout));
  client::AddToken(o_.token, *call.ctx);
  call.start_ns = NowNs();
  call.reader = call.conn->stub->PrepareUnaryCall(&*call.ctx, Method(call.op), call.request, &w.cq);
  call.reader->StartCall();
  call.reader->Finish(&call.response, &call.status, &call);
  ++w.in_flight;
}

bool Bench::Next(Worker& w, Call& call) {
  Churn& churn = call.conn->churn;
  switch (phase_) {
    case Phase::kPopulate: {
      const uint64_t b = next_populate_.fetch_add(1, std::memory_order_relaxed);
      if (b >= populate_batches_) return false;
      const uint64_t first = b * o_.batch;
      call.op = kInsert;
      call.keys = static_cast<uint32_t>(std::min<uint64_t>(o_.batch, o_.keyspace - first));
      call.request = EncodeKeysRequest(
          o_.filter, o_.key_bytes, call.keys, [first](size_t i) { return first + i; },
          populate_if_absent_);
      return true;
    }
    case Phase::kPrime:
      if (churn.to_prime == 0 || churn.free.empty()) return false;
      --churn.to_prime;
      return TakeChurn(kInsert, call);
    case Phase::kCleanup:
      return TakeChurn(kDelete, call);
    case Phase::kRun:
      break;
  }
  std::array<uint64_t, kNumOps> w8;
  uint64_t total = 0;
  for (int op = 0; op < kNumOps; ++op) {
    w8[op] = o_.weights[op];
    if (op == kInsert && churn.free.empty()) w8[op] = 0;
    if (op == kDelete && churn.inserted.empty()) w8[op] = 0;
    total += w8[op];
  }
  if (total == 0) return false;
  uint64_t r = w.rng.Next() % total;
  int op = 0;
  while (r >= w8[op]) r -= w8[op++];
  switch (op) {
    case kLookup:
    case kCount: {
      size_t& cursor = op == kLookup ? w.lookup_cursor : w.count_cursor;
      if (++cursor >= pool_.size()) cursor = 0;
      call.op = static_cast<Op>(op);
      call.item = static_cast<uint32_t>(cursor);
      call.keys = o_.batch;
      call.request = pool_[cursor].payload;
      return true;
    }
    default:
      return TakeChurn(static_cast<Op>(op), call);
  }
}

bool Bench::TakeChurn(Op op, Call& call) {
  Churn& churn = call.conn->churn;
  std::deque<uint32_t>& from = op == kInsert ? churn.free : churn.inserted;
  if (from.empty()) return false;
  call.op = op;
  call.item = from.front();
  from.pop_front();
  call.keys = o_.batch;
  call.request = churn.payloads[call.item];
  return true;
}

void Bench::Complete(Worker& w, Call& call, int64_t end_ns) {
  PhaseStats& ps = call.measured ? w.measured : w.unmeasured;
  OpStats& s = ps.ops[call.op];
  if (call.measured) ps.end_ns = std::max(ps.end_ns, end_ns);
  const bool churn = phase_ != Phase::kPopulate && (call.op == kInsert || call.op == kDelete);
  Churn& ch = call.conn->churn;
  auto error = [&](int slot, std::string message) {
    s.Error(slot, std::move(message));
    // A churn batch may be half applied: never delete it.
    if (churn) ++ch.retired;
    if (o_.max_errors > 0 && errors_.fetch_add(1, std::memory_order_relaxed) + 1 >= o_.max_errors) {
      stage_.store(kStop, std::memory_order_relaxed);
    }
  };
  auto bad = [&](const char* what, int got) {
    error(kBadResponse, absl::StrFormat("%s response with %d %s for %u keys", kOpNames[call.op],
                                        got, what, call.keys));
  };
  if (!call.status.ok()) return error(call.status.error_code(), call.status.error_message());
  // Only successful requests count as served, and for latency.
  if (call.measured) {
    ++s.requests;
    s.keys += call.keys;
    s.latency.Record(static_cast<uint64_t>(end_ns - call.start_ns));
  }
  switch (call.op) {
    case kLookup: {
      v1::LookupResponse& r = w.lookup_resp;
      if (!Parse(&call.response, &r) || r.present_size() != static_cast<int>(call.keys)) {
        return bad("results", r.present_size());
      }
      const PoolRequest& pr = pool_[call.item];
      const bool* present = r.present().data();
      // 64 keys at a time, without branches: half the keys are present, at
      // random, so a branch per key would mispredict half the time.
      for (uint32_t base = 0; base < call.keys; base += 64) {
        const uint64_t must = pr.must_be_present[base >> 6];
        const uint64_t got = PackBools(present + base, std::min<uint32_t>(64, call.keys - base));
        s.false_negatives += std::popcount(must & ~got);
        s.absent_hits += std::popcount(got & ~must);
      }
      s.present_keys += pr.present_keys;
      s.absent_keys += call.keys - pr.present_keys;
      break;
    }
    case kCount: {
      v1::CountResponse& r = w.count_resp;
      if (!Parse(&call.response, &r) || r.counts_size() != static_cast<int>(call.keys)) {
        return bad("counts", r.counts_size());
      }
      const PoolRequest& pr = pool_[call.item];
      const uint32_t* counts = r.counts().data();
      for (uint32_t i = 0; i < call.keys; ++i) {
        const uint64_t must = Bit(pr.must_be_present, i);
        const uint64_t hit = counts[i] != 0;
        s.false_negatives += must & (hit ^ 1);
        s.absent_hits += (must ^ 1) & hit;
      }
      s.present_keys += pr.present_keys;
      s.absent_keys += call.keys - pr.present_keys;
      break;
    }
    case kInsert: {
      v1::InsertResponse& r = w.insert_resp;
      if (!Parse(&call.response, &r) || r.results_size() != static_cast<int>(call.keys)) {
        return bad("results", r.results_size());
      }
      s.inserted += r.inserted();
      s.already_present += r.already_present();
      s.full += r.full();
      if (churn) {
        if (r.inserted() == call.keys) {
          ch.inserted.push_back(call.item);
        } else {
          ++ch.retired;
        }
      }
      break;
    }
    case kDelete: {
      v1::DeleteResponse& r = w.delete_resp;
      if (!Parse(&call.response, &r) || r.results_size() != static_cast<int>(call.keys)) {
        return bad("results", r.results_size());
      }
      s.deleted += r.deleted();
      s.not_found += r.not_found();
      // Every key of the batch was inserted: each delete must find it.
      s.false_negatives += r.not_found();
      ch.free.push_back(call.item);
      break;
    }
  }
}

}  // namespace cuckoo::bench
