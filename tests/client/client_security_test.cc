// The client's side of issue 15 without a cuckood: the token metadata every
// call carries, TLS and mutual TLS against an in-process gRPC server with
// certificates made by the openssl command, and access tokens.
#include <gmock/gmock.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/access_token.h"
#include "client/cuckoo_client.h"
#include "tests/util/temp_dir.h"

namespace cuckoo::testing {
namespace {

namespace v1 = ::cuckoo::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Answers a few methods and records the authorization metadata of each call.
class RecordingService final : public v1::FilterService::Service {
 public:
  // Method -> the authorization values of its calls ("" for a call without).
  std::map<std::string, std::vector<std::string>> Seen() {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  // The subject of the client certificate of the last call ("" without one).
  std::string LastPeerCommonName() {
    absl::MutexLock lock(&mu_);
    return peer_cn_;
  }

  grpc::Status GetServerInfo(grpc::ServerContext* ctx, const v1::GetServerInfoRequest*,
                             v1::GetServerInfoResponse* resp) override {
    Record("GetServerInfo", ctx);
    resp->set_max_batch_keys(10);
    resp->set_max_message_bytes(1 << 20);
    return grpc::Status::OK;
  }
  grpc::Status Lookup(grpc::ServerContext* ctx, const v1::LookupRequest* req,
                      v1::LookupResponse* resp) override {
    Record("Lookup", ctx);
    for (int i = 0; i < req->keys_size(); ++i) resp->add_present(true);
    return grpc::Status::OK;
  }
  grpc::Status ExportFilter(grpc::ServerContext* ctx, const v1::ExportFilterRequest*,
                            grpc::ServerWriter<v1::ExportFilterChunk>* writer) override {
    Record("ExportFilter", ctx);
    v1::ExportFilterChunk chunk;
    chunk.set_total_bytes(3);
    chunk.set_data("abc");
    writer->Write(chunk);
    return grpc::Status::OK;
  }
  grpc::Status ImportFilter(grpc::ServerContext* ctx,
                            grpc::ServerReader<v1::ImportFilterChunk>* reader,
                            v1::ImportFilterResponse* resp) override {
    Record("ImportFilter", ctx);
    v1::ImportFilterChunk chunk;
    uint64_t bytes = 0;
    while (reader->Read(&chunk)) bytes += chunk.data().size();
    resp->set_bytes(bytes);
    return grpc::Status::OK;
  }

 private:
  void Record(const std::string& method, grpc::ServerContext* ctx) {
    std::string value;
    auto [begin, end] = ctx->client_metadata().equal_range(client::kAuthorizationMetadataKey);
    for (auto it = begin; it != end; ++it)
      value += std::string(it->second.data(), it->second.size());
    std::string cn;
    for (const grpc::string_ref& name :
         ctx->auth_context()->FindPropertyValues("x509_common_name")) {
      cn = std::string(name.data(), name.size());
    }
    absl::MutexLock lock(&mu_);
    seen_[method].push_back(value);
    peer_cn_ = cn;
  }

  absl::Mutex mu_;
  std::map<std::string, std::vector<std::string>> seen_ ABSL_GUARDED_BY(mu_);
  std::string peer_cn_ ABSL_GUARDED_BY(mu_);
};

struct FakeServer {
  explicit FakeServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
  }
  ~FakeServer() { server->Shutdown(); }

  RecordingService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

client::ClientOptions Options(const std::string& token) {
  client::ClientOptions options;
  options.token = token;
  options.timeout = absl::Seconds(10);
  options.retry_timeout = absl::ZeroDuration();
  return options;
}

// Every kind of call: the unary ones split by the limits (which come from a
// GetServerInfo of the client's own), and both streams.
void CallEverything(client::Client& c) {
  std::vector<std::string_view> keys(25, "k");  // Three Lookups of at most 10.
  auto found = c.Lookup("f", keys);
  ASSERT_TRUE(found.ok()) << found.status();
  std::ostringstream out;
  auto exported = c.ExportFilter("f", out, absl::Seconds(10));
  ASSERT_TRUE(exported.ok()) << exported.status();
  std::istringstream in("snapshot");
  auto imported = c.ImportFilter("g", in, absl::Seconds(10));
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->bytes(), 8u);
}

TEST(ClientTokenTest, EveryCallIncludingStreamsAndServerInfoCarriesTheBearerToken) {
  FakeServer server(grpc::InsecureServerCredentials());
  auto c = client::Client::Connect(server.address, Options("ck_secret"));
  ASSERT_TRUE(c->connect_status().ok()) << c->connect_status();
  CallEverything(*c);
  const std::string bearer = "Bearer ck_secret";
  auto seen = server.service.Seen();
  // One GetServerInfo for the batch limits, one before the import's chunks.
  EXPECT_THAT(seen["GetServerInfo"], ElementsAre(bearer, bearer));
  EXPECT_THAT(seen["Lookup"], ElementsAre(bearer, bearer, bearer));
  EXPECT_THAT(seen["ExportFilter"], ElementsAre(bearer));
  EXPECT_THAT(seen["ImportFilter"], ElementsAre(bearer));
}

TEST(ClientTokenTest, WithoutATokenNoAuthorizationHeaderIsSent) {
  FakeServer server(grpc::InsecureServerCredentials());
  auto c = client::Client::Connect(server.address, Options(""));
  CallEverything(*c);
  for (const auto& [method, values] : server.service.Seen()) {
    for (const std::string& v : values) EXPECT_EQ(v, "") << method;
  }
  EXPECT_EQ(server.service.Seen().size(), 4u);
}

TEST(ClientTokenTest, StubCallsCarryTheTokenThroughAddCallMetadata) {
  FakeServer server(grpc::InsecureServerCredentials());
  auto c = client::Client::Connect(server.address, Options("t0k"));
  grpc::ClientContext ctx;
  c->AddCallMetadata(ctx);
  v1::GetServerInfoResponse resp;
  ASSERT_TRUE(c->stub().GetServerInfo(&ctx, {}, &resp).ok());
  EXPECT_THAT(server.service.Seen()["GetServerInfo"], ElementsAre("Bearer t0k"));
}

TEST(ClientTokenTest, ATokenGrpcCouldNotSendFailsEveryCallNamingTheCharacter) {
  for (const std::string& bad :
       {std::string("a b"), std::string("line\n"), std::string(513, 'x')}) {
    auto c = client::Client::Connect("127.0.0.1:1", Options(bad));
    EXPECT_EQ(c->connect_status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(c->ServerInfo().status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(client::ValidateToken("a b").message()),
              HasSubstr("character 0x20 at position 2"));
  EXPECT_TRUE(client::ValidateToken(std::string(512, '~')).ok());
}

// A CA, a server certificate for "cuckood.test" (not the address the client
// dials: the name override is needed) and a client certificate, made with
// the openssl command.
class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string d = dir_.path();
    const std::string script = absl::StrCat(
        "set -e; cd '", d, "'\n",
        "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1; }\n"
        "key ca.key; key server.key; key client.key\n"
        "openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=test-ca\n"
        "printf 'subjectAltName=DNS:cuckood.test\\n' > server.ext\n"
        "openssl req -new -key server.key -out server.csr -subj /CN=cuckood.test\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "  -out server.pem -days 2 -extfile server.ext\n"
        "openssl req -new -key client.key -out client.csr -subj /CN=batch-job\n"
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "  -out client.pem -days 2\n");
    std::ofstream(Path("make-certs.sh")) << script;
    const std::string command =
        absl::StrCat("sh '", Path("make-certs.sh"), "' >'", Path("openssl.log"), "' 2>&1");
    ASSERT_EQ(system(command.c_str()), 0) << Read("openssl.log");
  }

  std::string Path(const std::string& name) { return dir_.path() + "/" + name; }
  std::string Read(const std::string& name) {
    std::ifstream in(Path(name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials(bool require_client_cert) {
    grpc::SslServerCredentialsOptions ssl(
        require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = Read("ca.pem");
    ssl.pem_key_cert_pairs.push_back({Read("server.key"), Read("server.pem")});
    return grpc::SslServerCredentials(ssl);
  }
  client::ClientOptions TlsOptions(bool with_client_cert) {
    client::ClientOptions options = Options("ck_over_tls");
    absl::StatusOr<client::TlsOptions> tls =
        client::LoadTlsFiles(Path("ca.pem"), with_client_cert ? Path("client.pem") : "",
                             with_client_cert ? Path("client.key") : "");
    EXPECT_TRUE(tls.ok()) << tls.status();
    options.tls = *tls;
    options.tls.server_name = "cuckood.test";
    return options;
  }

  TempDir dir_;
};

TEST_F(TlsTest, TlsWithTheCaAndServerNameConnectsAndCarriesTheToken) {
  FakeServer server(ServerCredentials(/*require_client_cert=*/false));
  auto c = client::Client::Connect(server.address, TlsOptions(false));
  CallEverything(*c);
  EXPECT_THAT(server.service.Seen()["ExportFilter"], ElementsAre("Bearer ck_over_tls"));
}

TEST_F(TlsTest, TheServerCertificateIsCheckedAgainstTheNameAndTheCa) {
  FakeServer server(ServerCredentials(false));
  // The certificate is for cuckood.test, not 127.0.0.1.
  client::ClientOptions no_name = TlsOptions(false);
  no_name.tls.server_name = "";
  EXPECT_EQ(client::Client::Connect(server.address, no_name)->ServerInfo().status().code(),
            absl::StatusCode::kUnavailable);
  // The system's roots do not hold the test CA.
  client::ClientOptions no_ca = TlsOptions(false);
  no_ca.tls.root_certs_pem = "";
  EXPECT_EQ(client::Client::Connect(server.address, no_ca)->ServerInfo().status().code(),
            absl::StatusCode::kUnavailable);
  // A plaintext client does not get through either.
  EXPECT_EQ(client::Client::Connect(server.address, Options(""))->ServerInfo().status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(server.service.Seen().empty());
}

TEST_F(TlsTest, MutualTlsPresentsTheClientCertificate) {
  FakeServer server(ServerCredentials(/*require_client_cert=*/true));
  EXPECT_EQ(
      client::Client::Connect(server.address, TlsOptions(false))->ServerInfo().status().code(),
      absl::StatusCode::kUnavailable);
  auto c = client::Client::Connect(server.address, TlsOptions(true));
  auto info = c->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(server.service.LastPeerCommonName(), "batch-job");
}

TEST_F(TlsTest, LoadTlsFilesNamesTheFileAndTheProblem) {
  auto missing = client::LoadTlsFiles(Path("nope.pem"), "", "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("\"" + Path("nope.pem") + "\": No such file or directory"));
  auto half = client::LoadTlsFiles("", Path("client.pem"), "");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(half.status().message()), HasSubstr("without its private key"));
  auto other_half = client::LoadTlsFiles("", "", Path("client.key"));
  EXPECT_THAT(std::string(other_half.status().message()), HasSubstr("without its certificate"));
  auto not_pem = client::LoadTlsFiles(Path("server.ext"), "", "");
  EXPECT_EQ(not_pem.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(not_pem.status().message()), HasSubstr("is not PEM"));
  auto dir = client::LoadTlsFiles(dir_.path(), "", "");
  EXPECT_THAT(std::string(dir.status().message()), HasSubstr("Is a directory"));
  // Half a key pair given to Connect directly is refused too.
  client::ClientOptions options = TlsOptions(true);
  options.tls.private_key_pem.clear();
  EXPECT_EQ(client::Client::Connect("127.0.0.1:1", options)->connect_status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AccessTokenTest, NewTokensAreCkAnd43Base64UrlCharactersAndDiffer) {
  auto a = client::NewAccessToken();
  auto b = client::NewAccessToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  for (const std::string& t : {*a, *b}) {
    ASSERT_EQ(t.size(), 46u) << t;
    EXPECT_EQ(t.substr(0, 3), "ck_");
    for (char c : t.substr(3)) {
      EXPECT_TRUE(absl::ascii_isalnum(c) || c == '-' || c == '_') << t;
    }
  }
}

TEST(AccessTokenTest, TheHashIsLowercaseHexSha256OfTheTokenBytes) {
  // FIPS 180-2's test vector.
  EXPECT_EQ(client::TokenSha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(*client::TokenEntry("ops", "abc", {"admin:*", "read:billing.*"}),
            "token ops sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad "
            "admin:* read:billing.*");
}

TEST(AccessTokenTest, BadNamesGrantsAndTokensAreRefusedNamingTheValue) {
  struct Case {
    std::string name, token;
    std::vector<std::string> grants;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "t", {"read:*"}, "NAME \"\""},
      {"a b", "t", {"read:*"}, "NAME \"a b\""},
      {std::string(65, 'n'), "t", {"read:*"}, "must be 1 to 64"},
      {"n", "t", {}, "at least one grant"},
      {"n", "t", {"read"}, "grant \"read\""},
      {"n", "t", {"read:"}, "grant \"read:\""},
      {"n", "t", {"delete:x"}, "grant \"delete:x\""},
      // What the server's access file would refuse.
      {"n", "t", {"read:*", "write:a[b]"}, "grant \"write:a[b]\": the pattern has '['"},
      {"n", "t", {"read:x\\"}, "ends in a lone backslash"},
      {"n", "t", {"read:\xff"}, "not valid UTF-8"},
      {"n", "t k", {"read:*"}, "character 0x20"},
  };
  for (const Case& c : cases) {
    auto entry = client::TokenEntry(c.name, c.token, c.grants);
    EXPECT_EQ(entry.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(std::string(entry.status().message()), HasSubstr(c.message));
  }
  EXPECT_TRUE(client::TokenEntry(std::string(64, 'n'), "t", {"write:a.b-c_?*"}).ok());
}

// Filter names are Redis keys: grants on them are written so that the
// server's access file reads them back as given (quoted when they hold a
// space or a quote).
TEST(AccessTokenTest, GrantsOnKeyShapedNamesAreWrittenAsTheAccessFileReadsThem) {
  auto entry = client::TokenEntry(
      "ops", "abc", {"read:users:*", "write:a/b", "admin:my filter*", "read:say \"hi\\*\""});
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(*entry,
            "token ops sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad "
            "read:users:* write:a/b admin:\"my filter*\" read:\"say \\\"hi\\\\*\\\"\"");
}

}  // namespace
}  // namespace cuckoo::testing
