// RespServer's connections, with a fake CommandHandler and plain POSIX
// sockets as clients: pipelining order with synchronous and delayed
// (other-thread) replies, handlers taking several commands, protocol errors,
// half commands, timeouts, slow clients, connection limits, shutdown drain,
// and many connections at once. Runs under ASan and TSan (label
// "concurrency").
#include "server/resp/resp_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/util/loopback.h"

namespace cuckoo::server::resp {
namespace {

using ::cuckoo::testing::ConnectLoopback;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

std::string Bulk(std::string_view s) {
  std::string out = absl::StrCat("$", s.size(), "\r\n");
  out.append(s);
  out += "\r\n";
  return out;
}

// A command as a RESP array of bulk strings.
std::string Cmd(std::initializer_list<std::string_view> args) {
  std::string out = absl::StrCat("*", args.size(), "\r\n");
  for (std::string_view a : args) out += Bulk(a);
  return out;
}

// Replies after a delay, from its own thread.
class Delayer {
 public:
  Delayer() : thread_([this] { Loop(); }) {}
  ~Delayer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // `bytes` is called on the delay thread, just before Reply.
  void After(std::chrono::milliseconds delay, Completion done, std::function<std::string()> bytes,
             std::function<void(Session*)> then = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace(Clock::now() + delay,
                     Item{std::move(done), std::move(bytes), std::move(then)});
    }
    cv_.notify_all();
  }

 private:
  struct Item {
    Completion done;
    std::function<std::string()> bytes;
    std::function<void(Session*)> then;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (queue_.empty()) {
        if (stop_) return;
        cv_.wait(lock);
        continue;
      }
      auto it = queue_.begin();
      if (Clock::now() < it->first && !stop_) {
        cv_.wait_until(lock, it->first);
        continue;
      }
      Item item = std::move(it->second);
      queue_.erase(it);
      lock.unlock();
      item.done.Reply(item.bytes(), std::move(item.then));
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<Clock::time_point, Item> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started after the rest is initialised
};

// The fake handler:
//   PING -> +PONG; ECHO x -> bulk x; ID -> :session id
//   DELAY ms x -> bulk x, answered after ms from another thread
//   ADD x -> :1 per ADD; consecutive ADDs are taken together
//   BIG n -> a bulk of n bytes; QUIT -> +OK then close;
//   AQUIT -> +OK from another thread, then close
//   SET ms x -> adds x to a set at once (Completion::Applied), :1 after ms
//   from another thread; HAS x -> :1 if x is in the set, else :0
//   MULTI, EXEC, DISCARD -> as RedisCommands' (Session::multi; EXEC
//   answers the array's header, or -EXECABORT after a BAD was refused)
//   AUTH -> +OK, the session authenticated; RESET -> +RESET, not
class FakeHandler : public CommandHandler {
 public:
  size_t Execute(Session* session, absl::Span<const Command> commands, Completion done) override {
    executed.fetch_add(1);
    const std::vector<std::string_view>& a = commands[0].args;
    const std::string name(a[0]);
    if (name == "PING") {
      done.Reply("+PONG\r\n");
    } else if (name == "ECHO" && a.size() == 2) {
      done.Reply(Bulk(a[1]));
    } else if (name == "ID") {
      done.Reply(absl::StrCat(":", session->id, "\r\n"));
    } else if (name == "DELAY" && a.size() == 3) {
      int ms = 0;
      EXPECT_TRUE(absl::SimpleAtoi(std::string(a[1]), &ms));
      // The arguments stay valid until Reply: read on the other thread.
      const std::string_view value = a[2];
      delayer.After(std::chrono::milliseconds(ms), std::move(done),
                    [value] { return Bulk(value); });
      return 1;
    } else if (name == "ADD") {
      size_t n = 0;
      std::string out;
      while (n < commands.size() && commands[n].args[0] == "ADD") {
        out += ":1\r\n";
        ++n;
      }
      int seen = max_taken.load();
      while (static_cast<int>(n) > seen && !max_taken.compare_exchange_weak(seen, n)) {
      }
      done.Reply(std::move(out));
      return n;
    } else if (name == "BIG" && a.size() == 2) {
      size_t n = 0;
      EXPECT_TRUE(absl::SimpleAtoi(std::string(a[1]), &n));
      big.fetch_add(1);
      done.Reply(Bulk(std::string(n, 'x')));
    } else if (name == "SET" && a.size() == 3) {
      int ms = 0;
      EXPECT_TRUE(absl::SimpleAtoi(std::string(a[1]), &ms));
      {
        std::lock_guard<std::mutex> lock(set_mu);
        set.insert(std::string(a[2]));
      }
      done.Applied();
      const int now = sets_pending.fetch_add(1) + 1;
      int seen = max_sets_pending.load();
      while (now > seen && !max_sets_pending.compare_exchange_weak(seen, now)) {
      }
      delayer.After(std::chrono::milliseconds(ms), std::move(done), [this] {
        sets_pending.fetch_sub(1);
        return std::string(":1\r\n");
      });
    } else if (name == "HAS" && a.size() == 2) {
      std::lock_guard<std::mutex> lock(set_mu);
      done.Reply(set.count(std::string(a[1])) > 0 ? ":1\r\n" : ":0\r\n");
    } else if (name == "AUTH") {
      session->authenticated = true;
      done.Reply("+OK\r\n");
    } else if (name == "RESET") {
      session->authenticated = false;
      done.Reply("+RESET\r\n");
    } else if (name == "QUIT") {
      done.Reply("+OK\r\n", [](Session* s) { s->close_after_reply = true; });
    } else if (name == "SQUIT") {  // as RedisCommands' QUIT: the session, at once
      session->close_after_reply = true;
      done.Reply("+OK\r\n");
    } else if (name == "MULTI") {
      session->multi = true;
      session->multi_failed = false;
      done.Reply("+OK\r\n");
    } else if (name == "EXEC") {
      session->multi = false;
      if (session->multi_failed) {
        session->multi_failed = false;
        done.Reply("-EXECABORT\r\n");
      } else {
        session->exec = true;
        done.Reply(absl::StrCat("*", session->multi_queued, "\r\n"));
      }
    } else if (name == "DISCARD") {
      session->multi = false;
      done.Reply("+OK\r\n");
    } else if (name == "AQUIT") {
      delayer.After(
          std::chrono::milliseconds(20), std::move(done), [] { return std::string("+OK\r\n"); },
          [](Session* s) { s->close_after_reply = true; });
    } else {
      done.Reply(absl::StrCat("-ERR unknown command '", name, "'\r\n"));
    }
    return 1;
  }
  void Closed(Session*) override { closed.fetch_add(1); }
  // After MULTI: MULTI, EXEC and DISCARD run, BAD is refused, the rest are
  // queued.
  Queueing Queue(Session* session, const Command& command, std::string* error) override {
    const std::string_view name = command.args[0];
    if (name == "MULTI" || name == "EXEC" || name == "DISCARD") return Queueing::kRun;
    if (name == "BAD") {
      session->multi_failed = true;
      *error = "-ERR bad\r\n";
      return Queueing::kRefuse;
    }
    return Queueing::kQueue;
  }

  std::atomic<int> executed{0};
  std::atomic<int> closed{0};
  std::atomic<int> max_taken{0};
  std::atomic<int> big{0};
  std::atomic<int> sets_pending{0};
  std::atomic<int> max_sets_pending{0};
  std::mutex set_mu;
  std::set<std::string> set;
  Delayer delayer;  // destroyed first: its pending replies go to live handles
};

// A blocking client socket with a receive timeout.
class Client {
 public:
  explicit Client(int port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    connected_ = ConnectLoopback(fd_, port);
  }
  ~Client() { Close(); }
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Reads and drops at most n bytes (waits for at least one).
  void Take(size_t n) {
    std::string tmp(n, '\0');
    (void)::recv(fd_, tmp.data(), n, 0);
  }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // One reply, raw ("+PONG\r\n", "$3\r\nabc\r\n", ...); "" at EOF or timeout.
  std::string Reply() {
    std::string line;
    if (!ReadLine(&line)) return "";
    if (line[0] != '$') return line;
    int64_t len = 0;
    if (!absl::SimpleAtoi(line.substr(1, line.size() - 3), &len) || len < 0) return line;
    std::string data;
    if (!ReadN(static_cast<size_t>(len) + 2, &data)) return "";
    return line + data;
  }
  // True if something (or EOF) can be read within `timeout`.
  bool WaitReadable(std::chrono::milliseconds timeout) {
    if (!buf_.empty()) return true;
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  }
  // True if the server closed the connection (EOF or reset) with nothing
  // more to read.
  bool AtEof() {
    char c;
    if (!buf_.empty()) return false;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

 private:
  bool Fill() {
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }
  bool ReadLine(std::string* line) {
    size_t pos;
    while ((pos = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = buf_.substr(0, pos + 2);
    buf_.erase(0, pos + 2);
    return true;
  }
  bool ReadN(size_t n, std::string* out) {
    while (buf_.size() < n) {
      if (!Fill()) return false;
    }
    *out = buf_.substr(0, n);
    buf_.erase(0, n);
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

// Reasons given to on_close, counted.
struct CloseLog {
  std::mutex mu;
  std::map<std::string, int> reasons;
  int Count(const std::string& r) {
    std::lock_guard<std::mutex> lock(mu);
    return reasons[r];
  }
};

class RespServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}) {
    if (options.listen.empty()) options.listen = "127.0.0.1:0";
    if (options.threads == 0) options.threads = 2;
    options.on_connect = [this] { connects_.fetch_add(1); };
    options.on_close = [this](std::string_view reason) {
      std::lock_guard<std::mutex> lock(log_.mu);
      ++log_.reasons[std::string(reason)];
    };
    auto server = RespServer::Start(options, &handler_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  template <class F>
  bool WaitFor(F f, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto deadline = Clock::now() + limit;
    while (!f()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  FakeHandler handler_;  // outlives server_
  std::atomic<int> connects_{0};
  CloseLog log_;
  std::unique_ptr<RespServer> server_;
};

TEST_F(RespServerTest, AnswersCommandsAndReportsItsAddress) {
  StartServer();
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address(), absl::StrCat("127.0.0.1:", server_->port()));
  Client c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  ASSERT_TRUE(c.Send("ECHO hello\r\n"));  // inline
  EXPECT_EQ(c.Reply(), "$5\r\nhello\r\n");
  ASSERT_TRUE(c.Send(Cmd({"ECHO", std::string_view("a\0\r\nb", 5)})));
  EXPECT_EQ(c.Reply(), Bulk(std::string_view("a\0\r\nb", 5)));
  EXPECT_EQ(server_->connections(), 1u);
}

TEST_F(RespServerTest, PipelinedRepliesKeepOrderWithSyncAndDelayedReplies) {
  StartServer();
  Client c(server_->port());
  std::mt19937 rng(17);
  std::string request;
  std::vector<std::string> expected;
  for (int i = 0; i < 300; ++i) {
    const std::string tag = absl::StrCat("v", i);
    switch (rng() % 3) {
      case 0:
        request += Cmd({"ECHO", tag});
        expected.push_back(Bulk(tag));
        break;
      case 1:
        request += Cmd({"DELAY", absl::StrCat(rng() % 3), tag});
        expected.push_back(Bulk(tag));
        break;
      default:
        request += Cmd({"PING"});
        expected.push_back("+PONG\r\n");
    }
  }
  ASSERT_TRUE(c.Send(request));
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(c.Reply(), expected[i]) << "reply " << i;
  EXPECT_EQ(server_->commands_in_flight(), 0u);
}

TEST_F(RespServerTest, DelayedReplyIsNotOvertakenByTheNextCommand) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"DELAY", "200", "x"}) + Cmd({"PING"})));
  const auto start = Clock::now();
  EXPECT_EQ(c.Reply(), Bulk("x"));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, HandlerTakesSeveralPipelinedCommands) {
  StartServer();
  Client c(server_->port());
  std::string request;
  for (int i = 0; i < 50; ++i) request += Cmd({"ADD", absl::StrCat(i)});
  request += Cmd({"PING"});
  ASSERT_TRUE(c.Send(request));
  for (int i = 0; i < 50; ++i) ASSERT_EQ(c.Reply(), ":1\r\n") << i;
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_GT(handler_.max_taken.load(), 1);
  EXPECT_LT(handler_.executed.load(), 51);
}

TEST_F(RespServerTest, ProtocolErrorIsAnsweredAfterEarlierRepliesThenCloses) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"PING"}) + "*1\r\n$x\r\n" + Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_EQ(c.Reply(), "-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_EQ(c.Reply(), "");  // closed; the PING after the error is not run
  c.Close();  // (the server drains unread input until the client closes, for 1 s at most)
  EXPECT_TRUE(WaitFor([&] { return log_.Count("protocol_error") == 1; }));
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }));
  EXPECT_EQ(handler_.executed.load(), 1);
}

TEST_F(RespServerTest, BulkLengthOverTheLimitIsRefusedBeforeItsData) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send("*2\r\n$4\r\nECHO\r\n$2147483648\r\n"));
  const std::string reply = c.Reply();
  EXPECT_THAT(reply, StartsWith("-ERR Protocol error"));
  EXPECT_THAT(reply, HasSubstr("2147483648"));
  EXPECT_EQ(c.Reply(), "");
}

TEST_F(RespServerTest, NegativeBulkLengthIsAnError) {
  StartServer();
  for (std::string_view bad : {"*1\r\n$-1\r\n", "*1\r\n$-7\r\n"}) {
    Client c(server_->port());
    ASSERT_TRUE(c.Send(bad));
    EXPECT_EQ(c.Reply(), "-ERR Protocol error: invalid bulk length\r\n") << bad;
    EXPECT_EQ(c.Reply(), "");
  }
}

TEST_F(RespServerTest, MillionArgumentHeaderIsRefusedAtOnce) {
  StartServer();
  Client c(server_->port());
  // Only the header: refused from it, not after a million arguments.
  ASSERT_TRUE(c.Send("*1000000\r\n"));
  const std::string reply = c.Reply();
  EXPECT_THAT(reply, StartsWith("-ERR Protocol error"));
  EXPECT_THAT(reply, HasSubstr("1000000"));
  EXPECT_EQ(c.Reply(), "");
}

TEST_F(RespServerTest, LargeArgumentArrivingInPiecesIsReadWhole) {
  StartServer();
  Client c(server_->port());
  std::string value(5 << 20, 'v');
  for (size_t i = 0; i < value.size(); i += 4099) value[i] = static_cast<char>('a' + i % 26);
  const std::string request = Cmd({"ECHO", value}) + Cmd({"PING"});
  std::thread sender([&] {
    for (size_t off = 0; off < request.size(); off += 100'000) {
      ASSERT_TRUE(c.Send(std::string_view(request).substr(off, 100'000)));
    }
  });
  EXPECT_EQ(c.Reply(), Bulk(value));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  sender.join();
}

TEST_F(RespServerTest, HalfACommandThenCloseIsQuiet) {
  StartServer();
  {
    Client c(server_->port());
    ASSERT_TRUE(c.Send("*2\r\n$4\r\nECHO\r\n$5\r\nab"));
  }
  EXPECT_TRUE(WaitFor([&] { return log_.Count("eof") == 1; }));
  EXPECT_TRUE(WaitFor([&] { return handler_.closed.load() == 1; }));
  EXPECT_EQ(handler_.executed.load(), 0);
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, HalfClosedClientStillGetsItsReplies) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"DELAY", "100", "x"}) + Cmd({"PING"})));
  c.ShutdownWrite();
  EXPECT_EQ(c.Reply(), Bulk("x"));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_EQ(c.Reply(), "");
}

TEST_F(RespServerTest, QuitClosesAfterItsReply) {
  StartServer();
  for (std::string_view quit : {"QUIT", "AQUIT"}) {
    Client c(server_->port());
    ASSERT_TRUE(c.Send(Cmd({"PING"}) + Cmd({quit}) + Cmd({"PING"})));
    EXPECT_EQ(c.Reply(), "+PONG\r\n");
    EXPECT_EQ(c.Reply(), "+OK\r\n");
    EXPECT_EQ(c.Reply(), "") << quit;
  }
  EXPECT_TRUE(WaitFor([&] { return log_.Count("quit") == 2; }));
  EXPECT_EQ(handler_.executed.load(), 4);
}

TEST_F(RespServerTest, IdleConnectionsAreClosed) {
  StartServer({.idle_timeout = absl::Milliseconds(200)});
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  const auto start = Clock::now();
  EXPECT_EQ(c.Reply(), "");
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150));
  EXPECT_TRUE(WaitFor([&] { return log_.Count("idle") == 1; }));
}

TEST_F(RespServerTest, CommandInFlightIsNotIdle) {
  StartServer({.idle_timeout = absl::Milliseconds(100)});
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"DELAY", "400", "x"})));
  EXPECT_EQ(c.Reply(), Bulk("x"));
}

TEST_F(RespServerTest, SlowClientIsHeldBackThenClosedWhileOthersAreServed) {
  StartServer({.threads = 1,
               .output_soft_limit = 256 << 10,
               .write_stall_timeout = absl::Milliseconds(500)});
  Client slow(server_->port(), /*rcvbuf=*/4096);
  std::string request;
  for (int i = 0; i < 200; ++i) request += Cmd({"BIG", "1000000"});
  ASSERT_TRUE(slow.Send(request));  // fits the socket buffers; the replies do not
  // Another connection on the same (only) thread is served meanwhile.
  Client other(server_->port());
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(other.Send(Cmd({"PING"})));
    ASSERT_EQ(other.Reply(), "+PONG\r\n");
  }
  EXPECT_TRUE(WaitFor([&] { return log_.Count("slow_client") == 1; }));
  // Backpressure: it stopped running commands once its output was over the
  // limit, far before the 200 it sent.
  EXPECT_LT(handler_.big.load(), 20);
  ASSERT_TRUE(other.Send(Cmd({"PING"})));
  EXPECT_EQ(other.Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, ClientsOverMaxConnectionsAreRefused) {
  StartServer({.max_connections = 2});
  Client a(server_->port()), b(server_->port());
  for (Client* c : {&a, &b}) {
    ASSERT_TRUE(c->Send(Cmd({"PING"})));
    ASSERT_EQ(c->Reply(), "+PONG\r\n");
  }
  Client refused(server_->port());
  EXPECT_EQ(refused.Reply(), "-ERR max number of clients reached\r\n");
  EXPECT_EQ(refused.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return log_.Count("max_clients") == 1; }));
  a.Close();
  ASSERT_TRUE(WaitFor([&] { return server_->connections() == 1; }));
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, ShutdownDrainsTheCommandInFlight) {
  StartServer();
  Client busy(server_->port()), other(server_->port());
  ASSERT_TRUE(other.Send(Cmd({"PING"})));
  ASSERT_EQ(other.Reply(), "+PONG\r\n");
  ASSERT_TRUE(busy.Send(Cmd({"DELAY", "300", "x"})));
  ASSERT_TRUE(WaitFor([&] { return server_->commands_in_flight() == 1; }));
  std::thread shutdown([&] { server_->Shutdown(absl::Seconds(10)); });
  // Once new connections are refused, commands get the shutting-down error.
  ASSERT_TRUE(WaitFor([&] { return !Client(server_->port()).connected(); }));
  ASSERT_TRUE(other.Send(Cmd({"PING"})));
  EXPECT_EQ(other.Reply(), "-ERR cuckood is shutting down\r\n");
  EXPECT_EQ(busy.Reply(), Bulk("x"));  // the drained command's reply
  EXPECT_EQ(busy.Reply(), "");
  EXPECT_EQ(other.Reply(), "");
  shutdown.join();
  EXPECT_EQ(server_->connections(), 0u);
  EXPECT_GE(log_.Count("shutdown"), 2);  // (and the probes accepted before the acceptor closed)
  EXPECT_EQ(handler_.closed.load(), connects_.load());
}

TEST_F(RespServerTest, ShutdownDrainIsBounded) {
  StartServer();
  Client busy(server_->port());
  ASSERT_TRUE(busy.Send(Cmd({"DELAY", "3000", "x"})));
  ASSERT_TRUE(WaitFor([&] { return server_->commands_in_flight() == 1; }));
  const auto start = Clock::now();
  server_->Shutdown(absl::Milliseconds(100));
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2500));
  EXPECT_EQ(busy.Reply(), "");
  server_.reset();  // the late reply (the delayer still holds it) is dropped
}

TEST_F(RespServerTest, AppliedCommandsLetTheNextOnesRunAndRepliesKeepTheirOrder) {
  StartServer();
  Client c(server_->port());
  // The first write's reply comes last of the three, yet goes out first;
  // HAS sees both writes, though neither is answered when it runs.
  ASSERT_TRUE(c.Send(Cmd({"SET", "300", "a"}) + Cmd({"SET", "150", "b"}) + Cmd({"HAS", "a"}) +
                     Cmd({"HAS", "b"}) + Cmd({"SET", "1", "c"}) + Cmd({"DELAY", "1", "d"}) +
                     Cmd({"PING"})));
  for (const char* want : {":1\r\n", ":1\r\n", ":1\r\n", ":1\r\n", ":1\r\n"}) {
    EXPECT_EQ(c.Reply(), want);
  }
  EXPECT_EQ(c.Reply(), Bulk("d"));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_EQ(handler_.max_sets_pending.load(), 3);  // all three were waiting at once
  EXPECT_EQ(server_->commands_in_flight(), 0u);
}

TEST_F(RespServerTest, NothingRunsAfterQuitEvenWhileEarlierRepliesWait) {
  StartServer();
  for (std::string_view quit : {"QUIT", "SQUIT", "AQUIT"}) {
    Client c(server_->port());
    const int before = handler_.executed.load();
    ASSERT_TRUE(c.Send(Cmd({"SET", "200", "q"}) + Cmd({quit}) + Cmd({"SET", "1", "after"}) +
                       Cmd({"PING"})));
    EXPECT_EQ(c.Reply(), ":1\r\n") << quit;
    EXPECT_EQ(c.Reply(), "+OK\r\n") << quit;
    EXPECT_EQ(c.Reply(), "") << quit;
    EXPECT_EQ(handler_.executed.load() - before, 2) << quit;
  }
  std::lock_guard<std::mutex> lock(handler_.set_mu);
  EXPECT_EQ(handler_.set.count("after"), 0u);
}

TEST_F(RespServerTest, AppliedCommandsWaitingAreBoundedByMaxPipelined) {
  StartServer({.max_pipelined = 3});
  Client c(server_->port());
  std::string request;
  for (int i = 0; i < 10; ++i) request += Cmd({"SET", "30", absl::StrCat("k", i)});
  ASSERT_TRUE(c.Send(request));
  for (int i = 0; i < 10; ++i) ASSERT_EQ(c.Reply(), ":1\r\n") << i;
  EXPECT_EQ(handler_.max_sets_pending.load(), 3);
}

TEST_F(RespServerTest, HalfClosedClientGetsTheRepliesOfItsAppliedCommands) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"SET", "200", "a"}) + Cmd({"SET", "100", "b"}) + Cmd({"HAS", "b"})));
  c.ShutdownWrite();
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return log_.Count("eof") == 1; }));
}

// Half of a command of one `bulk`-byte argument: the server sizes its
// buffer for the whole argument.
std::string HalfOfEcho(size_t bulk) {
  return absl::StrCat("*2\r\n$4\r\nECHO\r\n$", bulk, "\r\n", std::string(bulk / 2, 'x'));
}

TEST_F(RespServerTest, PastClientMemoryTheConnectionUsingTheMostIsClosed) {
  StartServer({.client_memory = 12 << 20});
  const size_t base = server_->client_memory();
  Client a(server_->port()), b(server_->port()), c(server_->port());
  ASSERT_TRUE(a.Send(HalfOfEcho(1 << 20)));
  ASSERT_TRUE(WaitFor([&] { return server_->client_memory() > base + (1 << 20); }));
  ASSERT_TRUE(b.Send(HalfOfEcho(8 << 20)));
  ASSERT_TRUE(WaitFor([&] { return server_->client_memory() > base + (9 << 20); }));
  EXPECT_EQ(server_->evicted_clients(), 0u);
  // c's buffer would take the total past 12 MiB: b, the largest, goes.
  ASSERT_TRUE(c.Send(HalfOfEcho(4 << 20)));
  EXPECT_THAT(b.Reply(), StartsWith("-ERR client memory limit: this connection held "));
  EXPECT_EQ(b.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return log_.Count("client_memory") == 1; }));
  EXPECT_EQ(server_->evicted_clients(), 1u);
  // The others are served whole.
  ASSERT_TRUE(a.Send(std::string((1 << 20) / 2, 'x') + "\r\n"));
  ASSERT_TRUE(c.Send(std::string((4 << 20) / 2, 'x') + "\r\n"));
  EXPECT_TRUE(a.Reply() == Bulk(std::string(1 << 20, 'x')));
  EXPECT_TRUE(c.Reply() == Bulk(std::string(4 << 20, 'x')));
  EXPECT_LE(server_->client_memory(), size_t{12} << 20);
  EXPECT_EQ(server_->evicted_clients(), 1u);
  // A closed connection's memory is given back at once.
  a.Close();
  c.Close();
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 0; }));
  EXPECT_EQ(server_->client_memory(), 0u);
}

TEST_F(RespServerTest, ClientMemoryCountsRepliesClientsDoNotRead) {
  StartServer({.client_memory = 6 << 20, .output_soft_limit = 1 << 20});
  std::vector<std::unique_ptr<Client>> readers_that_never_read;
  for (int i = 0; i < 8; ++i) {
    auto c = std::make_unique<Client>(server_->port(), /*rcvbuf=*/4096);
    std::string request;
    for (int j = 0; j < 4; ++j) request += Cmd({"BIG", "1000000"});
    ASSERT_TRUE(c->Send(request));
    readers_that_never_read.push_back(std::move(c));
  }
  // Each holds up to about 2 MB of replies: together they would be past 6 MiB.
  EXPECT_TRUE(WaitFor([&] { return handler_.big.load() >= 12; }));
  EXPECT_TRUE(WaitFor([&] { return server_->evicted_clients() >= 1; }));
  // (The ones chosen close on their own threads, a moment later.)
  EXPECT_TRUE(WaitFor([&] { return server_->client_memory() <= (size_t{6} << 20); }));
  Client other(server_->port());
  ASSERT_TRUE(other.Send(Cmd({"PING"})));
  EXPECT_EQ(other.Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, UnauthenticatedConnectionsAreCappedInNumberAndTime) {
  StartServer(
      {.auth_required = true, .max_unauthenticated = 2, .auth_timeout = absl::Milliseconds(300)});
  Client a(server_->port()), b(server_->port());
  ASSERT_TRUE(a.Send(Cmd({"PING"})));
  ASSERT_EQ(a.Reply(), "+PONG\r\n");
  ASSERT_TRUE(b.Send(Cmd({"PING"})));
  ASSERT_EQ(b.Reply(), "+PONG\r\n");
  EXPECT_EQ(server_->unauthenticated_connections(), 2u);
  // A third is served, and the oldest not authenticated makes room for it:
  // a flood of connections that never AUTH cannot lock out a new client.
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_THAT(a.Reply(), StartsWith("-ERR max number of unauthenticated clients reached"));
  EXPECT_EQ(a.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return log_.Count("max_unauthenticated") == 1; }));
  EXPECT_EQ(server_->unauthenticated_connections(), 2u);
  // An authenticated connection no longer counts, and has no time limit.
  ASSERT_TRUE(b.Send(Cmd({"AUTH"})));
  ASSERT_EQ(b.Reply(), "+OK\r\n");
  EXPECT_EQ(server_->unauthenticated_connections(), 1u);
  Client d(server_->port());
  ASSERT_TRUE(d.Send(Cmd({"PING"})));
  EXPECT_EQ(d.Reply(), "+PONG\r\n");
  EXPECT_EQ(log_.Count("max_unauthenticated"), 1);
  // c and d never authenticate: closed after auth_timeout.
  EXPECT_EQ(c.Reply(), "");
  EXPECT_EQ(d.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return log_.Count("auth_timeout") == 2; }));
  ASSERT_TRUE(b.Send(Cmd({"PING"})));
  EXPECT_EQ(b.Reply(), "+PONG\r\n");
  // RESET makes it unauthenticated again, with a new time limit.
  ASSERT_TRUE(b.Send(Cmd({"RESET"})));
  ASSERT_EQ(b.Reply(), "+RESET\r\n");
  EXPECT_EQ(server_->unauthenticated_connections(), 1u);
  EXPECT_EQ(b.Reply(), "");
  EXPECT_TRUE(WaitFor([&] { return server_->unauthenticated_connections() == 0; }));
}

TEST_F(RespServerTest, AFloodOfUnauthenticatedConnectionsDoesNotLockOutNewClients) {
  StartServer({.auth_required = true, .max_unauthenticated = 50});
  std::vector<std::unique_ptr<Client>> flood;
  for (int i = 0; i < 200; ++i) flood.push_back(std::make_unique<Client>(server_->port()));
  EXPECT_TRUE(WaitFor([&] { return log_.Count("max_unauthenticated") >= 150; }));
  EXPECT_LE(server_->unauthenticated_connections(), 51u);
  // Each newcomer AUTHs at once and is served; the oldest of the flood go.
  for (int i = 0; i < 20; ++i) {
    Client newcomer(server_->port());
    ASSERT_TRUE(newcomer.Send(Cmd({"AUTH"}) + Cmd({"PING"})));
    EXPECT_EQ(newcomer.Reply(), "+OK\r\n");
    EXPECT_EQ(newcomer.Reply(), "+PONG\r\n");
    flood.push_back(std::make_unique<Client>(server_->port()));
  }
  EXPECT_TRUE(WaitFor([&] { return log_.Count("max_unauthenticated") == 170; }));
  // The newest of the flood are still open.
  ASSERT_TRUE(flood.back()->Send(Cmd({"PING"})));
  EXPECT_EQ(flood.back()->Reply(), "+PONG\r\n");
}

TEST_F(RespServerTest, UnauthenticatedConnectionsShareASmallMemoryCap) {
  StartServer({.auth_required = true, .unauthenticated_memory = 500 << 10});
  Client authenticated(server_->port());
  ASSERT_TRUE(authenticated.Send(Cmd({"AUTH"})));
  EXPECT_EQ(authenticated.Reply(), "+OK\r\n");
  // Before AUTH a command has at most 10 arguments of 16 KiB: 9 of 15000
  // bytes and part of a tenth of 16000 make a connection hold about 155 KB.
  std::string partial = "*10\r\n";
  for (int i = 0; i < 9; ++i) partial += Bulk(std::string(15000, 'x'));
  partial += "$16000\r\n" + std::string(8000, 'y');
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<Client>(server_->port()));
    ASSERT_TRUE(clients.back()->Send(partial));
  }
  // Four do not fit in 500 KiB together: those holding the most go, with
  // an error that says why.
  EXPECT_TRUE(WaitFor([&] { return log_.Count("unauthenticated_memory") >= 1; }));
  EXPECT_LE(log_.Count("unauthenticated_memory"), 2);
  int told = 0;
  for (auto& c : clients) {
    if (!c->WaitReadable(std::chrono::milliseconds(200))) continue;
    const std::string reply = c->Reply();
    EXPECT_THAT(reply, StartsWith("-ERR unauthenticated clients memory limit"));
    told += reply.empty() ? 0 : 1;
  }
  EXPECT_GE(told, 1);
  // A client that AUTHs right after connecting is served.
  Client newcomer(server_->port());
  ASSERT_TRUE(newcomer.Send(Cmd({"AUTH"})));
  EXPECT_EQ(newcomer.Reply(), "+OK\r\n");
  // Authenticated connections are not held to it.
  ASSERT_TRUE(authenticated.Send(Cmd({"BIG", "1000000"})));
  EXPECT_TRUE(authenticated.Reply() == Bulk(std::string(1000000, 'x')));
}

TEST_F(RespServerTest, ClientOverTheOutputSoftLimitTooLongIsClosedEvenIfItReadsSometimes) {
  StartServer({.threads = 1,
               .output_soft_limit = 256 << 10,
               .output_soft_timeout = absl::Milliseconds(400)});
  Client slow(server_->port(), /*rcvbuf=*/4096);
  std::string request;
  for (int i = 0; i < 50; ++i) request += Cmd({"BIG", "1000000"});
  ASSERT_TRUE(slow.Send(request));
  // It takes a little now and then, so it is never stalled (60 s).
  bool closed = false;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!closed && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    closed = log_.Count("slow_client") == 1;
    slow.Take(100);  // reads a little
  }
  EXPECT_TRUE(closed);
}

TEST_F(RespServerTest, ManyConnectionsInParallel) {
  StartServer();
  constexpr int kClients = 200;
  constexpr int kThreads = 8;
  std::atomic<int> failures{0};
  std::mutex ids_mu;
  std::set<std::string> ids;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<Client>> clients;
      for (int i = t; i < kClients; i += kThreads) {
        clients.push_back(std::make_unique<Client>(server_->port()));
      }
      for (size_t i = 0; i < clients.size(); ++i) {
        std::string request = Cmd({"ID"});
        for (int j = 0; j < 20; ++j) {
          const std::string tag = absl::StrCat(t, "/", i, "/", j);
          request += j % 4 == 0 ? Cmd({"DELAY", "1", tag}) : Cmd({"ECHO", tag});
        }
        if (!clients[i]->Send(request)) failures.fetch_add(1);
      }
      for (size_t i = 0; i < clients.size(); ++i) {
        const std::string id = clients[i]->Reply();
        {
          std::lock_guard<std::mutex> lock(ids_mu);
          ids.insert(id);
        }
        for (int j = 0; j < 20; ++j) {
          const std::string tag = absl::StrCat(t, "/", i, "/", j);
          if (clients[i]->Reply() != Bulk(tag)) failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kClients));  // CLIENT IDs are unique
  EXPECT_EQ(connects_.load(), kClients);
}

TEST(RespServerStartTest, BadAddressesAreRefused) {
  FakeHandler handler;
  for (std::string listen : {"nocolon", "127.0.0.1:99999", "127.0.0.1:x", "::1:80", "[::1:80"}) {
    auto server = RespServer::Start({.listen = listen}, &handler);
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << listen;
  }
  auto first = RespServer::Start({.listen = "127.0.0.1:0", .threads = 1}, &handler);
  ASSERT_TRUE(first.ok());
  auto second = RespServer::Start(
      {.listen = absl::StrCat("127.0.0.1:", (*first)->port()), .threads = 1}, &handler);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("bind"));
}

// ---- MULTI ... EXEC: the connection's part (the queue, the held reply) ----

TEST_F(RespServerTest, QueuedCommandsRunOnlyAtExecAndItsReplyGoesOutWhole) {
  StartServer();
  Client c(server_->port());
  Client other(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"SET", "0", "tx"}) + Cmd({"DELAY", "300", "slow"}) +
                     Cmd({"HAS", "tx"}) + Cmd({"PING"})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(c.Reply(), "+QUEUED\r\n") << i;
  // Queued, not run: SET's item is not in the set yet.
  ASSERT_TRUE(other.Send(Cmd({"HAS", "tx"})));
  EXPECT_EQ(other.Reply(), ":0\r\n");
  const auto start = Clock::now();
  ASSERT_TRUE(c.Send(Cmd({"EXEC"}) + Cmd({"ECHO", "after"})));
  // Nothing of the array before its slowest command answered.
  EXPECT_FALSE(c.WaitReadable(std::chrono::milliseconds(200)));
  EXPECT_EQ(c.Reply(), "*4\r\n");
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(280));
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), "$4\r\nslow\r\n");
  EXPECT_EQ(c.Reply(), ":1\r\n");  // HAS ran after SET, within the EXEC
  EXPECT_EQ(c.Reply(), "+PONG\r\n");
  EXPECT_EQ(c.Reply(), "$5\r\nafter\r\n");
  ASSERT_TRUE(other.Send(Cmd({"HAS", "tx"})));
  EXPECT_EQ(other.Reply(), ":1\r\n");
}

// Found by the kill -9 test: a second pipelined EXEC ran while the first's
// writes waited to be durable, and the replies of the two were mixed.
TEST_F(RespServerTest, PipelinedTransactionsEachGetTheirWholeArrayInOrder) {
  StartServer();
  Client c(server_->port());
  std::string pipeline;
  std::vector<std::string> expected;
  for (int t = 0; t < 20; ++t) {
    pipeline += Cmd({"MULTI"});
    expected.push_back("+OK\r\n");
    const int n = t % 4;  // 0 to 3 commands, writes still waiting, delays
    for (int i = 0; i < n; ++i) {
      const std::string tag = absl::StrCat("t", t, "-", i);
      pipeline += i == 1 ? Cmd({"DELAY", "5", tag}) : Cmd({"SET", "20", tag});
      expected.push_back("+QUEUED\r\n");
    }
    pipeline += Cmd({"EXEC"});
    expected.push_back(absl::StrCat("*", n, "\r\n"));
    for (int i = 0; i < n; ++i) {
      expected.push_back(i == 1 ? Bulk(absl::StrCat("t", t, "-", i)) : ":1\r\n");
    }
    pipeline += Cmd({"ECHO", absl::StrCat("between-", t)});
    expected.push_back(Bulk(absl::StrCat("between-", t)));
  }
  ASSERT_TRUE(c.Send(pipeline));
  for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(c.Reply(), expected[i]) << i;
  EXPECT_GT(handler_.max_sets_pending.load(), 1) << "writes of several EXECs waited at once";
}

TEST_F(RespServerTest, ConsecutiveQueuedCommandsMayBeTakenTogetherButNotWithThoseAroundExec) {
  StartServer();
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"ADD"}) + Cmd({"MULTI"}) + Cmd({"ADD"}) + Cmd({"ADD"}) + Cmd({"ADD"}) +
                     Cmd({"EXEC"}) + Cmd({"ADD"})));
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Reply(), "+QUEUED\r\n");
  EXPECT_EQ(c.Reply(), "*3\r\n");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(c.Reply(), ":1\r\n");
  EXPECT_EQ(handler_.max_taken.load(), 3) << "the EXEC's three ADDs as one, and no more";
}

TEST_F(RespServerTest, RefusedOrOverTheCapsTheTransactionAbortsAndDiscardDropsIt) {
  ServerOptions options;
  options.max_multi_commands = 3;
  options.max_multi_bytes = 4096;
  StartServer(options);
  Client c(server_->port());
  ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"SET", "0", "a"}) + Cmd({"BAD"}) + Cmd({"EXEC"})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_EQ(c.Reply(), "+QUEUED\r\n");
  EXPECT_EQ(c.Reply(), "-ERR bad\r\n");
  EXPECT_EQ(c.Reply(), "-EXECABORT\r\n");
  // The count cap.
  ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"PING"}) + Cmd({"PING"}) + Cmd({"PING"}) +
                     Cmd({"PING"}) + Cmd({"EXEC"})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Reply(), "+QUEUED\r\n");
  const std::string refused = c.Reply();
  EXPECT_THAT(refused, StartsWith("-ERR MULTI queue limit: a transaction may queue at most 3 "
                                  "commands of 4096 bytes together (it holds 3 of "));
  EXPECT_EQ(c.Reply(), "-EXECABORT\r\n");
  // The byte cap.
  ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"ECHO", std::string(5000, 'x')}) + Cmd({"EXEC"})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_THAT(c.Reply(), HasSubstr("this one needs 51"));
  EXPECT_EQ(c.Reply(), "-EXECABORT\r\n");
  // DISCARD: the queue goes, and so does its memory.
  const size_t before = server_->client_memory();
  ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"ECHO", std::string(3000, 'y')})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_EQ(c.Reply(), "+QUEUED\r\n");
  EXPECT_GE(server_->client_memory(), before + 3000);
  ASSERT_TRUE(c.Send(Cmd({"DISCARD"}) + Cmd({"HAS", "a"})));
  EXPECT_EQ(c.Reply(), "+OK\r\n");
  EXPECT_EQ(c.Reply(), ":0\r\n") << "the aborted SET never ran";
  EXPECT_LT(server_->client_memory(), before + 3000);
}

TEST_F(RespServerTest, ClientsAreListedAndKilledOnTheirOwnThreads) {
  StartServer();
  Client a(server_->port()), b(server_->port()), c(server_->port());
  std::vector<uint64_t> ids;
  for (Client* x : {&a, &b, &c}) {
    ASSERT_TRUE(x->Send(Cmd({"ID"})));
    const std::string id = x->Reply();
    ids.push_back(std::stoull(id.substr(1)));
  }
  ASSERT_TRUE(b.Send(Cmd({"MULTI"}) + Cmd({"PING"})));
  EXPECT_EQ(b.Reply(), "+OK\r\n");
  EXPECT_EQ(b.Reply(), "+QUEUED\r\n");
  std::promise<std::vector<ClientInfo>> listed;
  server_->ListClients([&](std::vector<ClientInfo> all) { listed.set_value(std::move(all)); });
  const std::vector<ClientInfo> all = listed.get_future().get();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end(),
                             [](const ClientInfo& x, const ClientInfo& y) { return x.id < y.id; }));
  for (const ClientInfo& i : all) {
    SCOPED_TRACE(i.id);
    const bool is_b = i.id == ids[1];
    EXPECT_EQ(i.multi, is_b);
    EXPECT_EQ(i.multi_queued, is_b ? 1u : 0u);
    EXPECT_EQ(i.cmd, is_b ? "ping" : "id");
    EXPECT_THAT(i.laddr, HasSubstr(absl::StrCat(":", server_->port())));
    EXPECT_GT(i.memory, 0u);
    EXPECT_EQ(i.protocol, 2);
  }
  ClientFilter filter;
  filter.id = ids[2];
  std::promise<size_t> killed;
  server_->KillClients(filter, [&](size_t n) { killed.set_value(n); });
  EXPECT_EQ(killed.get_future().get(), 1u);
  EXPECT_TRUE(WaitFor([&] { return server_->connections() == 2; }));
  EXPECT_TRUE(c.AtEof());
  EXPECT_TRUE(WaitFor([&] { return log_.Count("killed") == 1; }));
  // The others go on.
  ASSERT_TRUE(a.Send(Cmd({"PING"})));
  EXPECT_EQ(a.Reply(), "+PONG\r\n");
}

}  // namespace
}  // namespace cuckoo::server::resp
