// RespServer over TLS (ServerOptions::tls_context, resp_tls.h), with a fake
// CommandHandler and OpenSSL clients: replies over TLS, large pipelined
// replies written in pieces, a plaintext client and a handshake that never
// comes closed as "tls_handshake", the memory counted per TLS connection,
// a new context for new connections (rotation), and shutdown with
// handshakes in flight. Runs under ASan and TSan (label "concurrency").
#include "server/resp/resp_tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/resp/resp_server.h"
#include "tests/util/loopback.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"
#include "tests/util/tls_client.h"

namespace cuckoo::server::resp {
namespace {

using ::cuckoo::testing::IssueCert;
using ::cuckoo::testing::MakeCa;
using ::cuckoo::testing::Pem;
using ::cuckoo::testing::TlsConn;
using ::cuckoo::testing::WritePem;

// A TCP connection to 127.0.0.1:port that says nothing (-1 if it failed).
int RawConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && !::cuckoo::testing::ConnectLoopback(fd, port)) {
    ::close(fd);
    return -1;
  }
  timeval tv{.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// PING -> +PONG; BIG n -> a bulk of n bytes ('x').
class Handler : public CommandHandler {
 public:
  size_t Execute(Session*, absl::Span<const Command> commands, Completion done) override {
    const std::vector<std::string_view>& a = commands[0].args;
    if (a[0] == "BIG" && a.size() == 2) {
      const size_t n = std::stoul(std::string(a[1]));
      done.Reply(absl::StrCat("$", n, "\r\n", std::string(n, 'x'), "\r\n"));
    } else {
      done.Reply("+PONG\r\n");
    }
    return 1;
  }
};

class RespTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = MakeCa("resp TLS CA");
    ca_path_ = dir_.path() + "/ca.pem";
    WritePem(ca_path_, ca_.cert);
    pair_path_ = WritePair("localhost");
  }

  // A server certificate for `cn` and its key in one file, as the server's
  // certificate watcher hands them over.
  std::string WritePair(const std::string& cn) {
    const Pem server =
        IssueCert(ca_, {.common_name = cn, .dns_sans = {"localhost"}, .ip_sans = {"127.0.0.1"}});
    const std::string path = dir_.path() + "/" + cn + ".pair.pem";
    WritePem(path, server.key + server.cert);
    return path;
  }

  void Start(ServerOptions options = {}) {
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> c = MakeTlsContext(pair_path_, "");
    ASSERT_TRUE(c.ok()) << c.status();
    context_ = *c;
    options.listen = "127.0.0.1:0";
    options.threads = 2;
    options.tls_context = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return context_;
    };
    options.on_close = [this](std::string_view reason) {
      std::lock_guard<std::mutex> lock(mu_);
      ++closed_[std::string(reason)];
    };
    absl::StatusOr<std::unique_ptr<RespServer>> s = RespServer::Start(options, &handler_);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  int Closed(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_[reason];
  }

  template <typename F>
  static bool Eventually(F f) {
    for (int i = 0; i < 100; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return f();
  }

  ::cuckoo::testing::TempDir dir_;
  Pem ca_;
  std::string ca_path_, pair_path_;
  Handler handler_;
  std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_;
  std::map<std::string, int> closed_;
  std::unique_ptr<RespServer> server_;
};

TEST_F(RespTlsTest, RepliesComeOverTlsInOrderAlsoWhenLarge) {
  Start();
  TlsConn c(server_->port(), ca_path_);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c.Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
  // Pipelined: replies much larger than a TLS record (16 KiB) and than the
  // socket buffer, interleaved with small ones, in order.
  std::string batch;
  const std::vector<size_t> sizes = {1, 300000, 5, 70000, 1 << 20, 3};
  for (size_t n : sizes) {
    const std::string arg = std::to_string(n);
    batch += absl::StrCat("*2\r\n$3\r\nBIG\r\n$", arg.size(), "\r\n", arg, "\r\n");
  }
  ASSERT_TRUE(c.Send(batch));
  for (size_t n : sizes) {
    EXPECT_EQ(c.ReadLine(), absl::StrCat("$", n));
    EXPECT_EQ(c.ReadBytes(n), std::string(n, 'x'));
    EXPECT_EQ(c.ReadBytes(2), "\r\n");
  }
}

TEST_F(RespTlsTest, APlaintextClientIsClosedAsAFailedHandshake) {
  Start();
  const int fd = RawConnect(server_->port());
  ASSERT_GE(fd, 0);
  const std::string ping = "*1\r\n$4\r\nPING\r\n";
  ASSERT_EQ(::write(fd, ping.data(), ping.size()), static_cast<ssize_t>(ping.size()));
  char buf[256];
  ssize_t n;
  std::string got;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.find("PONG"), std::string::npos);
  EXPECT_TRUE(Eventually([&] { return Closed("tls_handshake") == 1; }));
}

TEST_F(RespTlsTest, AHandshakeThatNeverComesIsClosedAfterTheTimeout) {
  Start({.tls_handshake_timeout = absl::Milliseconds(300)});
  const int fd = RawConnect(server_->port());
  ASSERT_GE(fd, 0);
  const auto start = std::chrono::steady_clock::now();
  char buf[16];
  EXPECT_LE(::read(fd, buf, sizeof buf), 0);  // closed by the server
  ::close(fd);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_TRUE(Eventually([&] { return Closed("tls_handshake") == 1; }));
  EXPECT_EQ(server_->connections(), 0u);
}

TEST_F(RespTlsTest, EachTlsConnectionIsCountedInTheClientMemory) {
  Start();
  const size_t before = server_->client_memory();
  std::vector<std::unique_ptr<TlsConn>> conns;
  for (int i = 0; i < 20; ++i) {
    conns.push_back(std::make_unique<TlsConn>(server_->port(), ca_path_));
    ASSERT_EQ(conns.back()->Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
  }
  EXPECT_GE(server_->client_memory() - before, 20 * kTlsConnectionBytes);
  conns.clear();
  EXPECT_TRUE(Eventually([&] { return server_->connections() == 0; }));
  EXPECT_TRUE(Eventually([&] { return server_->client_memory() == 0; }));
}

// The context the option returns is taken per connection: a new one (a
// rotated certificate) serves new connections while an open one keeps its.
TEST_F(RespTlsTest, ANewContextServesNewConnectionsAndOpenOnesKeepTheirs) {
  Start();
  TlsConn old(server_->port(), ca_path_);
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_EQ(old.PeerCommonName(), "localhost");
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> rotated =
      MakeTlsContext(WritePair("rotated"), "");
  ASSERT_TRUE(rotated.ok()) << rotated.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    context_ = *rotated;
  }
  TlsConn fresh(server_->port(), ca_path_);
  ASSERT_TRUE(fresh.ok()) << fresh.error();
  EXPECT_EQ(fresh.PeerCommonName(), "rotated");
  EXPECT_EQ(old.Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
  EXPECT_EQ(fresh.Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
}

TEST_F(RespTlsTest, MakeTlsContextNamesAFileThatDoesNotLoad) {
  absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> c =
      MakeTlsContext(dir_.path() + "/missing.pem", "");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("missing.pem"));
  c = MakeTlsContext(pair_path_, dir_.path() + "/no-ca.pem");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), ::testing::HasSubstr("client CA"));
}

// Shutdown with connections open, mid-handshake (a TCP connection that sent
// nothing) and established: every one closes, nothing leaks (ASan), no race
// (TSan).
TEST_F(RespTlsTest, ShutdownClosesHandshakingAndEstablishedConnections) {
  Start();
  std::vector<int> raw;
  for (int i = 0; i < 5; ++i) raw.push_back(RawConnect(server_->port()));
  std::vector<std::unique_ptr<TlsConn>> conns;
  for (int i = 0; i < 5; ++i) {
    conns.push_back(std::make_unique<TlsConn>(server_->port(), ca_path_));
    ASSERT_EQ(conns.back()->Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
  }
  server_->Shutdown(absl::Seconds(1));
  EXPECT_EQ(server_->connections(), 0u);
  for (int fd : raw) ::close(fd);
}

}  // namespace
}  // namespace cuckoo::server::resp
