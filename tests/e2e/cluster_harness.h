// A replicated cuckood on loopback for process-level tests: a 3-node
// nats-server JetStream cluster and N cuckood replicas (--nats), started,
// killed (-9) and restarted by the test, and a client that writes the way
// a careful user does (a request id per request, retried on UNAVAILABLE
// against the next replica) and keeps the ledger of what was acknowledged.
//
// Paths: NATS_SERVER_PATH (nats-server), CUCKOOD_PATH (tests/e2e/CMakeLists.txt).
#ifndef CUCKOO_TESTS_E2E_CLUSTER_HARNESS_H_
#define CUCKOO_TESTS_E2E_CLUSTER_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/snapshot.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"
#include "tests/e2e/process.h"
#include "tests/util/http.h"

namespace cuckoo::testing {

namespace fs = std::filesystem;

inline std::string Now() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
}

// The last `n` bytes of a log, for a failure message.
inline std::string Tail(const std::string& log, size_t n) {
  return log.substr(log.size() > n ? log.size() - n : 0);
}

// The message id (Nats-Msg-Id) of each message a nats-server's copy of
// `stream` holds (its JetStream store_dir), by stream sequence, read from
// the store's files (nats-server 2.9's file store: records of length |
// sequence | time | subject length | subject | [headers length | headers] |
// data | hash, little-endian, the length's top bit saying headers follow).
// A record still being written at the end of a file is left out.
inline std::map<uint64_t, std::string> NatsStoredIds(const std::string& store_dir,
                                                     const std::string& stream) {
  std::map<uint64_t, std::string> ids;
  const fs::path msgs = fs::path(store_dir) / "jetstream" / "$G" / "streams" / stream / "msgs";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(msgs, ec)) {
    if (e.path().extension() != ".blk") continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto u = [&](size_t at, int bytes) {
      uint64_t v = 0;
      for (int k = bytes - 1; k >= 0; --k) v = v << 8 | static_cast<uint8_t>(b[at + k]);
      return v;
    };
    for (size_t at = 0; at + 22 <= b.size();) {
      const uint64_t length = u(at, 4) & 0x7fffffff;
      const bool headers = (u(at, 4) >> 31) != 0;
      if (length < 22 || at + length > b.size()) break;
      const uint64_t seq = u(at + 4, 8) & ~(uint64_t{1} << 63);
      const size_t p = at + 22 + u(at + 20, 2);
      std::string id;
      if (headers && p + 4 <= at + length) {
        const std::string_view h(b.data() + p + 4, std::min<size_t>(u(p, 4), at + length - p - 4));
        constexpr std::string_view kKey = "Nats-Msg-Id:";
        if (size_t k = h.find(kKey); k != std::string_view::npos) {
          k = h.find_first_not_of(' ', k + kKey.size());
          if (k != std::string_view::npos) id = std::string(h.substr(k, h.find('\r', k) - k));
        }
      }
      ids[seq] = id;
      at += length;
    }
  }
  return ids;
}

// "" when the copies of `stream` in `stores` (three) hold the same message
// at every sequence all of them hold; else how they differ.
inline std::string NatsCopiesDiffer(const std::vector<std::string>& stores,
                                    const std::string& stream) {
  std::vector<std::map<uint64_t, std::string>> copy;
  for (const std::string& s : stores) copy.push_back(NatsStoredIds(s, stream));
  uint64_t differ = 0;
  std::string first;
  for (const auto& [seq, id] : copy[0]) {
    auto one = copy[1].find(seq), two = copy[2].find(seq);
    if (one == copy[1].end() || two == copy[2].end()) continue;
    if (id == one->second && id == two->second) continue;
    if (differ++ == 0) {
      first = absl::StrFormat("at sequence %d n0 holds \"%s\", n1 \"%s\", n2 \"%s\"", seq, id,
                              one->second, two->second);
    }
  }
  if (differ == 0) return "";
  return absl::StrFormat("%d sequences differ; first %s (messages held: %d, %d, %d)", differ, first,
                         copy[0].size(), copy[1].size(), copy[2].size());
}

// Three nats-server processes forming one JetStream cluster. The
// constructor returns once JetStream's meta group has a leader every server
// follows (each server's /healthz says ok), so a test starts on a formed
// cluster.
class NatsCluster {
 public:
  explicit NatsCluster(const std::string& dir) : dir_(dir) {
    servers_.resize(3);
    // A port from FreePort can be taken before nats-server binds it (by a
    // parallel test's process, or as the local port of an outgoing
    // connection); the server then exits and the cluster would never form:
    // then all three again on other ports.
    for (int attempt = 0;; ++attempt) {
      Configure();
      bool taken = false;
      for (int i = 0; i < 3 && !taken; ++i) {
        const Outcome o = TryStart(i);
        if (o == Outcome::kFailed) return;
        taken = o == Outcome::kPortTaken;
      }
      if (!taken) break;
      if (attempt == 4) {
        ADD_FAILURE() << "nats-server found a port taken in 5 attempts:\n" << Logs();
        return;
      }
      for (int i = 0; i < 3; ++i) {
        if (Alive(i)) Kill(i);
        fs::remove_all(absl::StrFormat("%s/js%d", dir_, i));
        fs::remove(LogPath(i));
      }
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int i = 0; i < 3; ++i) {
      while (HttpGet(monitor_[i], "/healthz").status != 200) {
        if (std::chrono::steady_clock::now() >= until || !Alive(i)) {
          ADD_FAILURE() << "the JetStream cluster did not form (n" << i
                        << "'s /healthz is not ok):\n"
                        << Logs();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  // Starts server i (again, after Kill) on its ports, and waits until it
  // listens for clients and routes; a port taken meanwhile is waited for.
  void Start(int i) {
    for (int attempt = 0; attempt < 40; ++attempt) {
      if (TryStart(i) != Outcome::kPortTaken) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    ADD_FAILURE() << "n" << i << "'s ports stayed taken for 10 s:\n" << Logs();
  }
  // Deletes server i's JetStream store (killed first): it starts again
  // holding no stream.
  void RemoveStore(int i) { fs::remove_all(absl::StrFormat("%s/js%d", dir_, i)); }
  void Kill(int i) {
    if (servers_[i] == nullptr) return;  // Never started: the start failed.
    std::fprintf(stderr, "[harness] %s kill -9 nats n%d\n", Now().c_str(), i);
    servers_[i]->Signal(SIGKILL);
    servers_[i]->Wait();
  }
  bool Alive(int i) {
    return servers_[i] != nullptr && servers_[i]->Wait(std::chrono::milliseconds(0)) == -1;
  }

  // The end of each server's log, for a failure message.
  std::string Logs() const {
    std::string all;
    for (int i = 0; i < 3; ++i) {
      absl::StrAppend(&all, "--- n", i, ".log (end)\n", Tail(ReadFile(LogPath(i)), 4000), "\n");
    }
    return all;
  }

  // nats://127.0.0.1:a,nats://127.0.0.1:b,...
  std::string Urls() const {
    std::vector<std::string> urls;
    for (int p : client_) urls.push_back(absl::StrCat("nats://127.0.0.1:", p));
    return absl::StrJoin(urls, ",");
  }

  // "" when the three servers' copies of `stream` hold the same message at
  // every sequence all three hold; else how they differ.
  std::string CopiesDiffer(const std::string& stream) const {
    std::vector<std::string> stores;
    for (int i = 0; i < 3; ++i) stores.push_back(absl::StrFormat("%s/js%d", dir_, i));
    return NatsCopiesDiffer(stores, stream);
  }

  // The string `field` of `stream` (in its state, cluster or
  // configuration), as a live server's monitoring port says; "" if none
  // knows.
  std::string StreamField(const std::string& stream, const std::string& field) {
    for (int i = 0; i < 3; ++i) {
      if (!Alive(i)) continue;
      const HttpResponse r = HttpGet(monitor_[i], "/jsz?streams=true&config=true");
      const size_t at = r.body.find(absl::StrCat("\"name\": \"", stream, "\""));
      if (at == std::string::npos) continue;
      const std::string key = absl::StrCat("\"", field, "\": \"");
      const size_t value = r.body.find(key, at);
      if (value == std::string::npos) continue;
      const size_t from = value + key.size();
      return r.body.substr(from, r.body.find('"', from) - from);
    }
    return "";
  }

  // How `stream` stores its messages ("file" or "memory"); "" if none knows.
  std::string StreamStorage(const std::string& stream) { return StreamField(stream, "storage"); }

  // Which server (0-2, named n0-n2) leads `stream`; -1 if none knows.
  int StreamLeader(const std::string& stream) {
    const std::string leader = StreamField(stream, "leader");
    return leader.size() == 2 && leader[0] == 'n' ? leader[1] - '0' : -1;
  }

 private:
  enum class Outcome { kListening, kPortTaken, kFailed };

  std::string LogPath(int i) const { return absl::StrFormat("%s/n%d.log", dir_, i); }

  // New ports and the three servers' configuration files.
  void Configure() {
    client_.clear();
    route_.clear();
    monitor_.clear();
    for (int i = 0; i < 3; ++i) {
      client_.push_back(FreePort());
      route_.push_back(FreePort());
      monitor_.push_back(FreePort());
    }
    std::vector<std::string> routes;
    for (int p : route_) routes.push_back(absl::StrCat("nats-route://127.0.0.1:", p));
    for (int i = 0; i < 3; ++i) {
      WriteFile(
          absl::StrFormat("%s/n%d.conf", dir_, i),
          absl::StrFormat("server_name: n%d\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n"
                          "jetstream { store_dir: \"%s/js%d\" }\n"
                          "cluster { name: cuckoo-test, listen: 127.0.0.1:%d, routes: [%s] }\n"
                          "log_file: \"%s\"\n%s",
                          i, client_[i], monitor_[i], dir_, i, route_[i],
                          absl::StrJoin(routes, ", "), LogPath(i),
                          std::getenv("CUCKOO_NATS_DEBUG") != nullptr ? "debug: true\n" : ""));
    }
  }

  // Starts server i and waits for its log (appended to across restarts) to
  // say it listens for routes, its last listener.
  Outcome TryStart(int i) {
    std::fprintf(stderr, "[harness] %s start nats n%d\n", Now().c_str(), i);
    const size_t from = ReadFile(LogPath(i)).size();
    servers_[i] = std::make_unique<Process>(
        std::vector<std::string>{NATS_SERVER_PATH, "-c", absl::StrFormat("%s/n%d.conf", dir_, i)});
    if (!servers_[i]->started()) {
      ADD_FAILURE() << "cannot run " << NATS_SERVER_PATH;
      return Outcome::kFailed;
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (true) {
      const bool alive = Alive(i);
      const std::string log = ReadFile(LogPath(i));
      const std::string_view mine = std::string_view(log).substr(log.size() >= from ? from : 0);
      if (alive && mine.find("Listening for route connections") != std::string_view::npos) {
        return Outcome::kListening;
      }
      if (!alive) {
        if (mine.find("address already in use") != std::string_view::npos) {
          return Outcome::kPortTaken;
        }
        ADD_FAILURE() << "nats-server n" << i << " exited:\n"
                      << mine << servers_[i]->out() << servers_[i]->err();
        return Outcome::kFailed;
      }
      if (std::chrono::steady_clock::now() >= until) {
        ADD_FAILURE() << "nats-server n" << i << " did not listen within 60 s:\n" << mine;
        return Outcome::kFailed;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string dir_;
  std::vector<int> client_, route_, monitor_;
  std::vector<std::unique_ptr<Process>> servers_;
};

// One cuckood replica: its data directory survives kills and restarts.
class Replica {
 public:
  Replica(std::string data_dir, std::vector<std::string> flags)
      : data_dir_(std::move(data_dir)), flags_(std::move(flags)) {
    Start();
  }
  // Starts (again, after Kill or Stop): on a new port.
  void Start() {
    process_ = std::make_unique<Cuckood>(data_dir_, flags_);
    ASSERT_TRUE(process_->ready()) << process_->process().out() << process_->process().err();
    std::shared_ptr<v1::FilterService::Stub> stub = v1::FilterService::NewStub(
        grpc::CreateChannel(process_->address(), grpc::InsecureChannelCredentials()));
    std::lock_guard<std::mutex> lock(mu_);
    stub_ = std::move(stub);
  }
  void Kill() {
    process_->process().Signal(SIGKILL);
    process_->process().Wait();
  }
  // SIGTERM and the exit code.
  int Stop() {
    process_->process().Signal(SIGTERM);
    return process_->process().Wait();
  }
  // The stub of the current process; other threads hold a copy across a
  // restart.
  std::shared_ptr<v1::FilterService::Stub> shared_stub() {
    std::lock_guard<std::mutex> lock(mu_);
    return stub_;
  }
  // For the test's own thread.
  v1::FilterService::Stub& stub() { return *stub_; }
  const std::string& data_dir() const { return data_dir_; }
  Cuckood& process() { return *process_; }
  int ReadyzStatus() { return HttpGet(process_->admin_port(), "/readyz").status; }
  std::string Metrics() { return HttpGet(process_->admin_port(), "/metrics").body; }
  uint64_t Applied() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetServerInfoResponse info;
    if (!stub_->GetServerInfo(&ctx, {}, &info).ok()) return 0;
    return info.applied_log_position();
  }
  // Waits until the replica has applied `position` and says ready.
  bool WaitCaughtUp(uint64_t position, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      if (Applied() >= position && ReadyzStatus() == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string data_dir_;
  std::vector<std::string> flags_;
  std::unique_ptr<Cuckood> process_;
  std::mutex mu_;
  std::shared_ptr<v1::FilterService::Stub> stub_;
};

// NATS plus `n` replicas, all in one temp dir.
class TestCluster {
 public:
  // Returns once every replica is ready (/readyz: the stream exists and it
  // consumes it).
  explicit TestCluster(int n, std::vector<std::string> extra_flags = {})
      : nats_(dir_.path()), extra_(std::move(extra_flags)) {
    std::fprintf(stderr, "[harness] test dir %s\n", dir_.path().c_str());
    if (const char* l = std::getenv("CUCKOO_REPLICA_LOG_LEVEL")) {
      extra_.push_back(absl::StrCat("--log-level=", l));
    }
    for (int i = 0; i < n; ++i) AddReplica();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(replica(i).WaitCaughtUp(0))
          << "replica " << i << " never became ready:\n"
          << replica(i).process().process().out() << nats_.Logs();
    }
  }
  Replica& AddReplica() {
    const int i = static_cast<int>(replicas_.size());
    const std::string data = absl::StrFormat("%s/r%d", dir_.path(), i);
    std::vector<std::string> flags = {"--nats=" + nats_.Urls(), absl::StrCat("--replica-id=r", i),
                                      "--nats-stream=TEST"};
    flags.insert(flags.end(), extra_.begin(), extra_.end());
    replicas_.push_back(std::make_unique<Replica>(data, flags));
    return *replicas_.back();
  }
  ~TestCluster() {
    if (std::getenv("CUCKOO_KEEP_TEST_DIR") == nullptr) return;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      WriteFile(absl::StrFormat("%s/r%d.log", dir_.path(), i),
                replicas_[i]->process().process().out() + replicas_[i]->process().process().err());
    }
  }
  Replica& replica(int i) { return *replicas_[i]; }
  int size() const { return static_cast<int>(replicas_.size()); }
  NatsCluster& nats() { return nats_; }

 private:
  TempDir dir_;
  NatsCluster nats_;
  std::vector<std::string> extra_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

inline grpc::ClientContext* WithDeadline(grpc::ClientContext* ctx,
                                         std::chrono::milliseconds d = std::chrono::seconds(15)) {
  ctx->set_deadline(std::chrono::system_clock::now() + d);
  return ctx;
}

// What the writers were told: keys acknowledged INSERTED and not deleted
// since, and the largest log position seen.
struct Ledger {
  std::mutex mu;
  std::unordered_set<std::string> present;
  std::atomic<uint64_t> max_position{0};
  std::atomic<uint64_t> acked_writes{0};
  std::atomic<uint64_t> retries{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;  // Client-visible errors other than UNAVAILABLE.

  void Saw(uint64_t position) {
    uint64_t m = max_position.load();
    while (position > m && !max_position.compare_exchange_weak(m, position)) {
    }
  }
  // What the writers were answered, for failure messages.
  std::vector<std::string> journal;  // Under mu.
  void Journal(std::string line) {
    std::lock_guard<std::mutex> lock(mu);
    journal.push_back(std::move(line));
  }
  void JournalLocked(std::string line) { journal.push_back(std::move(line)); }
  std::string JournalAbout(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mu);
    std::string out;
    for (const std::string& l : journal) {
      if (l.find(needle) != std::string::npos) absl::StrAppend(&out, l, "\n");
    }
    return out;
  }
  void Error(std::string e) {
    std::lock_guard<std::mutex> lock(errors_mu);
    errors.push_back(std::move(e));
  }
};

// Sends `call(stub)` to replica `*next` and, on UNAVAILABLE, to the next
// replica, backing off, for up to `budget`. `call` must reuse the same
// request (id) every time. Returns the final status. (Replicas are not added
// while it runs.)
template <typename Call>
grpc::Status WithRetries(TestCluster& c, int* next, Ledger& ledger, Call call,
                         std::chrono::seconds budget = std::chrono::seconds(60)) {
  const auto until = std::chrono::steady_clock::now() + budget;
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    const grpc::Status s = call(*c.replica(*next % c.size()).shared_stub());
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE ||
        std::chrono::steady_clock::now() >= until) {
      return s;
    }
    ++ledger.retries;
    *next += 1;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

// Inserts batches of new keys (and deletes some of its own acknowledged
// ones) through the replicas until stopped.
class Writer {
 public:
  Writer(TestCluster& c, Ledger& ledger, std::string filter, int id)
      : c_(c), ledger_(ledger), filter_(std::move(filter)), id_(id) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Writer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::mt19937_64 rng(id_);
    int next = id_;
    uint64_t batch = 0;
    std::vector<std::string> mine;  // Acknowledged inserted keys, not deleted.
    while (!stop_) {
      const bool del = mine.size() > 400 && rng() % 4 == 0;
      if (del) {
        v1::DeleteRequest req;
        req.set_filter(filter_);
        req.set_request_id(absl::StrFormat("w%d-d%d", id_, batch++));
        // As a client that reads its writes: the filter (and the keys) are
        // known on whichever replica this reaches.
        req.set_min_log_position(ledger_.max_position.load());
        std::vector<std::string> gone(mine.end() - 100, mine.end());
        for (const std::string& k : gone) req.add_keys(k);
        // Out of the ledger before the delete is sent: from then on the
        // keys may go at any moment, and a check must not expect them.
        {
          std::lock_guard<std::mutex> lock(ledger_.mu);
          for (const std::string& k : gone) ledger_.present.erase(k);
        }
        v1::DeleteResponse resp;
        grpc::Status s = WithRetries(c_, &next, ledger_, [&](v1::FilterService::Stub& stub) {
          grpc::ClientContext ctx;
          return stub.Delete(WithDeadline(&ctx), req, &resp);
        });
        if (!s.ok()) {
          ledger_.Error(absl::StrCat("Delete: ", s.error_code(), " ", s.error_message()));
          continue;
        }
        for (int i = 0; i < resp.results_size(); ++i) {
          if (resp.results(i) != v1::DELETE_RESULT_DELETED) {
            ledger_.Error(absl::StrCat("a delete of acknowledged key ", gone[i], " found nothing"));
          }
        }
        mine.resize(mine.size() - 100);
        ledger_.Saw(resp.log_position());
        ledger_.Journal(absl::StrFormat("w%d delete %s..%s id %s at %d", id_, gone.front(),
                                        gone.back(), req.request_id(), resp.log_position()));
      } else {
        v1::InsertRequest req;
        req.set_filter(filter_);
        req.set_request_id(absl::StrFormat("w%d-i%d", id_, batch));
        req.set_min_log_position(ledger_.max_position.load());
        std::vector<std::string> keys;
        for (int i = 0; i < 200; ++i) keys.push_back(absl::StrFormat("w%d-%d-%d", id_, batch, i));
        ++batch;
        for (const std::string& k : keys) req.add_keys(k);
        v1::InsertResponse resp;
        grpc::Status s = WithRetries(c_, &next, ledger_, [&](v1::FilterService::Stub& stub) {
          grpc::ClientContext ctx;
          return stub.Insert(WithDeadline(&ctx), req, &resp);
        });
        if (!s.ok()) {
          ledger_.Error(absl::StrCat("Insert: ", s.error_code(), " ", s.error_message()));
          continue;
        }
        std::lock_guard<std::mutex> lock(ledger_.mu);
        for (int i = 0; i < resp.results_size(); ++i) {
          if (resp.results(i) == v1::INSERT_RESULT_INSERTED) {
            ledger_.present.insert(keys[i]);
            mine.push_back(keys[i]);
          }
        }
        ledger_.Saw(resp.log_position());
        journal_lock_free_ =
            absl::StrFormat("w%d insert %s..%s id %s at %d: %d inserted", id_, keys.front(),
                            keys.back(), req.request_id(), resp.log_position(), resp.inserted());
        ledger_.JournalLocked(journal_lock_free_);
      }
      ++ledger_.acked_writes;
    }
  }

  TestCluster& c_;
  Ledger& ledger_;
  const std::string filter_;
  const int id_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::string journal_lock_free_;
};

// Every key of `keys` looked up on `r` at `min_position`: the ones absent.
inline std::vector<std::string> Missing(Replica& r, const std::string& filter,
                                        const std::vector<std::string>& keys, uint64_t min_position,
                                        std::string* error) {
  std::vector<std::string> missing;
  for (size_t begin = 0; begin < keys.size(); begin += 20000) {
    v1::LookupRequest req;
    req.set_filter(filter);
    req.set_min_log_position(min_position);
    const size_t end = std::min(keys.size(), begin + 20000);
    for (size_t i = begin; i < end; ++i) req.add_keys(keys[i]);
    v1::LookupResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = r.stub().Lookup(WithDeadline(&ctx, std::chrono::seconds(30)), req, &resp);
    if (!s.ok()) {
      *error = absl::StrCat(s.error_code(), " ", s.error_message());
      return missing;
    }
    for (size_t i = begin; i < end; ++i) {
      if (!resp.present(static_cast<int>(i - begin))) missing.push_back(keys[i]);
    }
  }
  return missing;
}

// Every filter of a replica as its snapshot files hold them (after a
// Snapshot call): name -> (table bytes of every shard, counters).
struct FilterImage {
  std::vector<uint8_t> tables;
  // Per shard: items, kick generator. (Not its position: a shard no entry
  // wrote to lately records how far its replica had applied the stream
  // when the file was written.)
  std::vector<uint64_t> counters;
  uint64_t id = 0;
};
inline std::map<std::string, FilterImage> SnapshotImages(Replica& r) {
  grpc::ClientContext ctx;
  v1::SnapshotResponse resp;
  const grpc::Status s = r.stub().Snapshot(WithDeadline(&ctx, std::chrono::seconds(60)), {}, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::map<std::string, FilterImage> out;
  for (const auto& e : fs::directory_iterator(r.data_dir())) {
    const std::string file = e.path().filename().string();
    if (!file.ends_with(".cuckoo") || file.starts_with(".")) continue;
    absl::StatusOr<LoadedSnapshot> loaded = ReadSnapshotFile(e.path().string());
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) continue;
    FilterImage& img = out[loaded->header.name];
    const CuckooFilter& f = *loaded->filter;
    const uint64_t t = f.shape().table_bytes_per_shard();
    img.tables.resize(t * f.shape().shards);
    img.id = f.id();
    for (uint32_t i = 0; i < f.shape().shards; ++i) {
      const CuckooFilter::ShardState st = f.CopyShard(i, img.tables.data() + i * t);
      img.counters.insert(img.counters.end(), {st.items, st.rng_state});
    }
  }
  return out;
}

// Every replica's filters are bit-identical (tables, items, kick
// generators, ids) to replica 0's.
inline void ExpectIdenticalReplicas(TestCluster& c, const std::vector<int>& which) {
  std::map<std::string, FilterImage> first = SnapshotImages(c.replica(which[0]));
  EXPECT_FALSE(first.empty());
  for (size_t k = 1; k < which.size(); ++k) {
    std::map<std::string, FilterImage> other = SnapshotImages(c.replica(which[k]));
    ASSERT_EQ(other.size(), first.size()) << "replica " << which[k];
    for (const auto& [name, img] : first) {
      ASSERT_TRUE(other.contains(name)) << name << " missing on replica " << which[k];
      EXPECT_EQ(other[name].id, img.id) << name << " on replica " << which[k];
      EXPECT_EQ(other[name].counters, img.counters) << name << " on replica " << which[k];
      EXPECT_TRUE(other[name].tables == img.tables)
          << name << ": table bytes differ on replica " << which[k];
    }
  }
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_E2E_CLUSTER_HARNESS_H_
