// TLS on the Redis port: a cuckood started with --tls-cert/--tls-key (and
// --tls-client-ca for mutual TLS) serves the Redis port over TLS with the
// gRPC port's certificate, reloaded with it. Tried with redis-cli --tls and
// redis-py ssl=True (Debian's, clients nobody here wrote), and with a TLS
// client of OpenSSL's here for what those cannot show: the certificate a
// new connection gets after a rotation, a handshake that never comes, and
// what thousands of TLS connections cost the process (RSS) against what the
// port counts for them (kTlsConnectionBytes). Certificates are made fresh
// per test (tests/util/test_pki.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/redis_test_util.h"
#include "tests/util/http.h"
#include "tests/util/test_pki.h"
#include "tests/util/tls_client.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kPython[] = "/usr/bin/python3";

// Polls `done` every 100 ms until it holds or `limit` passed.
template <typename F>
bool WaitFor(F done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

class RedisTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = MakeCa("cuckoo Redis TLS CA");
    ca_path_ = dir_.path() + "/ca.pem";
    cert_path_ = dir_.path() + "/server.pem";
    key_path_ = dir_.path() + "/server.key";
    WritePem(ca_path_, ca_.cert);
    Rotate("localhost");
    const Pem client =
        IssueCert(ca_, {.common_name = "batch-job", .client = true, .server = false});
    client_cert_ = dir_.path() + "/client.pem";
    client_key_ = dir_.path() + "/client.key";
    WritePem(client_cert_, client.cert);
    WritePem(client_key_, client.key);
  }

  // A new server certificate and key for `common_name`, both replaced at
  // once (as a mounted Secret is).
  void Rotate(const std::string& common_name) {
    const Pem server = IssueCert(
        ca_, {.common_name = common_name, .dns_sans = {"localhost"}, .ip_sans = {"127.0.0.1"}});
    WriteSecretVolume(dir_.path() + "/secret", {{"tls.crt", server.cert}, {"tls.key", server.key}});
    cert_path_ = dir_.path() + "/secret/tls.crt";
    key_path_ = dir_.path() + "/secret/tls.key";
  }

  void Start(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--tls-cert=" + cert_path_, "--tls-key=" + key_path_};
    flags.insert(flags.end(), extra.begin(), extra.end());
    server_ = std::make_unique<RedisCuckood>(data_.path(), flags);
    ASSERT_TRUE(server_->ready()) << server_->Log();
    ASSERT_GT(server_->redis_port(), 0) << server_->Log();
  }

  Result Cli(const std::vector<std::string>& args, bool tls = true) {
    std::vector<std::string> argv = {kRedisCli, "-h", "127.0.0.1", "-p",
                                     std::to_string(server_->redis_port())};
    if (tls) {
      argv.insert(argv.end(), {"--tls", "--cacert", ca_path_});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }

  double Closed(const std::string& reason) {
    return MetricValue(Scrape(server_->admin_port()), "cuckood_redis_connections_closed_total",
                       {{"reason", reason}})
        .value_or(0);
  }

  TempDir dir_, data_;
  Pem ca_;
  std::string ca_path_, cert_path_, key_path_, client_cert_, client_key_;
  std::unique_ptr<RedisCuckood> server_;
};

TEST_F(RedisTlsTest, RedisCliOverTlsWorksAndAPlaintextClientGetsNothing) {
  Start();
  EXPECT_THAT(server_->Log(), HasSubstr(" with TLS"));
  Result add = Cli({"CF.ADD", "users-seen", "alice"});
  EXPECT_EQ(add.code, 0) << add.out << add.err;
  EXPECT_EQ(add.out, "1\n") << add.err;
  Result exists = Cli({"CF.MEXISTS", "users-seen", "alice", "bob"});
  EXPECT_EQ(exists.out, "1\n0\n") << exists.err;
  // Plaintext to the TLS port: no reply (the bytes are not a TLS hello),
  // and the connection is counted as a failed handshake.
  const double before = Closed("tls_handshake");
  Result plain = Cli({"PING"}, /*tls=*/false);
  EXPECT_THAT(plain.out + plain.err, Not(HasSubstr("PONG")));
  EXPECT_TRUE(WaitFor([&] { return Closed("tls_handshake") > before; }))
      << Scrape(server_->admin_port()).size();
}

TEST_F(RedisTlsTest, RedisPyWithSslTrue) {
  Start();
  const std::string script =
      "import redis, sys\n"
      "r = redis.Redis(host='127.0.0.1', port=int(sys.argv[1]), ssl=True, "
      "ssl_ca_certs=sys.argv[2], socket_timeout=10)\n"
      "assert r.ping() is True\n"
      "assert r.cf().create('py-tls', 1000) is True\n"
      "assert r.cf().add('py-tls', 'x') == 1\n"
      "assert r.cf().exists('py-tls', 'x') == 1\n"
      "p = r.pipeline(transaction=False)\n"
      "p.execute_command('CF.EXISTS', 'py-tls', 'x')\n"
      "p.execute_command('CF.EXISTS', 'py-tls', 'y')\n"
      "assert p.execute() == [1, 0], 'pipeline'\n"
      "print('ok redis-py ssl')\n";
  Result r = RunProcess({kPython, "-c", script, std::to_string(server_->redis_port()), ca_path_});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "ok redis-py ssl\n") << r.err;
}

TEST_F(RedisTlsTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  Start({"--tls-client-ca=" + ca_path_});
  EXPECT_THAT(server_->Log(), HasSubstr(" with mutual TLS"));
  Result without = Cli({"PING"});
  EXPECT_THAT(without.out, Not(HasSubstr("PONG"))) << without.err;
  Result with = Cli({"--cert", client_cert_, "--key", client_key_, "PING"});
  EXPECT_EQ(with.out, "PONG\n") << with.err;
  // A certificate from another CA is refused too.
  const Pem stranger_ca = MakeCa("another CA");
  const Pem stranger =
      IssueCert(stranger_ca, {.common_name = "intruder", .client = true, .server = false});
  WritePem(dir_.path() + "/stranger.pem", stranger.cert);
  WritePem(dir_.path() + "/stranger.key", stranger.key);
  TlsConn foreign(server_->redis_port(), ca_path_, dir_.path() + "/stranger.pem",
                  dir_.path() + "/stranger.key");
  EXPECT_EQ(foreign.Call("*1\r\n$4\r\nPING\r\n"), "");
  TlsConn good(server_->redis_port(), ca_path_, client_cert_, client_key_);
  EXPECT_EQ(good.Call("*1\r\n$4\r\nPING\r\n"), "+PONG") << good.error();
}

// The certificate is reloaded with the gRPC port's: new connections get the
// new one, a connection opened before keeps working.
TEST_F(RedisTlsTest, ARotatedCertificateIsServedToNewConnections) {
  Start({"--tls-reload-interval=1s"});
  TlsConn before(server_->redis_port(), ca_path_);
  ASSERT_TRUE(before.ok()) << before.error();
  EXPECT_EQ(before.PeerCommonName(), "localhost");
  Rotate("rotated.localhost");
  EXPECT_TRUE(WaitFor(
      [&] {
        return TlsConn(server_->redis_port(), ca_path_).PeerCommonName() == "rotated.localhost";
      },
      std::chrono::seconds(20)))
      << server_->Log();
  EXPECT_EQ(before.Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
}

// With --redis-plaintext the port stays plaintext beside a TLS gRPC port.
TEST_F(RedisTlsTest, RedisPlaintextKeepsThePortPlaintext) {
  Start({"--redis-plaintext"});
  EXPECT_THAT(server_->Log(), Not(HasSubstr(" with TLS")));
  Result plain = Cli({"PING"}, /*tls=*/false);
  EXPECT_EQ(plain.out, "PONG\n") << plain.err;
}

// What a TLS connection costs the process, against what the port counts for
// it: 1000 connections that completed their handshake and answered a PING.
// The resident memory they add (measured) must stay within what the client
// memory budget counts for them (kTlsConnectionBytes plus the buffers), so
// --redis-client-memory bounds TLS clients too.
TEST_F(RedisTlsTest, ThousandsOfTlsConnectionsCostNoMoreThanTheyAreCounted) {
  Start({"--redis-max-clients=5000"});
  const pid_t pid = server_->process().pid();
  // One connection first: the threads' and OpenSSL's one-time costs.
  TlsConn warm(server_->redis_port(), ca_path_);
  ASSERT_EQ(warm.Call("*1\r\n$4\r\nPING\r\n"), "+PONG");
  const uint64_t rss_before = RssKib(pid);
  const auto counted = [&] {
    return MetricValue(Scrape(server_->admin_port()), "cuckood_redis_client_memory_bytes", {})
        .value_or(0);
  };
  const double counted_before = counted();
  constexpr int kConnections = 1000;
  std::vector<std::unique_ptr<TlsConn>> conns;
  for (int i = 0; i < kConnections; ++i) {
    conns.push_back(std::make_unique<TlsConn>(server_->redis_port(), ca_path_));
    ASSERT_EQ(conns.back()->Call("*1\r\n$4\r\nPING\r\n"), "+PONG") << i << conns.back()->error();
  }
  const uint64_t rss_after = RssKib(pid);
  const double counted_after = counted();
  const double rss_per = (static_cast<double>(rss_after) - rss_before) * 1024 / kConnections;
  const double counted_per = (counted_after - counted_before) / kConnections;
  std::printf("%d TLS connections: RSS +%.0f bytes each, counted %.0f bytes each\n", kConnections,
              rss_per, counted_per);
  EXPECT_GT(counted_per, 96 << 10);
  EXPECT_LT(rss_per, counted_per);
}

}  // namespace
}  // namespace cuckoo::testing
