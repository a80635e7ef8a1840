// Cluster mode's connections to NATS over TLS and with credentials, on real
// processes: nats-server (JetStream, one node) configured with TLS (client
// certificates verified), with users, a token, or an operator whose
// account's user logs in with a .creds file; cuckood replicas started with
// --nats-tls-ca, --nats-tls-cert/--nats-tls-key, --nats-user with
// --nats-password-file, --nats-token-file and --nats-creds. Writes must
// replicate; a wrong CA, a certificate for another host, a missing client
// certificate, a wrong password, a plaintext replica and a plaintext server
// must leave the replica not ready with a problem that names the cause; a
// secret must appear in no log, GetServerInfo or /metrics; flag mistakes
// and bad files must stop the start naming the flag.
//
// The certificates are made at test time (tests/util/test_pki.h). The .creds
// file too: the operator's, the account's and the user's NKeys are fresh
// Ed25519 keys, and the JWTs are signed here the way nsc signs them (a
// JWT of header {"typ":"JWT","alg":"ed25519-nkey"}, the claims, and the
// issuer's Ed25519 signature), since Debian has no nsc.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tests/e2e/cluster_harness.h"
#include "tests/util/test_pki.h"

namespace cuckoo::testing {
namespace {

// ---- NKeys and JWTs (github.com/nats-io/nkeys, github.com/nats-io/jwt v2)

// CRC-16/XMODEM, as nkeys checksums its encodings.
uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
  }
  return crc;
}

// RFC 4648 base32, no padding (nkeys' encoding).
std::string Base32(std::string_view data) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (unsigned char c : data) {
    buffer = buffer << 8 | c;
    bits += 8;
    while (bits >= 5) {
      out += kAlphabet[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += kAlphabet[(buffer << (5 - bits)) & 31];
  return out;
}

std::string WithCrc(std::string raw) {
  const uint16_t crc = Crc16(raw);
  raw += static_cast<char>(crc & 0xff);
  raw += static_cast<char>(crc >> 8);
  return Base32(raw);
}

// An Ed25519 NKey: its public key ("O...", "A...", "U...") and seed
// ("SO...", "SA...", "SU...").
struct NKey {
  std::string public_key;
  std::string seed;
  std::string raw_seed;  // The 32 bytes Ed25519 signs with.
};

// kind: 14 operator, 0 account, 20 user (nkeys' PrefixByte >> 3).
NKey MakeNKey(int kind) {
  NKey k;
  k.raw_seed.resize(32);
  EXPECT_EQ(RAND_bytes(reinterpret_cast<unsigned char*>(k.raw_seed.data()), 32), 1);
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(k.raw_seed.data()), 32);
  std::string pub(32, '\0');
  size_t len = pub.size();
  EXPECT_EQ(EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(pub.data()), &len),
            1);
  EVP_PKEY_free(key);
  const int prefix = kind << 3;
  k.public_key = WithCrc(std::string(1, static_cast<char>(prefix)) + pub);
  constexpr int kSeed = 18 << 3;
  std::string seed;
  seed += static_cast<char>(kSeed | (prefix >> 5));
  seed += static_cast<char>((prefix & 31) << 3);
  k.seed = WithCrc(seed + k.raw_seed);
  return k;
}

std::string Ed25519Sign(const NKey& signer, std::string_view message) {
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(signer.raw_seed.data()),
      32);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::string sig(64, '\0');
  size_t len = sig.size();
  EXPECT_EQ(EVP_DigestSignInit(ctx, nullptr, nullptr, nullptr, key), 1);
  EXPECT_EQ(EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(message.data()), message.size()),
            1);
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  return sig;
}

// A JWT v2 of `subject` issued (signed) by `issuer`, with `nats` as its
// "nats" claim (type, version and the kind's own fields).
std::string Jwt(const NKey& issuer, const std::string& subject, const std::string& name,
                const std::string& nats) {
  const std::string header = absl::WebSafeBase64Escape(R"({"typ":"JWT","alg":"ed25519-nkey"})");
  const std::string claims = absl::WebSafeBase64Escape(
      absl::StrFormat(R"({"jti":"%s","iat":%d,"iss":"%s","name":"%s","sub":"%s","nats":%s})",
                      Base32(std::to_string(absl::ToUnixNanos(absl::Now()))),
                      absl::ToUnixSeconds(absl::Now()), issuer.public_key, name, subject, nats));
  const std::string signed_part = header + "." + claims;
  return signed_part + "." + absl::WebSafeBase64Escape(Ed25519Sign(issuer, signed_part));
}

// An operator, an account it signed with JetStream on, and a user of that
// account: the nats-server configuration that trusts them, and the user's
// .creds file.
struct Operator {
  std::string server_config;  // operator, resolver, resolver_preload.
  std::string creds;
};

Operator MakeOperator(const std::string& dir) {
  const NKey op = MakeNKey(14), system = MakeNKey(0), account = MakeNKey(0), user = MakeNKey(20);
  const std::string op_jwt =
      Jwt(op, op.public_key, "test-operator", R"({"type":"operator","version":2})");
  const std::string account_jwt =
      Jwt(op, account.public_key, "cuckood",
          R"({"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,)"
          R"("wildcards":true,"conn":-1,"leaf":-1,"mem_storage":-1,"disk_storage":-1,)"
          R"("streams":-1,"consumer":-1},"default_permissions":{"pub":{},"sub":{}},)"
          R"("type":"account","version":2})");
  // JetStream needs the server's system account.
  const std::string system_jwt =
      Jwt(op, system.public_key, "SYS",
          R"({"limits":{"subs":-1,"data":-1,"payload":-1,"imports":-1,"exports":-1,)"
          R"("wildcards":true,"conn":-1,"leaf":-1},"default_permissions":{"pub":{},"sub":{}},)"
          R"("type":"account","version":2})");
  const std::string user_jwt =
      Jwt(account, user.public_key, "replica",
          R"({"pub":{},"sub":{},"subs":-1,"data":-1,"payload":-1,"type":"user","version":2})");
  WriteFile(dir + "/operator.jwt", op_jwt);
  Operator o;
  o.server_config = absl::StrFormat(
      "operator: \"%s/operator.jwt\"\nsystem_account: %s\nresolver: MEMORY\n"
      "resolver_preload: { %s: \"%s\", %s: \"%s\" }\n",
      dir, system.public_key, system.public_key, system_jwt, account.public_key, account_jwt);
  o.creds =
      absl::StrCat("-----BEGIN NATS USER JWT-----\n", user_jwt,
                   "\n------END NATS USER JWT------\n\n"
                   "************************* IMPORTANT *************************\n"
                   "NKEY Seed printed below can be used to sign and prove identity.\n"
                   "NKEYs are sensitive and should be treated as secrets.\n\n"
                   "-----BEGIN USER NKEY SEED-----\n",
                   user.seed,
                   "\n------END USER NKEY "
                   "SEED------\n\n*************************************************************\n");
  return o;
}

// ---- One nats-server with JetStream

class NatsServer {
 public:
  // `config`: what follows listen, monitoring, JetStream and the log (tls
  // {...}, authorization {...}, operator ...).
  NatsServer(const std::string& dir, const std::string& name, const std::string& config)
      : dir_(dir), name_(name) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = FreePort();
      const std::string conf = absl::StrFormat("%s/%s.conf", dir_, name_);
      WriteFile(conf, absl::StrFormat("server_name: %s\nlisten: 127.0.0.1:%d\n"
                                      "jetstream { store_dir: \"%s/%s-js\" }\n"
                                      "log_file: \"%s\"\n%s",
                                      name_, port_, dir_, name_, LogPath(), config));
      const size_t from = ReadFile(LogPath()).size();
      process_ = std::make_unique<Process>(std::vector<std::string>{NATS_SERVER_PATH, "-c", conf});
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < until) {
        const std::string log = ReadFile(LogPath()).substr(from);
        if (log.find("Server is ready") != std::string::npos) return;
        if (process_->Wait(std::chrono::milliseconds(20)) != -1) {
          if (log.find("address already in use") != std::string::npos) break;  // Again.
          ADD_FAILURE() << "nats-server " << name_ << " exited:\n"
                        << log << process_->out() << process_->err();
          return;
        }
      }
      if (process_->Wait(std::chrono::milliseconds(0)) == -1) {
        ADD_FAILURE() << "nats-server " << name_ << " not ready in 30 s:\n" << Log();
        return;
      }
    }
    ADD_FAILURE() << "nats-server " << name_ << ": its port was taken 5 times";
  }

  // kill -9 and start again on the same port and configuration.
  void Restart() {
    process_->Signal(SIGKILL);
    process_->Wait();
    const size_t from = ReadFile(LogPath()).size();
    process_ = std::make_unique<Process>(std::vector<std::string>{
        NATS_SERVER_PATH, "-c", absl::StrFormat("%s/%s.conf", dir_, name_)});
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ReadFile(LogPath()).substr(from).find("Server is ready") == std::string::npos) {
      if (std::chrono::steady_clock::now() >= until ||
          process_->Wait(std::chrono::milliseconds(20)) != -1) {
        ADD_FAILURE() << "nats-server " << name_ << " did not restart:\n" << Log();
        return;
      }
    }
  }

  int port() const { return port_; }
  std::string Url(const std::string& scheme = "nats", const std::string& host = "127.0.0.1") const {
    return absl::StrFormat("%s://%s:%d", scheme, host, port_);
  }
  std::string LogPath() const { return absl::StrFormat("%s/%s.log", dir_, name_); }
  std::string Log() const { return ReadFile(LogPath()); }

 private:
  std::string dir_, name_;
  int port_ = 0;
  std::unique_ptr<Process> process_;
};

// ---- Replicas and what they say

struct Secrets {
  std::string password = "pw-" + absl::StrFormat("%016x", std::random_device{}());
  std::string token = "tok-" + absl::StrFormat("%016x", std::random_device{}());
};

// The files every test uses: a CA and the NATS server's certificate for
// 127.0.0.1 (an IP SAN alone: a connection to "localhost" does not match
// it), a client certificate, another CA, the secrets' files, a .creds.
class NatsSecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    secrets_ = new Secrets();
    const std::string d = dir_->path();
    const Pem ca = MakeCa("cuckoo NATS test CA");
    const Pem server = IssueCert(ca, {.common_name = "nats-test", .ip_sans = {"127.0.0.1"}});
    const Pem client =
        IssueCert(ca, {.common_name = "cuckood-replica", .client = true, .server = false});
    const Pem other = MakeCa("some other CA");
    const Pem other_client =
        IssueCert(other, {.common_name = "stranger", .client = true, .server = false});
    WriteFile(d + "/ca.pem", ca.cert);
    WriteFile(d + "/server.pem", server.cert);
    WriteFile(d + "/server.key", server.key);
    WriteFile(d + "/client.pem", client.cert);
    WriteFile(d + "/client.key", client.key);
    WriteFile(d + "/other-ca.pem", other.cert);
    WriteFile(d + "/other-client.pem", other_client.cert);
    WriteFile(d + "/other-client.key", other_client.key);
    WriteFile(d + "/password", secrets_->password + "\n");
    WriteFile(d + "/wrong-password", "not-" + secrets_->password + "\n");
    WriteFile(d + "/token", secrets_->token + "\n");
    WriteFile(d + "/empty", "\n");
  }
  static void TearDownTestSuite() {
    delete tls_server_;
    delete token_server_;
    delete secrets_;
    delete dir_;
    tls_server_ = nullptr;
    token_server_ = nullptr;
  }

  static std::string Path(const std::string& name) { return dir_->path() + "/" + name; }
  static const Secrets& secrets() { return *secrets_; }

  // Shared by the tests that use it (started by the first): TLS with
  // client certificates verified, and a user with a password.
  static NatsServer& TlsServer() {
    if (tls_server_ == nullptr) {
      tls_server_ = new NatsServer(
          dir_->path(), "tls",
          absl::StrFormat("tls { cert_file: \"%s\", key_file: \"%s\", ca_file: \"%s\", "
                          "verify: true, timeout: 2 }\n"
                          "authorization { users: [ { user: cuckood, password: \"%s\" } ] }\n",
                          Path("server.pem"), Path("server.key"), Path("ca.pem"),
                          secrets_->password));
    }
    return *tls_server_;
  }
  // Plaintext, with a token.
  static NatsServer& TokenServer() {
    if (token_server_ == nullptr) {
      token_server_ =
          new NatsServer(dir_->path(), "token",
                         absl::StrFormat("authorization { token: \"%s\" }\n", secrets_->token));
    }
    return *token_server_;
  }

  // A replica of `stream` (each test its own) with `flags`.
  std::unique_ptr<Replica> StartReplica(const std::string& stream, int i,
                                        std::vector<std::string> flags) {
    flags.push_back(absl::StrCat("--replica-id=", stream, "-r", i));
    flags.push_back("--nats-stream=" + stream);
    return std::make_unique<Replica>(absl::StrFormat("%s/%s-r%d", dir_->path(), stream, i), flags);
  }

  static v1::GetServerInfoResponse Info(Replica& r) {
    grpc::ClientContext ctx;
    v1::GetServerInfoResponse info;
    const grpc::Status s = r.stub().GetServerInfo(WithDeadline(&ctx), {}, &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  // Waits (10 s at most) for the replica's cluster problem to hold
  // `needle`; returns the problem last seen.
  static std::string WaitForProblem(Replica& r, const std::string& needle) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    std::string problem;
    while (std::chrono::steady_clock::now() < until) {
      problem = Info(r).cluster().problem();
      if (problem.find(needle) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return problem;
  }

  // Everything the replica told anyone: its log, GetServerInfo, /metrics,
  // /readyz.
  static std::string Everything(Replica& r) {
    return absl::StrCat(r.process().process().out(), r.process().process().err(),
                        Info(r).DebugString(), r.Metrics(),
                        HttpGet(r.process().admin_port(), "/readyz").body);
  }

  // Creates a filter through `writer`, inserts keys, and reads them back
  // through `reader` at the insert's position.
  static void ExpectReplicated(Replica& writer, Replica& reader, const std::string& filter) {
    ASSERT_TRUE(writer.WaitCaughtUp(0, std::chrono::seconds(20)))
        << Info(writer).DebugString() << writer.process().process().out();
    ASSERT_TRUE(reader.WaitCaughtUp(0, std::chrono::seconds(20)))
        << Info(reader).DebugString() << reader.process().process().out();
    {
      v1::CreateFilterRequest req;
      req.set_name(filter);
      req.set_capacity(1000);
      v1::CreateFilterResponse resp;
      grpc::ClientContext ctx;
      const grpc::Status s = writer.stub().CreateFilter(WithDeadline(&ctx), req, &resp);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    v1::InsertRequest insert;
    insert.set_filter(filter);
    for (int i = 0; i < 10; ++i) insert.add_keys(absl::StrCat("key-", i));
    v1::InsertResponse inserted;
    {
      grpc::ClientContext ctx;
      const grpc::Status s = writer.stub().Insert(WithDeadline(&ctx), insert, &inserted);
      ASSERT_TRUE(s.ok()) << s.error_message();
    }
    ASSERT_EQ(inserted.inserted(), 10u);
    v1::LookupRequest lookup;
    lookup.set_filter(filter);
    lookup.set_min_log_position(inserted.log_position());
    for (int i = 0; i < 10; ++i) lookup.add_keys(absl::StrCat("key-", i));
    v1::LookupResponse found;
    grpc::ClientContext ctx;
    const grpc::Status s = reader.stub().Lookup(WithDeadline(&ctx), lookup, &found);
    ASSERT_TRUE(s.ok()) << s.error_message();
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(found.present(i)) << "key-" << i;
  }

  static TempDir* dir_;
  static Secrets* secrets_;
  static NatsServer* tls_server_;
  static NatsServer* token_server_;
};

TempDir* NatsSecurityTest::dir_ = nullptr;
Secrets* NatsSecurityTest::secrets_ = nullptr;
NatsServer* NatsSecurityTest::tls_server_ = nullptr;
NatsServer* NatsSecurityTest::token_server_ = nullptr;

TEST_F(NatsSecurityTest, ReplicasReplicateOverMutualTlsWithUserAndPassword) {
  NatsServer& nats = TlsServer();
  const std::vector<std::string> common = {
      "--nats-tls-ca=" + Path("ca.pem"), "--nats-tls-cert=" + Path("client.pem"),
      "--nats-tls-key=" + Path("client.key"), "--nats-user=cuckood",
      "--nats-password-file=" + Path("password")};
  // --nats-tls-ca turns TLS on for a nats:// URL; a tls:// URL does too.
  std::vector<std::string> flags0 = common, flags1 = common;
  flags0.push_back("--nats=" + nats.Url("nats"));
  flags1.push_back("--nats=" + nats.Url("tls"));
  std::unique_ptr<Replica> r0 = StartReplica("MTLS", 0, flags0);
  std::unique_ptr<Replica> r1 = StartReplica("MTLS", 1, flags1);
  ExpectReplicated(*r0, *r1, "users");
  ExpectReplicated(*r1, *r0, "orders");
  for (Replica* r : {r0.get(), r1.get()}) {
    const std::string all = Everything(*r);
    EXPECT_EQ(all.find(secrets().password), std::string::npos) << "the password was shown";
    EXPECT_NE(r->process().process().out().find("cluster: NATS connections: TLS"),
              std::string::npos)
        << r->process().process().out();
    EXPECT_EQ(Info(*r).cluster().nats_status(), "connected");
  }
  // A clean stop (under the sanitizers: nothing leaked, no race).
  EXPECT_EQ(r0->Stop(), 0) << r0->process().process().out();
}

TEST_F(NatsSecurityTest, ReplicasReplicateWithTokenAndSayItGoesInPlaintext) {
  NatsServer& nats = TokenServer();
  const std::vector<std::string> flags = {"--nats=" + nats.Url(),
                                          "--nats-token-file=" + Path("token")};
  std::unique_ptr<Replica> r0 = StartReplica("TOKEN", 0, flags);
  std::unique_ptr<Replica> r1 = StartReplica("TOKEN", 1, flags);
  ExpectReplicated(*r0, *r1, "users");
  for (Replica* r : {r0.get(), r1.get()}) {
    EXPECT_EQ(Everything(*r).find(secrets().token), std::string::npos) << "the token was shown";
    EXPECT_NE(r->process().process().out().find("the NATS token is sent in plaintext"),
              std::string::npos)
        << r->process().process().out();
  }
}

TEST_F(NatsSecurityTest, ReplicasReplicateWithCredsFileOfAnOperatorsUser) {
  TempDir dir;
  const Operator op = MakeOperator(dir.path());
  WriteFile(dir.path() + "/replica.creds", op.creds);
  NatsServer nats(dir.path(), "operator", op.server_config);
  const std::vector<std::string> flags = {"--nats=" + nats.Url(),
                                          "--nats-creds=" + dir.path() + "/replica.creds"};
  std::unique_ptr<Replica> r0 = StartReplica("CREDS", 0, flags);
  std::unique_ptr<Replica> r1 = StartReplica("CREDS", 1, flags);
  ExpectReplicated(*r0, *r1, "users");
  // The seed is a secret like a password.
  const std::string seed = op.creds.substr(op.creds.find("\nSU") + 1, 58);
  for (Replica* r : {r0.get(), r1.get()}) {
    EXPECT_EQ(Everything(*r).find(seed), std::string::npos) << "the NKey seed was shown";
  }
}

// nats.c reads the .creds file at every connect: replaced, it is what the
// next reconnect uses (here another operator's user, which the server
// refuses; the replica says so in its log and goes on serving reads).
TEST_F(NatsSecurityTest, ReplacedCredsFileIsUsedAtTheNextReconnect) {
  TempDir dir;
  const Operator op = MakeOperator(dir.path());
  const std::string creds = dir.path() + "/replica.creds";
  WriteFile(creds, op.creds);
  NatsServer nats(dir.path(), "operator", op.server_config);
  std::unique_ptr<Replica> r =
      StartReplica("RECREDS", 0, {"--nats=" + nats.Url(), "--nats-creds=" + creds});
  ASSERT_TRUE(r->WaitCaughtUp(0, std::chrono::seconds(20))) << r->process().process().out();
  TempDir other_dir;
  WritePem(creds, MakeOperator(other_dir.path()).creds);
  nats.Restart();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const std::string said = "cannot connect to NATS: NATS refused this replica's credentials";
  while (r->process().process().out().find(said) == std::string::npos &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(r->process().process().out().find(said), std::string::npos)
      << r->process().process().out();
  EXPECT_NE(Info(*r).cluster().nats_status(), "connected");
}

TEST_F(NatsSecurityTest, CredsFileOfAnotherOperatorIsRefusedNamingAuthorization) {
  TempDir dir;
  const Operator trusted = MakeOperator(dir.path());
  NatsServer nats(dir.path(), "operator", trusted.server_config);
  TempDir other_dir;
  const Operator other = MakeOperator(other_dir.path());
  WriteFile(dir.path() + "/other.creds", other.creds);
  std::unique_ptr<Replica> r = StartReplica(
      "CREDS2", 0, {"--nats=" + nats.Url(), "--nats-creds=" + dir.path() + "/other.creds"});
  const std::string problem = WaitForProblem(*r, "authorization");
  EXPECT_NE(problem.find("check --nats-creds="), std::string::npos) << problem;
  EXPECT_EQ(r->ReadyzStatus(), 503);
}

TEST_F(NatsSecurityTest, WrongCaLeavesReplicaNotReadyNamingTls) {
  NatsServer& nats = TlsServer();
  std::unique_ptr<Replica> r =
      StartReplica("WRONGCA", 0,
                   {"--nats=" + nats.Url(), "--nats-tls-ca=" + Path("other-ca.pem"),
                    "--nats-tls-cert=" + Path("client.pem"), "--nats-tls-key=" + Path("client.key"),
                    "--nats-user=cuckood", "--nats-password-file=" + Path("password")});
  const std::string problem = WaitForProblem(*r, "TLS handshake");
  EXPECT_NE(problem.find("is --nats-tls-ca the CA that signed"), std::string::npos) << problem;
  const HttpResponse ready = HttpGet(r->process().admin_port(), "/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("TLS handshake"), std::string::npos) << ready.body;
  // Up (/healthz) but not taking traffic, as the metric CuckoodNotReady
  // alerts on says.
  EXPECT_EQ(MetricValue(ParseMetrics(r->Metrics()), "cuckood_ready"), 0.0);
  EXPECT_NE(r->process().process().out().find("cannot connect to NATS: TLS handshake"),
            std::string::npos);
  // Writes fail with the reason.
  v1::CreateFilterRequest req;
  req.set_name("f");
  req.set_capacity(100);
  v1::CreateFilterResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = r->stub().CreateFilter(WithDeadline(&ctx), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(s.error_message().find("TLS handshake"), std::string::npos) << s.error_message();
  EXPECT_EQ(Everything(*r).find(secrets().password), std::string::npos);
  // Stopped while its connect thread still tries: a clean exit.
  EXPECT_EQ(r->Stop(), 0) << r->process().process().out();
}

TEST_F(NatsSecurityTest, CertificateForAnotherHostIsRefused) {
  NatsServer& nats = TlsServer();
  // The certificate is for 127.0.0.1 alone; "localhost" reaches the same
  // server but is not a name the certificate holds.
  std::unique_ptr<Replica> r =
      StartReplica("HOST", 0,
                   {"--nats=" + nats.Url("tls", "localhost"), "--nats-tls-ca=" + Path("ca.pem"),
                    "--nats-tls-cert=" + Path("client.pem"), "--nats-tls-key=" + Path("client.key"),
                    "--nats-user=cuckood", "--nats-password-file=" + Path("password")});
  const std::string problem = WaitForProblem(*r, "hostname mismatch");
  EXPECT_NE(problem.find("not for the host name"), std::string::npos) << problem;
  EXPECT_EQ(r->ReadyzStatus(), 503);
}

TEST_F(NatsSecurityTest, ClientCertificateOfAnotherCaIsRefused) {
  NatsServer& nats = TlsServer();
  std::unique_ptr<Replica> r = StartReplica(
      "NOCLIENT", 0,
      {"--nats=" + nats.Url(), "--nats-tls-ca=" + Path("ca.pem"),
       "--nats-tls-cert=" + Path("other-client.pem"), "--nats-tls-key=" + Path("other-client.key"),
       "--nats-user=cuckood", "--nats-password-file=" + Path("password")});
  // With TLS 1.3 the server checks the client's certificate after the
  // client's side of the handshake is done: the refusal shows as the
  // connection's first write or read failing.
  const std::string problem = WaitForProblem(*r, "client certificate");
  EXPECT_NE(problem.find("--nats-tls-cert must be signed by a CA the servers trust"),
            std::string::npos)
      << problem;
  // Never connected meanwhile.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_NE(Info(*r).cluster().nats_status(), "connected");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(r->ReadyzStatus(), 503);
  EXPECT_NE(nats.Log().find("TLS handshake error"), std::string::npos) << nats.Log();
}

TEST_F(NatsSecurityTest, WrongPasswordLeavesReplicaNotReadyNamingAuthorization) {
  NatsServer& nats = TlsServer();
  std::unique_ptr<Replica> r =
      StartReplica("WRONGPW", 0,
                   {"--nats=" + nats.Url(), "--nats-tls-ca=" + Path("ca.pem"),
                    "--nats-tls-cert=" + Path("client.pem"), "--nats-tls-key=" + Path("client.key"),
                    "--nats-user=cuckood", "--nats-password-file=" + Path("wrong-password")});
  const std::string problem = WaitForProblem(*r, "authorization");
  EXPECT_NE(problem.find("check --nats-user=cuckood and the password in --nats-password-file="),
            std::string::npos)
      << problem;
  EXPECT_EQ(r->ReadyzStatus(), 503);
  const std::string all = Everything(*r);
  EXPECT_EQ(all.find(secrets().password), std::string::npos) << "a password was shown";
}

TEST_F(NatsSecurityTest, PlaintextReplicaIsToldTheServerRequiresTls) {
  NatsServer& nats = TlsServer();
  std::unique_ptr<Replica> r = StartReplica(
      "PLAIN", 0,
      {"--nats=" + nats.Url(), "--nats-user=cuckood", "--nats-password-file=" + Path("password")});
  const std::string problem = WaitForProblem(*r, "requires TLS");
  EXPECT_NE(problem.find("set --nats-tls-ca"), std::string::npos) << problem;
  EXPECT_EQ(r->ReadyzStatus(), 503);
  // The password was not sent: nats.c turned to TLS, whose handshake failed
  // before any CONNECT.
  EXPECT_EQ(Everything(*r).find(secrets().password), std::string::npos);
}

TEST_F(NatsSecurityTest, TlsReplicaRefusesServerWithoutTls) {
  NatsServer& nats = TokenServer();
  std::unique_ptr<Replica> r =
      StartReplica("NOTLS", 0,
                   {"--nats=" + nats.Url(), "--nats-tls-ca=" + Path("ca.pem"),
                    "--nats-token-file=" + Path("token")});
  const std::string problem = WaitForProblem(*r, "does not offer TLS");
  EXPECT_NE(problem.find("does not offer TLS"), std::string::npos) << problem;
  EXPECT_EQ(r->ReadyzStatus(), 503);
}

TEST_F(NatsSecurityTest, MissingCredentialsAreNamed) {
  NatsServer& nats = TokenServer();
  std::unique_ptr<Replica> r = StartReplica("NOCREDS", 0, {"--nats=" + nats.Url()});
  const std::string problem = WaitForProblem(*r, "authorization");
  EXPECT_NE(problem.find("requires credentials and none are configured"), std::string::npos)
      << problem;
}

// cuckood run to its exit with `flags`: its exit code and what it said.
Result RunCuckood(const std::string& data_dir, std::vector<std::string> flags) {
  std::vector<std::string> argv = {CUCKOOD_PATH, "--listen=127.0.0.1:0",
                                   "--admin-listen=", "--data-dir=" + data_dir};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunProcess(argv);
}

TEST_F(NatsSecurityTest, FlagMistakesStopTheStartNamingTheFlags) {
  const std::string nats = "--nats=nats://127.0.0.1:1";
  struct Case {
    std::vector<std::string> flags;
    int code;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nats-tls-ca=" + Path("ca.pem")}, 2, "--nats-tls-ca: set for the connections to NATS"},
      {{nats, "--nats-tls-cert=" + Path("client.pem")},
       2,
       "--nats-tls-cert is set without --nats-tls-key"},
      {{nats, "--nats-tls-key=" + Path("client.key")},
       2,
       "--nats-tls-key is set without --nats-tls-cert"},
      {{nats, "--nats-tls-cert=" + Path("client.pem"), "--nats-tls-key=" + Path("client.key")},
       2,
       "--nats-tls-cert (mutual TLS) needs TLS to NATS"},
      {{nats, "--nats-user=u"}, 2, "--nats-user is set without --nats-password-file"},
      {{nats, "--nats-password-file=" + Path("password")},
       2,
       "--nats-password-file is set without --nats-user"},
      {{nats, "--nats-creds=x.creds", "--nats-token-file=" + Path("token")},
       2,
       "--nats-creds and --nats-token-file are mutually exclusive"},
      {{nats, "--nats-user=u", "--nats-password-file=" + Path("password"),
        "--nats-token-file=" + Path("token")},
       2,
       "--nats-user/--nats-password-file and --nats-token-file are mutually exclusive"},
      {{"--nats=tls://127.0.0.1:1,nats://127.0.0.1:2"}, 2, "--nats mixes tls:// URLs with others"},
      {{"--nats=nats://u:p@127.0.0.1:1", "--nats-token-file=" + Path("token")},
       2,
       "URL 1 of 1 holds credentials"},
      // Files: read at start, named with their flag.
      {{nats, "--nats-token-file=" + Path("absent")},
       1,
       "--nats-token-file=" + Path("absent") + ": cannot read it: No such file or directory"},
      {{nats, "--nats-user=u", "--nats-password-file=" + Path("empty")},
       1,
       "--nats-password-file=" + Path("empty") + " is empty"},
      {{nats, "--nats-tls-ca=" + Path("absent")},
       1,
       "--nats-tls-ca=" + Path("absent") + ": cannot read it"},
      {{nats, "--nats-tls-ca=" + Path("password")}, 1, "--nats-tls-ca=" + Path("password") + ": "},
      {{nats, "--nats-tls-ca=" + Path("ca.pem"), "--nats-tls-cert=" + Path("client.pem"),
        "--nats-tls-key=" + Path("server.key")},
       1,
       "--nats-tls-cert=" + Path("client.pem") + ", --nats-tls-key=" + Path("server.key")},
      {{nats, "--nats-creds=" + Path("token")},
       1,
       "--nats-creds=" + Path("token") + " is not a NATS credentials file"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Result r = RunCuckood(absl::StrFormat("%s/flags-%d", dir_->path(), i), cases[i].flags);
    const std::string said = r.out + r.err;
    EXPECT_EQ(r.code, cases[i].code) << absl::StrJoin(cases[i].flags, " ") << "\n" << said;
    EXPECT_NE(said.find(cases[i].says), std::string::npos)
        << absl::StrJoin(cases[i].flags, " ") << "\nwanted: " << cases[i].says << "\n"
        << said;
    EXPECT_EQ(said.find(secrets().password), std::string::npos) << said;
    EXPECT_EQ(said.find(secrets().token), std::string::npos) << said;
  }
  // The environment sets them as well.
  const Result env =
      RunProcess({CUCKOOD_PATH, "--listen=127.0.0.1:0",
                  "--admin-listen=", "--data-dir=" + dir_->path() + "/flags-env", nats},
                 "", {"CUCKOOD_NATS_USER=u"});
  EXPECT_EQ(env.code, 2) << env.out << env.err;
  EXPECT_NE((env.out + env.err).find("--nats-user is set without --nats-password-file"),
            std::string::npos)
      << env.out << env.err;
}

}  // namespace
}  // namespace cuckoo::testing
