// Issue 15 against an in-process cuckood: TLS and mutual TLS handshakes,
// callers identified by their client certificate, certificate rotation while
// traffic runs, reloads of the access file, the start-up checks of the TLS
// files, and the security metrics. Certificates are made per test
// (tests/util/test_pki.h).
#include <gmock/gmock.h>
#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/access_token.h"
#include "client/cuckoo_client.h"
#include "server/config/config.h"
#include "server/security/tls.h"
#include "server/server.h"
#include "tests/util/http.h"
#include "tests/util/temp_dir.h"
#include "tests/util/test_pki.h"
#include "tests/util/test_server.h"

namespace cuckoo::testing {
namespace {

namespace v1 = ::cuckoo::v1;
using ::testing::HasSubstr;

constexpr absl::StatusCode kOk = absl::StatusCode::kOk;
constexpr absl::StatusCode kUnavailable = absl::StatusCode::kUnavailable;
constexpr absl::StatusCode kUnauthenticated = absl::StatusCode::kUnauthenticated;
constexpr absl::StatusCode kPermissionDenied = absl::StatusCode::kPermissionDenied;

// Polls `done` every 50ms until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (done()) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

// The server's certificate: for "localhost" (the name clients check) and
// 127.0.0.1.
Pem ServerCert(const Pem& ca, absl::Duration not_before = -absl::Hours(1),
               absl::Duration not_after = absl::Hours(24)) {
  return IssueCert(ca, {.common_name = "cuckood",
                        .dns_sans = {"localhost"},
                        .ip_sans = {"127.0.0.1"},
                        .not_before = not_before,
                        .not_after = not_after});
}

Pem ClientCert(const Pem& ca, const std::string& common_name,
               const std::vector<std::string>& uri_sans = {},
               const std::string& organization = "") {
  return IssueCert(ca, {.common_name = common_name,
                        .uri_sans = uri_sans,
                        .organization = organization,
                        .client = true,
                        .server = false});
}

// TLS trusting `ca` only, checking the name "localhost"; mutual TLS with
// `client` if given.
client::TlsOptions Tls(const Pem& ca, const Pem* client = nullptr) {
  client::TlsOptions tls;
  tls.enabled = true;
  tls.root_certs_pem = ca.cert;
  tls.server_name = "localhost";
  if (client != nullptr) {
    tls.cert_chain_pem = client->cert;
    tls.private_key_pem = client->key;
  }
  return tls;
}

// A client on a channel of its own (its own subchannels too: a channel that
// shared another's connection would not make a handshake), without retries.
std::unique_ptr<client::Client> Connect(const std::string& address, const client::TlsOptions& tls,
                                        const std::string& token = "") {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::ChannelCredentials> credentials = client::ChannelCredentials(tls, args);
  client::ClientOptions options;
  options.token = token;
  options.tls = tls;
  options.timeout = absl::Seconds(5);
  options.retry_timeout = absl::ZeroDuration();
  return std::make_unique<client::Client>(grpc::CreateCustomChannel(address, credentials, args),
                                          options);
}

absl::StatusCode InfoCode(const std::string& address, const client::TlsOptions& tls,
                          const std::string& token = "") {
  return Connect(address, tls, token)->ServerInfo().status().code();
}

absl::Status CreateFilter(client::Client& c, const std::string& name) {
  v1::CreateFilterRequest create;
  create.set_name(name);
  create.set_capacity(1000);
  create.set_false_positive_rate(0.01);
  return c.CreateFilter(create).status();
}

absl::StatusCode InsertCode(client::Client& c, const std::string& filter) {
  const std::vector<std::string_view> keys = {"k"};
  return c.Insert(filter, keys).status().code();
}

absl::StatusCode LookupCode(client::Client& c, const std::string& filter) {
  const std::vector<std::string_view> keys = {"k"};
  return c.Lookup(filter, keys).status().code();
}

std::string TokenLine(const std::string& name, const std::string& token,
                      const std::string& grants) {
  return absl::StrCat("token ", name, " sha256:", client::TokenSha256Hex(token), " ", grants, "\n");
}

std::optional<double> Metric(const server::CuckooServer& s, const std::string& name,
                             const std::map<std::string, std::string>& labels = {}) {
  return MetricValue(Scrape(s.admin_port()), name, labels);
}

class SecurityTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }
  // Writes `contents` to the file `name` (atomically) and returns its path.
  std::string Write(const std::string& name, const std::string& contents) {
    WritePem(Path(name), contents);
    return Path(name);
  }
  server::ServerConfig Config() { return TestConfig(Path("data")); }
  // TLS with `pem` as the server's certificate and key.
  server::ServerConfig TlsConfig(const Pem& pem) {
    server::ServerConfig c = Config();
    c.tls_cert = Write("server.crt", pem.cert);
    c.tls_key = Write("server.key", pem.key);
    return c;
  }
  std::unique_ptr<server::CuckooServer> Start(const server::ServerConfig& config) {
    absl::StatusOr<std::unique_ptr<server::CuckooServer>> s = server::CuckooServer::Start(config);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  TempDir dir_;
  const Pem ca_ = MakeCa("cuckoo test CA");
  const Pem other_ca_ = MakeCa("another CA");
};

// --- 1. Handshakes that must not succeed -----------------------------------

TEST_F(SecurityTest, TlsClientsMustTrustTheServersCaAndPlaintextDoesNotGetThrough) {
  auto server = Start(TlsConfig(ServerCert(ca_)));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_)), kOk);
  EXPECT_EQ(InfoCode(server->address(), Tls(other_ca_)), kUnavailable);
  EXPECT_EQ(InfoCode(server->address(), client::TlsOptions{}), kUnavailable);
}

TEST_F(SecurityTest, MutualTlsRefusesClientsWithoutACertificateOrWithOneFromAnotherCa) {
  server::ServerConfig config = TlsConfig(ServerCert(ca_));
  config.tls_client_ca = Write("client-ca.crt", ca_.cert);
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  const Pem good = ClientCert(ca_, "good-client");
  const Pem foreign = ClientCert(other_ca_, "good-client");
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_, &good)), kOk);
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_)), kUnavailable);
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_, &foreign)), kUnavailable);
  EXPECT_EQ(InfoCode(server->address(), client::TlsOptions{}), kUnavailable);
}

TEST_F(SecurityTest, AnExpiredServerCertificateIsRefusedByTheClient) {
  // The server starts with it (and says so in its log); clients refuse it.
  auto server = Start(TlsConfig(ServerCert(ca_, -absl::Hours(48), -absl::Hours(24))));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_)), kUnavailable);
}

// --- 2. Callers identified by their client certificate ---------------------

TEST_F(SecurityTest, ClientCertificatesNamedInTheAccessFileAreCallersWithTheirGrants) {
  const std::string ops_token = "ck_ops_token";
  const std::string reader_token = "ck_cart_reader";
  server::ServerConfig config = TlsConfig(ServerCert(ca_));
  config.tls_client_ca = Write("client-ca.crt", ca_.cert);
  config.auth_tokens = Write(
      "access", absl::StrCat(TokenLine("ops", ops_token, "admin:*"),
                             TokenLine("cart-reader", reader_token, "read:cart.*"),
                             "cert cart cn:cart-service write:cart.*\n",
                             "cert batch san:spiffe://acme/batch read:billing.*\n",
                             "cert laptop subject:\"CN=ops-laptop,O=Acme Corp\" admin:cart.*\n"));
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  const std::string& address = server->address();
  const Pem cart = ClientCert(ca_, "cart-service");
  const Pem batch = ClientCert(ca_, "batch-7", {"spiffe://acme/batch"});
  const Pem laptop = ClientCert(ca_, "ops-laptop", {}, "Acme Corp");
  const Pem laptop_elsewhere = ClientCert(ca_, "ops-laptop", {}, "Elsewhere");
  const Pem stranger = ClientCert(ca_, "stranger");

  auto ops = Connect(address, Tls(ca_, &stranger), ops_token);
  ASSERT_TRUE(CreateFilter(*ops, "cart.items").ok());
  ASSERT_TRUE(CreateFilter(*ops, "billing.users").ok());

  // cn: write on cart.*, nothing else.
  auto by_cn = Connect(address, Tls(ca_, &cart));
  EXPECT_EQ(InsertCode(*by_cn, "cart.items"), kOk);
  EXPECT_EQ(LookupCode(*by_cn, "billing.users"), kPermissionDenied);
  EXPECT_EQ(CreateFilter(*by_cn, "cart.more").code(), kPermissionDenied);
  // san: read on billing.*.
  auto by_san = Connect(address, Tls(ca_, &batch));
  EXPECT_EQ(LookupCode(*by_san, "billing.users"), kOk);
  EXPECT_EQ(InsertCode(*by_san, "billing.users"), kPermissionDenied);
  EXPECT_EQ(LookupCode(*by_san, "cart.items"), kPermissionDenied);
  // subject: the whole subject, RFC 2253, quoted as the spec writes it (it
  // has a space); the same CN in another organization is someone else.
  auto by_subject = Connect(address, Tls(ca_, &laptop));
  EXPECT_EQ(CreateFilter(*by_subject, "cart.more").code(), kOk);
  EXPECT_EQ(LookupCode(*by_subject, "billing.users"), kPermissionDenied);
  auto not_subject = Connect(address, Tls(ca_, &laptop_elsewhere));
  EXPECT_EQ(LookupCode(*not_subject, "cart.items"), kUnauthenticated);
  // A certificate the CA signed but no entry names.
  auto unknown = Connect(address, Tls(ca_, &stranger));
  absl::Status refused = unknown->ServerInfo().status();
  EXPECT_EQ(refused.code(), kUnauthenticated);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("CN=stranger"));
  // A token alongside a certificate is the identity: the cart certificate
  // may write cart.items, its read-only token may not; the stranger's
  // certificate with the ops token may do anything.
  auto token_wins = Connect(address, Tls(ca_, &cart), reader_token);
  EXPECT_EQ(LookupCode(*token_wins, "cart.items"), kOk);
  EXPECT_EQ(InsertCode(*token_wins, "cart.items"), kPermissionDenied);
  EXPECT_EQ(LookupCode(*ops, "billing.users"), kOk);
  auto bad_token = Connect(address, Tls(ca_, &cart), "ck_nobody");
  EXPECT_EQ(InsertCode(*bad_token, "cart.items"), kUnauthenticated);

  EXPECT_GE(Metric(*server, "cuckood_auth_failures_total",
                   {{"method", "GetServerInfo"}, {"reason", "unknown_certificate"}})
                .value_or(0),
            1);
}

// --- 3. Certificate rotation -----------------------------------------------

class RotationTest : public SecurityTest {
 protected:
  // The server's certificate and key as a Kubernetes Secret volume.
  server::ServerConfig VolumeConfig(const Pem& pem) {
    Rotate(pem.cert, pem.key);
    server::ServerConfig c = Config();
    c.tls_cert = Path("secret/tls.crt");
    c.tls_key = Path("secret/tls.key");
    c.tls_reload_interval = absl::Seconds(1);
    return c;
  }
  void Rotate(const std::string& cert, const std::string& key) {
    WriteSecretVolume(Path("secret"), {{"tls.crt", cert}, {"tls.key", key}});
  }
};

TEST_F(RotationTest, ANewCertificateFromANewCaIsServedToNewConnectionsWithoutBreakingTraffic) {
  auto server = Start(VolumeConfig(ServerCert(ca_)));
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto traffic = Connect(address, Tls(ca_));
  ASSERT_TRUE(CreateFilter(*traffic, "f").ok());
  ASSERT_EQ(InsertCode(*traffic, "f"), kOk);

  // Lookups on one channel (one connection) all through the rotation.
  std::atomic<bool> stop{false};
  std::atomic<int> lookups{0}, failures{0};
  std::string first_failure;
  std::thread lookup_thread([&] {
    const std::vector<std::string_view> keys = {"k"};
    while (!stop.load()) {
      absl::StatusOr<std::vector<bool>> found = traffic->Lookup("f", keys);
      if (!found.ok() || found->size() != 1 || !(*found)[0]) {
        if (failures.fetch_add(1) == 0) {
          first_failure = found.ok() ? "wrong answer" : found.status().ToString();
        }
      }
      lookups.fetch_add(1);
    }
  });
  ASSERT_TRUE(Eventually([&] { return lookups.load() > 10; }));

  const Pem new_ca = MakeCa("the new CA");
  const Pem rotated = ServerCert(new_ca);
  Rotate(rotated.cert, rotated.key);
  const bool new_ca_works =
      Eventually([&] { return InfoCode(address, Tls(new_ca)) == kOk; }, absl::Seconds(10));
  const int lookups_at_rotation = lookups.load();
  EXPECT_TRUE(new_ca_works);
  EXPECT_EQ(InfoCode(address, Tls(ca_)), kUnavailable);
  // The traffic went on after the rotation, on its connection.
  EXPECT_TRUE(Eventually([&] { return lookups.load() > lookups_at_rotation + 10; }));
  stop = true;
  lookup_thread.join();
  EXPECT_EQ(failures.load(), 0) << first_failure;
  EXPECT_EQ(LookupCode(*traffic, "f"), kOk);
}

TEST_F(RotationTest, AKeyThatDoesNotMatchItsCertificateIsNotTaken) {
  auto server = Start(VolumeConfig(ServerCert(ca_)));
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  const Pem new_ca = MakeCa("the new CA");
  const Pem rotated = ServerCert(new_ca);
  // The new certificate with another key: the server keeps the last good
  // pair. Checked with new connections over 3 reload intervals.
  Rotate(rotated.cert, ServerCert(new_ca).key);
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    ASSERT_EQ(InfoCode(address, Tls(ca_)), kOk);
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_EQ(InfoCode(address, Tls(new_ca)), kUnavailable);
  // Its own key: taken.
  Rotate(rotated.cert, rotated.key);
  EXPECT_TRUE(Eventually([&] { return InfoCode(address, Tls(new_ca)) == kOk; }));
}

TEST_F(RotationTest, AMutualTlsClientCaRotatesToo) {
  const Pem new_client_ca = MakeCa("new client CA");
  server::ServerConfig config = VolumeConfig(ServerCert(ca_));
  WriteSecretVolume(Path("client-ca"), {{"ca.crt", ca_.cert}});
  config.tls_client_ca = Path("client-ca/ca.crt");
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  const Pem old_client = ClientCert(ca_, "c");
  const Pem new_client = ClientCert(new_client_ca, "c");
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_, &old_client)), kOk);
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_, &new_client)), kUnavailable);
  WriteSecretVolume(Path("client-ca"), {{"ca.crt", new_client_ca.cert}});
  EXPECT_TRUE(
      Eventually([&] { return InfoCode(server->address(), Tls(ca_, &new_client)) == kOk; }));
  EXPECT_EQ(InfoCode(server->address(), Tls(ca_, &old_client)), kUnavailable);
}

// --- 4. Reloads of the access file -----------------------------------------

TEST_F(SecurityTest, AChangedAccessFileRevokesAndGrantsWithinTheReloadInterval) {
  server::ServerConfig config = Config();
  config.auth_tokens = Write("access", TokenLine("old", "ck_old", "admin:*"));
  config.auth_reload_interval = absl::Milliseconds(200);
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto old_client = Connect(address, client::TlsOptions{}, "ck_old");
  auto new_client = Connect(address, client::TlsOptions{}, "ck_new");
  ASSERT_TRUE(CreateFilter(*old_client, "f").ok());
  ASSERT_EQ(LookupCode(*old_client, "f"), kOk);
  ASSERT_EQ(LookupCode(*new_client, "f"), kUnauthenticated);

  Write("access", TokenLine("new", "ck_new", "read:f"));
  EXPECT_TRUE(Eventually([&] { return LookupCode(*old_client, "f") == kUnauthenticated; },
                         absl::Seconds(5)));
  EXPECT_EQ(LookupCode(*new_client, "f"), kOk);
  EXPECT_EQ(InsertCode(*new_client, "f"), kPermissionDenied);
  EXPECT_EQ(Metric(*server, "cuckood_auth_reloads_total", {{"outcome", "ok"}}), 1);

  // A bad file: the previous one stays in force, and the error is counted.
  Write("access", absl::StrCat(TokenLine("old", "ck_old", "admin:*"), "token broken sha256:zz\n"));
  EXPECT_TRUE(Eventually(
      [&] {
        return Metric(*server, "cuckood_auth_reloads_total", {{"outcome", "error"}}) == 1;
      },
      absl::Seconds(5)));
  EXPECT_EQ(LookupCode(*old_client, "f"), kUnauthenticated);
  EXPECT_EQ(LookupCode(*new_client, "f"), kOk);
  // Once, not every interval while the file stays bad.
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(Metric(*server, "cuckood_auth_reloads_total", {{"outcome", "error"}}), 1);
  EXPECT_EQ(Metric(*server, "cuckood_auth_reloads_total", {{"outcome", "ok"}}), 1);

  // Fixed: taken.
  Write("access", TokenLine("old", "ck_old", "admin:*"));
  EXPECT_TRUE(Eventually([&] { return LookupCode(*old_client, "f") == kOk; }, absl::Seconds(5)));
  EXPECT_EQ(LookupCode(*new_client, "f"), kUnauthenticated);
}

TEST_F(SecurityTest, ReloadAccessReadsTheFileAtOnceAndKeepsThePreviousOneWhenItIsBad) {
  server::ServerConfig config = Config();
  config.auth_tokens = Write("access", TokenLine("a", "ck_a", "admin:*"));
  config.auth_reload_interval = absl::Hours(1);
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  auto a = Connect(server->address(), client::TlsOptions{}, "ck_a");
  auto b = Connect(server->address(), client::TlsOptions{}, "ck_b");
  ASSERT_TRUE(CreateFilter(*a, "f").ok());

  Write("access", TokenLine("b", "ck_b", "admin:*"));
  EXPECT_EQ(LookupCode(*a, "f"), kOk);  // The interval is an hour.
  ASSERT_TRUE(server->ReloadAccess().ok());
  EXPECT_EQ(LookupCode(*a, "f"), kUnauthenticated);
  EXPECT_EQ(LookupCode(*b, "f"), kOk);

  const std::string path =
      Write("access", absl::StrCat("# a comment\n\n", TokenLine("a", "ck_a", "admin:*"),
                                   "token a sha256:", std::string(64, '0'), " read:*\n"));
  absl::Status bad = server->ReloadAccess();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr(path + ":4:"));
  EXPECT_EQ(LookupCode(*a, "f"), kUnauthenticated);
  EXPECT_EQ(LookupCode(*b, "f"), kOk);
  EXPECT_EQ(Metric(*server, "cuckood_auth_reloads_total", {{"outcome", "error"}}), 1);
}

TEST_F(SecurityTest, ABadOrMissingAccessFileStopsTheStartNamingFileAndLine) {
  server::ServerConfig config = Config();
  config.auth_tokens = Write(
      "access", absl::StrCat(TokenLine("a", "ck_a", "admin:*"), "token b sha256:12 read:*\n"));
  absl::Status bad = server::CuckooServer::Start(config).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), HasSubstr(config.auth_tokens + ":2:"));

  config.auth_tokens = Path("no-such-file");
  absl::Status missing = server::CuckooServer::Start(config).status();
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.message()), HasSubstr(Path("no-such-file")));
}

// --- 5. The TLS files are checked at start-up ------------------------------

TEST_F(SecurityTest, CheckTlsFilesNamesTheFlagAndTheFile) {
  const Pem one = ServerCert(ca_);
  const Pem two = ServerCert(ca_);
  server::ServerConfig good = TlsConfig(one);
  ASSERT_TRUE(server::CheckTlsFiles(server::TlsOptionsOf(good)).ok())
      << server::CheckTlsFiles(server::TlsOptionsOf(good)).status();
  EXPECT_THAT(server::CheckTlsFiles(server::TlsOptionsOf(good))->subject, HasSubstr("CN=cuckood"));

  auto expect = [](const server::ServerConfig& c, const std::vector<std::string>& parts) {
    absl::Status s = server::CheckTlsFiles(server::TlsOptionsOf(c)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
  };
  server::ServerConfig c = good;
  c.tls_key = Write("two.key", two.key);
  expect(c, {"--tls-key=" + c.tls_key, "not the private key", "--tls-cert=" + c.tls_cert});
  // And the server does not start with it.
  EXPECT_EQ(server::CuckooServer::Start(c).status().code(), absl::StatusCode::kInvalidArgument);

  c = good;
  c.tls_cert = Write("not-pem.crt", "hello\n");
  expect(c, {"--tls-cert=" + c.tls_cert, "no PEM certificate"});
  c = good;
  c.tls_key = Write("not-pem.key", one.cert);  // A certificate is not a key.
  expect(c, {"--tls-key=" + c.tls_key, "private key"});
  c = good;
  c.tls_cert = Path("missing.crt");
  expect(c, {"--tls-cert=" + c.tls_cert, "No such file"});
  c = good;
  c.tls_key = Path("missing.key");
  expect(c, {"--tls-key=" + c.tls_key, "No such file"});
  c = good;
  c.tls_client_ca = Path("missing-ca.crt");
  expect(c, {"--tls-client-ca=" + c.tls_client_ca, "No such file"});
  c = good;
  c.tls_client_ca = Write("not-pem-ca.crt", "hello\n");
  expect(c, {"--tls-client-ca=" + c.tls_client_ca, "no PEM certificate"});
}

// --- 6. Metrics ------------------------------------------------------------

TEST_F(SecurityTest, TheCertificateExpiryIsAGaugeWithTlsOnly) {
  auto plain = Start(Config());
  ASSERT_NE(plain, nullptr);
  EXPECT_FALSE(Metric(*plain, "cuckood_tls_certificate_expiry_seconds").has_value());
  plain.reset();

  const absl::Time not_after = absl::Now() + absl::Hours(24);
  auto server = Start(TlsConfig(ServerCert(ca_)));
  ASSERT_NE(server, nullptr);
  std::optional<double> expiry = Metric(*server, "cuckood_tls_certificate_expiry_seconds");
  ASSERT_TRUE(expiry.has_value());
  EXPECT_NEAR(*expiry, absl::ToDoubleSeconds(not_after - absl::UnixEpoch()), 60);
}

TEST_F(SecurityTest, RefusedCallsAreCountedByMethodAndReason) {
  server::ServerConfig config = Config();
  config.auth_tokens = Write("access", TokenLine("reader", "ck_reader", "read:f"));
  auto server = Start(config);
  ASSERT_NE(server, nullptr);
  const std::string address = server->address();
  auto unknown = Connect(address, client::TlsOptions{}, "ck_unknown");
  EXPECT_EQ(unknown->ServerInfo().status().code(), kUnauthenticated);
  EXPECT_EQ(unknown->ServerInfo().status().code(), kUnauthenticated);
  auto none = Connect(address, client::TlsOptions{});
  EXPECT_EQ(none->ServerInfo().status().code(), kUnauthenticated);
  auto reader = Connect(address, client::TlsOptions{}, "ck_reader");
  EXPECT_EQ(CreateFilter(*reader, "f").code(), kPermissionDenied);

  const std::vector<Sample> samples = Scrape(server->admin_port());
  EXPECT_EQ(MetricValue(samples, "cuckood_auth_failures_total",
                        {{"method", "GetServerInfo"}, {"reason", "unknown_token"}}),
            2);
  EXPECT_EQ(MetricValue(samples, "cuckood_auth_failures_total",
                        {{"method", "GetServerInfo"}, {"reason", "missing_credentials"}}),
            1);
  EXPECT_EQ(MetricValue(samples, "cuckood_auth_failures_total",
                        {{"method", "CreateFilter"}, {"reason", "permission_denied"}}),
            1);
}

}  // namespace
}  // namespace cuckoo::testing
