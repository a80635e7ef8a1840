// resp_load: pipelined batched load on a Redis-protocol port, shaped as
// cuckoo-bench's gRPC load (1000 16-byte keys a request, a window of
// requests in flight on each connection, a new one sent as each reply
// arrives), so that the Redis port and the gRPC port of one cuckood are
// compared with the same client behaviour. redis-benchmark is not that
// client: with -P it sends a group of requests and waits for all their
// replies before the next group, and filling in 1000 random keys a request
// takes a whole CPU at about 17,000 requests a second, so it measures
// itself before the server.
//
//   resp_load --port=P --mode=insert --filter=F --keys=N
//       CF.INSERT F NOCREATE ITEMS k... over keys 0..N-1, each once
//   resp_load --port=P --mode=mexists --filter=F --keyspace=N --requests=R
//       CF.MEXISTS F k... of keys drawn at random from 0..N-1; with
//       --expect-present (an insert run put them there) a 0 is a false
//       negative and fails the run
//   common: --host=127.0.0.1 --connections=2 --depth=8 --batch=1000
//           --key-bytes=16 --json=PATH
//   --exec: each request inside MULTI ... EXEC (a transaction of one
//           command: on a single node, one write-ahead log transaction)
//
// Keys are cuckoo-bench's (client/tools/cuckoo_bench/keys.h): key i is the same
// bytes on both ports. Prints one line; with --json, the figures as JSON.
// Exit code 1 on an error reply, a dropped connection, or a lookup of a
// present key answering 0.
//
// Hand-written: redis-benchmark and memtier (not in Debian bookworm) are
// the tools that exist; neither sends a sliding window of batched
// commands with binary keys.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "client/tools/cuckoo_bench/keys.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string mode;
  std::string filter;
  uint64_t keys = 0;      // insert
  uint64_t keyspace = 0;  // mexists
  uint64_t requests = 0;  // mexists
  int connections = 2;
  int depth = 8;
  int batch = 1000;
  int key_bytes = 16;
  std::string json;
  bool expect_present = false;
  bool exec = false;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "resp_load: %s\nusage: resp_load --port=P --mode=insert --filter=F --keys=N\n"
               "       resp_load --port=P --mode=mexists --filter=F --keyspace=N --requests=R\n"
               "       [--host=H --connections=2 --depth=8 --batch=1000 --key-bytes=16 "
               "--json=PATH --expect-present --exec]\n",
               why.c_str());
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--expect-present") {
      o.expect_present = true;
      continue;
    }
    if (a == "--exec") {
      o.exec = true;
      continue;
    }
    const size_t eq = a.find('=');
    if (a.substr(0, 2) != "--" || eq == std::string_view::npos) {
      Usage("expected --name=value, got \"" + std::string(a) + "\"");
    }
    const std::string name(a.substr(2, eq - 2));
    const std::string value(a.substr(eq + 1));
    auto number = [&](auto* out) {
      if (!absl::SimpleAtoi(value, out) || *out <= 0) {
        Usage("--" + name + " needs a positive number, got \"" + value + "\"");
      }
    };
    if (name == "host") {
      o.host = value;
    } else if (name == "port") {
      number(&o.port);
    } else if (name == "mode") {
      o.mode = value;
    } else if (name == "filter") {
      o.filter = value;
    } else if (name == "keys") {
      number(&o.keys);
    } else if (name == "keyspace") {
      number(&o.keyspace);
    } else if (name == "requests") {
      number(&o.requests);
    } else if (name == "connections") {
      number(&o.connections);
    } else if (name == "depth") {
      number(&o.depth);
    } else if (name == "batch") {
      number(&o.batch);
    } else if (name == "key-bytes") {
      number(&o.key_bytes);
    } else if (name == "json") {
      o.json = value;
    } else {
      Usage("unknown flag --" + name);
    }
  }
  if (o.port == 0) Usage("--port is required");
  if (o.filter.empty()) Usage("--filter is required");
  if (o.mode == "insert") {
    if (o.keys == 0) Usage("--mode=insert needs --keys");
  } else if (o.mode == "mexists") {
    if (o.keyspace == 0 || o.requests == 0) Usage("--mode=mexists needs --keyspace and --requests");
  } else {
    Usage("--mode is insert or mexists, got \"" + o.mode + "\"");
  }
  return o;
}

// What one connection saw.
struct Tally {
  uint64_t requests = 0;
  uint64_t items = 0;
  uint64_t ones = 0;  // replies of 1: inserted, or present
  uint64_t zeros = 0;
  uint64_t full = 0;  // CF.INSERT's -1
  std::vector<double> latency_us;
  std::string error;
};

class Connection {
 public:
  Connection(const Options& o, std::atomic<uint64_t>* next_batch, uint64_t batches, uint64_t seed)
      : o_(o), next_batch_(next_batch), batches_(batches), rng_(seed | 1) {}

  void Run(Tally* t) {
    t_ = t;
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(o_.port));
    if (::inet_pton(AF_INET, o_.host.c_str(), &addr.sin_addr) != 1) {
      t->error = "--host must be an IPv4 address: " + o_.host;
      return;
    }
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      t->error =
          absl::StrFormat("cannot connect to %s:%d: %s", o_.host, o_.port, std::strerror(errno));
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while (t->error.empty()) {
      while (static_cast<int>(sent_at_.size()) < o_.depth && Send()) {
      }
      if (sent_at_.empty()) break;  // all done
      if (!Receive()) break;
    }
    ::close(fd_);
  }

 private:
  // Builds and sends the next request; false when there is none.
  bool Send() {
    uint64_t first = 0;
    size_t n = static_cast<size_t>(o_.batch);
    cmd_.clear();
    if (o_.exec) cmd_ = "*1\r\n$5\r\nMULTI\r\n";
    if (o_.mode == "insert") {
      const uint64_t b = next_batch_->fetch_add(1, std::memory_order_relaxed);
      if (b >= batches_) return false;
      first = b * n;
      n = static_cast<size_t>(std::min<uint64_t>(n, o_.keys - first));
      absl::StrAppendFormat(&cmd_, "*%d\r\n$9\r\nCF.INSERT\r\n$%d\r\n%s\r\n$8\r\nNOCREATE\r\n",
                            n + 4, o_.filter.size(), o_.filter);
      cmd_ += "$5\r\nITEMS\r\n";
    } else {
      if (next_batch_->fetch_add(1, std::memory_order_relaxed) >= batches_) return false;
      absl::StrAppendFormat(&cmd_, "*%d\r\n$10\r\nCF.MEXISTS\r\n$%d\r\n%s\r\n", n + 2,
                            o_.filter.size(), o_.filter);
    }
    const std::string header = absl::StrFormat("$%d\r\n", o_.key_bytes);
    size_t at = cmd_.size();
    cmd_.resize(at + n * (header.size() + static_cast<size_t>(o_.key_bytes) + 2));
    for (size_t i = 0; i < n; ++i) {
      uint64_t index = first + i;
      if (o_.mode == "mexists") {
        rng_ ^= rng_ << 13;  // xorshift64
        rng_ ^= rng_ >> 7;
        rng_ ^= rng_ << 17;
        index = rng_ % o_.keyspace;
      }
      std::memcpy(cmd_.data() + at, header.data(), header.size());
      at += header.size();
      cuckoo::bench::WriteKey(index, o_.key_bytes, reinterpret_cast<uint8_t*>(cmd_.data() + at));
      at += static_cast<size_t>(o_.key_bytes);
      cmd_[at++] = '\r';
      cmd_[at++] = '\n';
    }
    if (o_.exec) cmd_ += "*1\r\n$4\r\nEXEC\r\n";
    std::string_view rest = cmd_;
    while (!rest.empty()) {
      const ssize_t w = ::send(fd_, rest.data(), rest.size(), MSG_NOSIGNAL);
      if (w <= 0) {
        t_->error = absl::StrFormat("send: %s", std::strerror(errno));
        return false;
      }
      rest.remove_prefix(static_cast<size_t>(w));
    }
    sent_at_.push_back(Clock::now());
    sizes_.push_back(n);
    return true;
  }

  // Reads until at least one reply is complete, and takes every complete
  // one; false on an error.
  bool Receive() {
    char chunk[65536];
    for (;;) {
      const ssize_t r = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (r <= 0) {
        t_->error = r == 0 ? "the server closed the connection"
                           : absl::StrFormat("recv: %s", std::strerror(errno));
        return false;
      }
      in_.append(chunk, static_cast<size_t>(r));
      size_t taken = 0;
      bool any = false;
      while (!sent_at_.empty()) {
        const size_t used = TakeReply(std::string_view(in_).substr(taken));
        if (used == 0) break;
        if (!t_->error.empty()) return false;
        taken += used;
        any = true;
      }
      in_.erase(0, taken);
      if (any) return true;
    }
  }

  // One reply at the start of `in`: its bytes, or 0 if incomplete.
  size_t TakeReply(std::string_view in) {
    // With --exec: MULTI's and the command's, then EXEC's array of one.
    constexpr std::string_view kExecHead = "+OK\r\n+QUEUED\r\n*1\r\n";
    size_t head = 0;
    if (o_.exec) {
      if (in.size() < kExecHead.size()) return 0;
      if (in.substr(0, kExecHead.size()) != kExecHead) {
        t_->error = "unexpected reply to MULTI ... EXEC: " +
                    std::string(in.substr(0, std::min<size_t>(in.size(), 80)));
        return in.size();
      }
      head = kExecHead.size();
      in.remove_prefix(head);
    }
    const size_t used = TakeArray(in);
    return used == 0 ? 0 : head + used;
  }

  size_t TakeArray(std::string_view in) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return 0;
    if (in[0] != '*') {
      t_->error = "unexpected reply: " + std::string(in.substr(0, eol));
      return eol + 2;
    }
    uint64_t n = 0;
    if (!absl::SimpleAtoi(absl::string_view(in.data() + 1, eol - 1), &n) || n != sizes_.front()) {
      t_->error = absl::StrFormat("expected an array of %d, got %s", sizes_.front(),
                                  std::string(in.substr(0, eol)));
      return eol + 2;
    }
    size_t pos = eol + 2;
    uint64_t ones = 0, zeros = 0, full = 0;
    for (uint64_t i = 0; i < n; ++i) {
      // The usual item, ":0" or ":1", without a search.
      if (in.size() >= pos + 4 && in[pos] == ':' && in[pos + 2] == '\r' && in[pos + 3] == '\n' &&
          (in[pos + 1] == '0' || in[pos + 1] == '1')) {
        ++(in[pos + 1] == '1' ? ones : zeros);
        pos += 4;
        continue;
      }
      const size_t e = in.find("\r\n", pos);
      if (e == std::string_view::npos) return 0;
      const std::string_view v = in.substr(pos, e - pos);
      if (v == ":1") {
        ++ones;
      } else if (v == ":0") {
        ++zeros;
      } else if (v == ":-1") {
        ++full;
      } else {
        t_->error = "unexpected item reply: " + std::string(v);
        return e + 2;
      }
      pos = e + 2;
    }
    t_->latency_us.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - sent_at_.front()).count());
    sent_at_.pop_front();
    sizes_.pop_front();
    ++t_->requests;
    t_->items += n;
    t_->ones += ones;
    t_->zeros += zeros;
    t_->full += full;
    return pos;
  }

  const Options& o_;
  std::atomic<uint64_t>* const next_batch_;
  const uint64_t batches_;
  uint64_t rng_;
  Tally* t_ = nullptr;
  int fd_ = -1;
  std::string cmd_;
  std::string in_;
  std::deque<Clock::time_point> sent_at_;
  std::deque<size_t> sizes_;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  const uint64_t batches = o.mode == "insert" ? (o.keys + static_cast<uint64_t>(o.batch) - 1) /
                                                    static_cast<uint64_t>(o.batch)
                                              : o.requests;
  std::atomic<uint64_t> next_batch{0};
  std::vector<Tally> tallies(static_cast<size_t>(o.connections));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int c = 0; c < o.connections; ++c) {
    threads.emplace_back([&, c] {
      Connection conn(o, &next_batch, batches, cuckoo::bench::SplitMix64(static_cast<uint64_t>(c)));
      conn.Run(&tallies[static_cast<size_t>(c)]);
    });
  }
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  Tally all;
  for (Tally& t : tallies) {
    all.requests += t.requests;
    all.items += t.items;
    all.ones += t.ones;
    all.zeros += t.zeros;
    all.full += t.full;
    all.latency_us.insert(all.latency_us.end(), t.latency_us.begin(), t.latency_us.end());
    if (all.error.empty()) all.error = t.error;
  }
  const double p50 = Percentile(all.latency_us, 0.5);
  const double p99 = Percentile(all.latency_us, 0.99);
  const double rate = static_cast<double>(all.items) / seconds;
  std::printf(
      "resp_load %s: %llu items in %llu requests, %.2f s: %.0f items/s; latency us p50 %.0f p99 "
      "%.0f; replies 1: %llu, 0: %llu, -1: %llu%s%s\n",
      o.mode.c_str(), static_cast<unsigned long long>(all.items),
      static_cast<unsigned long long>(all.requests), seconds, rate, p50, p99,
      static_cast<unsigned long long>(all.ones), static_cast<unsigned long long>(all.zeros),
      static_cast<unsigned long long>(all.full),
      all.error.empty() ? "" : "; error: ", all.error.c_str());
  if (!o.json.empty()) {
    std::ofstream(o.json) << absl::StrFormat(
        "{\"mode\": \"%s\", \"items\": %d, \"requests\": %d, \"seconds\": %.6f, "
        "\"items_per_s\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"ones\": %d, \"zeros\": %d, "
        "\"full\": %d, \"ok\": %s}\n",
        o.mode, all.items, all.requests, seconds, rate, p50, p99, all.ones, all.zeros, all.full,
        all.error.empty() ? "true" : "false");
  }
  if (!all.error.empty()) return 1;
  const uint64_t expected = batches * static_cast<uint64_t>(o.batch);
  if (o.mode == "insert" && all.items != o.keys) return 1;
  if (o.mode == "mexists" && all.items != expected) return 1;
  if (o.expect_present && all.zeros > 0) {
    std::fprintf(stderr, "resp_load: %llu present keys answered 0 (false negatives)\n",
                 static_cast<unsigned long long>(all.zeros));
    return 1;
  }
  return 0;
}
