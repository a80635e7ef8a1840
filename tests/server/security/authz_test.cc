// Authorization, table-driven: every FilterService RPC x {no token, read,
// write, admin, admin of another pattern} x {a filter the grants match, one
// they do not}, with the status code each must get (server/security/auth.h,
// server/security/access.h). A refused call must also change nothing, and must be
// refused the same way whether its filter exists or not.
#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/security/access.h"
#include "tests/util/test_server.h"

namespace cuckoo::testing {
namespace {

using grpc::StatusCode;

enum class Rpc {
  kCreateFilter,
  kGetFilter,
  kListFilters,
  kDropFilter,
  kInsert,
  kLookup,
  kDelete,
  kCount,
  kGetServerInfo,
  kSnapshot,
  kExportFilter,
  kImportFilter,
  kSetFilterExpiry,
};
constexpr Rpc kRpcs[] = {Rpc::kCreateFilter,   Rpc::kGetFilter,    Rpc::kListFilters,
                         Rpc::kDropFilter,     Rpc::kInsert,       Rpc::kLookup,
                         Rpc::kDelete,         Rpc::kCount,        Rpc::kGetServerInfo,
                         Rpc::kSnapshot,       Rpc::kExportFilter, Rpc::kImportFilter,
                         Rpc::kSetFilterExpiry};

const char* RpcName(Rpc rpc) {
  switch (rpc) {
    case Rpc::kCreateFilter:
      return "CreateFilter";
    case Rpc::kGetFilter:
      return "GetFilter";
    case Rpc::kListFilters:
      return "ListFilters";
    case Rpc::kDropFilter:
      return "DropFilter";
    case Rpc::kInsert:
      return "Insert";
    case Rpc::kLookup:
      return "Lookup";
    case Rpc::kDelete:
      return "Delete";
    case Rpc::kCount:
      return "Count";
    case Rpc::kGetServerInfo:
      return "GetServerInfo";
    case Rpc::kSnapshot:
      return "Snapshot";
    case Rpc::kExportFilter:
      return "ExportFilter";
    case Rpc::kImportFilter:
      return "ImportFilter";
    case Rpc::kSetFilterExpiry:
      return "SetFilterExpiry";
  }
  return "?";
}

// 0 none, 1 read, 2 write, 3 admin: what each RPC needs on its filter.
int Needs(Rpc rpc) {
  switch (rpc) {
    case Rpc::kGetFilter:
    case Rpc::kListFilters:
    case Rpc::kLookup:
    case Rpc::kCount:
      return 1;
    case Rpc::kInsert:
    case Rpc::kDelete:
      return 2;
    case Rpc::kCreateFilter:
    case Rpc::kDropFilter:
    case Rpc::kSnapshot:
    case Rpc::kExportFilter:
    case Rpc::kImportFilter:
    case Rpc::kSetFilterExpiry:  // An expiry is a scheduled drop.
      return 3;
    case Rpc::kGetServerInfo:
      return 0;
  }
  return 0;
}

struct Who {
  const char* label;
  std::string token;  // "" sends none
  int level;          // of its grant on billing.* (other: on cart.*)
  bool on_billing;
};

std::string Hex(const std::array<uint8_t, 32>& h) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(h.data()), h.size()));
}

class AuthzTest : public ServerTest {
 protected:
  void SetUp() override {
    const std::string path = dir_.path() + "/access";
    std::ofstream out(path);
    out << "# the callers of the table\n";
    for (const auto& [name, token, grant] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {"reader", "tok-reader", "read:billing.*"},
             {"writer", "tok-writer", "write:billing.*"},
             {"admin", "tok-admin", "admin:billing.*"},
             {"other", "tok-other", "admin:cart.*"},
             {"root", "tok-root", "admin:*"}}) {
      out << "token\t" << name << "\tsha256:" << Hex(server::Sha256(token)) << "\t" << grant
          << "\n";
    }
    out.close();
    server::ServerConfig config = TestConfig(dir_.path() + "/data");
    config.max_filters = 256;
    config.auth_tokens = path;
    StartServer(config);
    for (const char* name : {"billing.users", "cart.items"}) Create("tok-root", name);
    // A snapshot to import: billing.users exported by root.
    ASSERT_EQ(Export("tok-root", "billing.users", &snapshot_), StatusCode::OK);
  }

  void Auth(grpc::ClientContext* ctx, const std::string& token) {
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }

  StatusCode Create(const std::string& token, const std::string& name) {
    grpc::ClientContext ctx;
    Auth(&ctx, token);
    v1::CreateFilterRequest req;
    req.set_name(name);
    req.set_capacity(1000);
    v1::CreateFilterResponse resp;
    return stub_->CreateFilter(&ctx, req, &resp).error_code();
  }

  StatusCode Export(const std::string& token, const std::string& name, std::string* data) {
    grpc::ClientContext ctx;
    Auth(&ctx, token);
    v1::ExportFilterRequest req;
    req.set_name(name);
    auto reader = stub_->ExportFilter(&ctx, req);
    v1::ExportFilterChunk chunk;
    while (reader->Read(&chunk)) {
      if (data != nullptr) data->append(chunk.data());
    }
    return reader->Finish().error_code();
  }

  bool Exists(const std::string& name) {
    grpc::ClientContext ctx;
    Auth(&ctx, "tok-root");
    v1::GetFilterRequest req;
    req.set_name(name);
    v1::GetFilterResponse resp;
    return stub_->GetFilter(&ctx, req, &resp).ok();
  }

  uint64_t Items(const std::string& name) {
    grpc::ClientContext ctx;
    Auth(&ctx, "tok-root");
    v1::GetFilterRequest req;
    req.set_name(name);
    v1::GetFilterResponse resp;
    EXPECT_TRUE(stub_->GetFilter(&ctx, req, &resp).ok());
    return resp.filter().items();
  }

  // Calls `rpc` on `filter` as `token`; *message gets the status message.
  StatusCode Call(Rpc rpc, const std::string& token, const std::string& filter,
                  std::string* message) {
    grpc::ClientContext ctx;
    Auth(&ctx, token);
    grpc::Status s;
    switch (rpc) {
      case Rpc::kCreateFilter: {
        v1::CreateFilterRequest req;
        req.set_name(filter);
        req.set_capacity(1000);
        v1::CreateFilterResponse resp;
        s = stub_->CreateFilter(&ctx, req, &resp);
        break;
      }
      case Rpc::kGetFilter: {
        v1::GetFilterRequest req;
        req.set_name(filter);
        v1::GetFilterResponse resp;
        s = stub_->GetFilter(&ctx, req, &resp);
        break;
      }
      case Rpc::kListFilters: {
        v1::ListFiltersRequest req;
        v1::ListFiltersResponse resp;
        s = stub_->ListFilters(&ctx, req, &resp);
        listed_.clear();
        for (const v1::FilterInfo& f : resp.filters()) listed_.push_back(f.name());
        break;
      }
      case Rpc::kDropFilter: {
        v1::DropFilterRequest req;
        req.set_name(filter);
        v1::DropFilterResponse resp;
        s = stub_->DropFilter(&ctx, req, &resp);
        break;
      }
      case Rpc::kSetFilterExpiry: {
        v1::SetFilterExpiryRequest req;
        req.set_name(filter);
        req.mutable_expire_at()->set_seconds(4102444800);  // 2100-01-01.
        v1::SetFilterExpiryResponse resp;
        s = stub_->SetFilterExpiry(&ctx, req, &resp);
        break;
      }
      case Rpc::kInsert: {
        v1::InsertRequest req;
        req.set_filter(filter);
        req.add_keys("k1");
        v1::InsertResponse resp;
        s = stub_->Insert(&ctx, req, &resp);
        break;
      }
      case Rpc::kLookup: {
        v1::LookupRequest req;
        req.set_filter(filter);
        req.add_keys("k1");
        v1::LookupResponse resp;
        s = stub_->Lookup(&ctx, req, &resp);
        break;
      }
      case Rpc::kDelete: {
        v1::DeleteRequest req;
        req.set_filter(filter);
        req.add_keys("k1");
        v1::DeleteResponse resp;
        s = stub_->Delete(&ctx, req, &resp);
        break;
      }
      case Rpc::kCount: {
        v1::CountRequest req;
        req.set_filter(filter);
        req.add_keys("k1");
        v1::CountResponse resp;
        s = stub_->Count(&ctx, req, &resp);
        break;
      }
      case Rpc::kGetServerInfo: {
        v1::GetServerInfoRequest req;
        v1::GetServerInfoResponse resp;
        s = stub_->GetServerInfo(&ctx, req, &resp);
        break;
      }
      case Rpc::kSnapshot: {
        v1::SnapshotRequest req;
        req.set_filter(filter);
        v1::SnapshotResponse resp;
        s = stub_->Snapshot(&ctx, req, &resp);
        break;
      }
      case Rpc::kExportFilter: {
        v1::ExportFilterRequest req;
        req.set_name(filter);
        auto reader = stub_->ExportFilter(&ctx, req);
        v1::ExportFilterChunk chunk;
        while (reader->Read(&chunk)) {
        }
        s = reader->Finish();
        break;
      }
      case Rpc::kImportFilter: {
        v1::ImportFilterResponse resp;
        auto writer = stub_->ImportFilter(&ctx, &resp);
        v1::ImportFilterChunk chunk;
        chunk.set_name(filter);
        chunk.set_total_bytes(snapshot_.size());
        chunk.set_data(snapshot_);
        writer->Write(chunk);
        writer->WritesDone();
        s = writer->Finish();
        break;
      }
    }
    *message = s.error_message();
    return s.error_code();
  }

  std::string snapshot_;
  std::vector<std::string> listed_;
};

TEST_F(AuthzTest, EveryRpcForEveryCallerOnMatchingAndOtherFiltersGetsTheExpectedCode) {
  const std::vector<Who> callers = {{"no token", "", 0, true},
                                    {"read", "tok-reader", 1, true},
                                    {"write", "tok-writer", 2, true},
                                    {"admin", "tok-admin", 3, true},
                                    {"admin of cart.*", "tok-other", 3, false}};
  int row = 0;
  for (Rpc rpc : kRpcs) {
    for (const Who& who : callers) {
      for (const bool billing : {true, false}) {
        ++row;
        const std::string side = billing ? "billing" : "cart";
        // The filter each call names, set up by root as the call needs it.
        std::string filter = billing ? "billing.users" : "cart.items";
        if (rpc == Rpc::kCreateFilter || rpc == Rpc::kImportFilter) {
          filter = absl::StrCat(side, ".new", row);
        } else if (rpc == Rpc::kDropFilter) {
          filter = absl::StrCat(side, ".drop", row);
          ASSERT_EQ(Create("tok-root", filter), StatusCode::OK);
        }
        const uint64_t items_before =
            filter.find(".users") != std::string::npos || filter.find(".items") != std::string::npos
                ? Items(filter)
                : 0;
        const bool grant_matches = who.on_billing == billing;
        StatusCode want;
        if (who.token.empty()) {
          want = StatusCode::UNAUTHENTICATED;
        } else if (Needs(rpc) == 0 || rpc == Rpc::kListFilters) {
          want = StatusCode::OK;  // ListFilters lists what the caller may read.
        } else if (grant_matches && who.level >= Needs(rpc)) {
          want = StatusCode::OK;
        } else {
          want = StatusCode::PERMISSION_DENIED;
        }
        std::string message;
        const StatusCode got = Call(rpc, who.token, filter, &message);
        SCOPED_TRACE(absl::StrCat(RpcName(rpc), " by ", who.label, " on ", filter, ": ", message));
        EXPECT_EQ(got, want);
        if (want == StatusCode::PERMISSION_DENIED) {
          // The message names the method and the filter.
          EXPECT_NE(message.find(RpcName(rpc)), std::string::npos);
          // (An import by a caller with no admin grant at all is refused
          // before its first chunk names the filter: it must not hold an
          // import slot until then.)
          if (rpc != Rpc::kImportFilter || who.level == 3) {
            EXPECT_NE(message.find(filter), std::string::npos);
          }
          // Nothing changed.
          if (rpc == Rpc::kDropFilter) {
            EXPECT_TRUE(Exists(filter));
          }
          if (rpc == Rpc::kCreateFilter || rpc == Rpc::kImportFilter) {
            EXPECT_FALSE(Exists(filter));
          }
          if (rpc == Rpc::kInsert || rpc == Rpc::kDelete) {
            EXPECT_EQ(Items(filter), items_before);
          }
          // The same refusal for a filter that does not exist: the answer
          // never tells whether a name is taken.
          std::string ghost_message;
          EXPECT_EQ(Call(rpc, who.token, side + ".ghost", &ghost_message),
                    StatusCode::PERMISSION_DENIED)
              << ghost_message;
        }
        if (want == StatusCode::UNAUTHENTICATED) {
          EXPECT_NE(message.find("authorization"), std::string::npos);
        }
        if (rpc == Rpc::kListFilters && want == StatusCode::OK) {
          for (const std::string& name : listed_) {
            EXPECT_EQ(name.rfind(who.on_billing ? "billing." : "cart.", 0), 0u)
                << who.label << " may not see " << name;
          }
          EXPECT_FALSE(listed_.empty());
        }
      }
    }
  }
}

TEST_F(AuthzTest, SnapshotOfEveryFilterNeedsAdminOfEveryFilter) {
  std::string message;
  EXPECT_EQ(Call(Rpc::kSnapshot, "tok-admin", "", &message), StatusCode::PERMISSION_DENIED);
  EXPECT_NE(message.find("admin:*"), std::string::npos) << message;
  EXPECT_EQ(Call(Rpc::kSnapshot, "tok-root", "", &message), StatusCode::OK) << message;
}

TEST_F(AuthzTest, UnknownOrMalformedCredentialsAreUnauthenticatedAndCounted) {
  for (const char* header : {"Bearer nope", "Basic dXNlcjpwYXNz", "Bearer ", "tok-root"}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", header);
    v1::LookupRequest req;
    req.set_filter("billing.users");
    req.add_keys("k");
    v1::LookupResponse resp;
    EXPECT_EQ(stub_->Lookup(&ctx, req, &resp).error_code(), StatusCode::UNAUTHENTICATED) << header;
  }
  // The scheme is case-insensitive (RFC 6750 follows RFC 7235).
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "bearer tok-reader");
  v1::LookupRequest req;
  req.set_filter("billing.users");
  req.add_keys("k");
  v1::LookupResponse resp;
  EXPECT_TRUE(stub_->Lookup(&ctx, req, &resp).ok());
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(
      metrics.find(R"(cuckood_auth_failures_total{method="Lookup",reason="unknown_token"} 1)"),
      std::string::npos)
      << metrics;
  EXPECT_NE(
      metrics.find(R"(cuckood_auth_failures_total{method="Lookup",reason="malformed_header"} 3)"),
      std::string::npos)
      << metrics;
}

TEST_F(AuthzTest, ARequestNamingNoFilterIsInvalidNotADeniedWholeServerCall) {
  for (Rpc rpc : {Rpc::kGetFilter, Rpc::kLookup, Rpc::kInsert, Rpc::kDropFilter}) {
    std::string message;
    EXPECT_EQ(Call(rpc, "tok-reader", "", &message), StatusCode::INVALID_ARGUMENT)
        << RpcName(rpc) << ": " << message;
  }
}

// A rename drops its name and creates (or replaces) the new one: the admin
// grant on both, or PERMISSION_DENIED naming the name it lacks, and
// nothing changes.
TEST_F(AuthzTest, RenameFilterNeedsTheAdminGrantOnBothNames) {
  auto rename = [&](const std::string& token, const std::string& from, const std::string& to,
                    std::string* message = nullptr) {
    grpc::ClientContext ctx;
    Auth(&ctx, token);
    v1::RenameFilterRequest req;
    req.set_name(from);
    req.set_new_name(to);
    req.set_replace(true);
    v1::RenameFilterResponse resp;
    grpc::Status s = stub_->RenameFilter(&ctx, req, &resp);
    if (message != nullptr) *message = s.error_message();
    return s.error_code();
  };
  std::string message;
  EXPECT_EQ(rename("tok-admin", "billing.users", "cart.stolen", &message),
            StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(message, ::testing::HasSubstr("cart.stolen"));
  EXPECT_THAT(message, ::testing::HasSubstr("RenameFilter"));
  EXPECT_EQ(rename("tok-admin", "cart.items", "billing.mine", &message),
            StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(message, ::testing::HasSubstr("cart.items"));
  EXPECT_EQ(rename("tok-writer", "billing.users", "billing.old"), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(rename("tok-reader", "billing.users", "billing.old"), StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Exists("billing.users"));
  EXPECT_TRUE(Exists("cart.items"));
  EXPECT_FALSE(Exists("cart.stolen"));
  EXPECT_FALSE(Exists("billing.mine"));
  EXPECT_EQ(rename("tok-admin", "billing.users", "billing.old"), StatusCode::OK);
  EXPECT_FALSE(Exists("billing.users"));
  EXPECT_TRUE(Exists("billing.old"));
  EXPECT_EQ(rename("tok-root", "cart.items", "billing.old"), StatusCode::OK);
  EXPECT_FALSE(Exists("cart.items"));
}

TEST_F(AuthzTest, HealthNeedsNoToken) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// Server reflection's one method, called with an empty message: what the
// server answers (UNIMPLEMENTED when reflection is off).
StatusCode CallReflection(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  return status.error_code();
}

TEST_F(ServerTest, ReflectionFollowsItsFlag) {
  EXPECT_NE(CallReflection(channel_), StatusCode::UNIMPLEMENTED);
  server::ServerConfig config = TestConfig(dir_.path());
  config.reflection = false;
  StartServer(config);
  EXPECT_EQ(CallReflection(channel_), StatusCode::UNIMPLEMENTED);
}

// The access file itself.
TEST(AccessTableTest, ParsesTokensCertificatesQuotesAndComments) {
  const std::string hash(64, 'a');
  absl::StatusOr<server::AccessTable> t = server::AccessTable::Parse(
      absl::StrCat("# comment\n\n  token a sha256:", hash,
                   " read:billing.* write:cart.?\r\n"
                   "cert b \"subject:CN=ops, O=Acme \\\"x\\\"\" admin:*\n"
                   "cert c san:spiffe://acme/batch write:events.*\n"),
      "f");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->entries().size(), 3u);
  EXPECT_EQ(t->tokens(), 1u);
  EXPECT_EQ(t->entries()[1].value, "CN=ops, O=Acme \"x\"");
  const server::AccessEntry& a = t->entries()[0];
  EXPECT_TRUE(a.Allows(server::Access::kRead, "billing.x"));
  EXPECT_FALSE(a.Allows(server::Access::kWrite, "billing.x"));
  EXPECT_TRUE(a.Allows(server::Access::kRead, "cart.1"));
  EXPECT_TRUE(a.Allows(server::Access::kWrite, "cart.1"));
  EXPECT_FALSE(a.Allows(server::Access::kWrite, "cart.12"));
  EXPECT_FALSE(a.Allows(server::Access::kAdmin, "cart.1"));
  EXPECT_FALSE(a.AdminOfAll());
  EXPECT_TRUE(t->entries()[1].AdminOfAll());
  EXPECT_EQ(t->FindCert({}, {"spiffe://acme/batch"}, {}), &t->entries()[2]);
  EXPECT_EQ(t->FindCert({"b"}, {}, {}), nullptr);
  bool ambiguous = true;
  EXPECT_EQ(t->FindCert({}, {"spiffe://acme/batch"}, {}, &ambiguous), &t->entries()[2]);
  EXPECT_FALSE(ambiguous);
}

TEST(AccessTableTest, ACertificateThatSeveralEntriesNameIsNoOnesInParticular) {
  absl::StatusOr<server::AccessTable> t = server::AccessTable::Parse(
      "cert by-cn cn:cart read:cart.*\ncert by-san san:spiffe://acme/cart admin:*\n", "f");
  ASSERT_TRUE(t.ok()) << t.status();
  bool ambiguous = false;
  EXPECT_EQ(t->FindCert({"cart"}, {"spiffe://acme/cart"}, {}, &ambiguous), nullptr);
  EXPECT_TRUE(ambiguous);
  EXPECT_EQ(t->FindCert({"cart"}, {}, {}, &ambiguous), &t->entries()[0]);
  EXPECT_FALSE(ambiguous);
}

TEST(AccessTableTest, EachBadLineIsNamedWithTheProblem) {
  const std::string hash(64, 'b');
  const std::pair<std::string, std::string> cases[] = {
      {"token a sha256:" + hash, "expected KIND NAME CREDENTIAL GRANT"},
      {"user a sha256:" + hash + " read:*", "unknown kind"},
      {"token a/b sha256:" + hash + " read:*", "name"},
      {"token a sha256:abc read:*", "sha256:<64 hex digits>"},
      {"token a " + hash + " read:*", "sha256:<64 hex digits>"},
      {"token a sha256:" + hash + " read", "read:PATTERN"},
      {"token a sha256:" + hash + " owner:*", "read:PATTERN"},
      {"token a sha256:" + hash + " read:bill[i]ng",
       "the pattern has '[' at offset 4: character classes are not supported"},
      {"token a sha256:" + hash + " read:bill\\", "the pattern ends in a lone backslash"},
      {"token a sha256:" + hash + " read:caf\xC3", "bytes that are not UTF-8"},
      {"token a sha256:" + hash + " read:" + std::string(1025, 'p'),
       "the pattern is 1025 bytes; at most 1024 are allowed"},
      {"cert a dn:x read:*", "cn:, san: or subject:"},
      {"cert a \"san:x read:*", "not closed"},
      {"token a sha256:" + hash + " read:*\ntoken a sha256:" + std::string(64, 'c') + " read:*",
       "already used on line 1"},
      {"token a sha256:" + hash + " read:*\ntoken b sha256:" + hash + " read:*", "same credential"},
      {"token a sha256:" + hash + " read:*\x01", "control"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<server::AccessTable> t = server::AccessTable::Parse(text, "tokens.txt");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("tokens.txt:"), absl::string_view::npos) << t.status();
    EXPECT_NE(t.status().message().find(want), absl::string_view::npos)
        << text << " -> " << t.status();
  }
}

TEST(AccessTableTest, PatternsMatchWholeNamesWithStarAndQuestionMark) {
  using server::MatchesPattern;
  EXPECT_TRUE(MatchesPattern("*", "anything"));
  EXPECT_TRUE(MatchesPattern("billing.*", "billing."));
  EXPECT_TRUE(MatchesPattern("billing.*", "billing.users"));
  EXPECT_FALSE(MatchesPattern("billing.*", "billing"));
  EXPECT_FALSE(MatchesPattern("billing.*", "xbilling.users"));
  EXPECT_TRUE(MatchesPattern("*.users", "billing.users"));
  EXPECT_FALSE(MatchesPattern("*.users", "billing.users2"));
  EXPECT_TRUE(MatchesPattern("a*b*c", "aXXbYYbZc"));
  EXPECT_FALSE(MatchesPattern("a*b*c", "aXXbYYbZ"));
  EXPECT_TRUE(MatchesPattern("a?c", "abc"));
  EXPECT_FALSE(MatchesPattern("a?c", "ac"));
  EXPECT_TRUE(MatchesPattern("exact", "exact"));
  EXPECT_FALSE(MatchesPattern("exact", "exact2"));
  // A '*' in the pattern is a wildcard even where the name holds a '*'
  // (found by tests/fuzz/access_fuzz.cc).
  EXPECT_TRUE(MatchesPattern("*b", "*ab"));
  // Worst case stays fast: many stars against a long name that fails.
  EXPECT_FALSE(MatchesPattern("*a*a*a*a*a*a*a*b", std::string(512, 'a')));
}

// Filter names are Redis keys: grants match ':', '/', spaces and UTF-8 as
// any other byte, and a backslash makes the next character literal, as
// fnmatch and Redis's KEYS do.
TEST(AccessTableTest, PatternsMatchRedisStyleKeysAndEscapes) {
  using server::MatchesPattern;
  EXPECT_TRUE(MatchesPattern("users:*", "users:seen"));
  EXPECT_FALSE(MatchesPattern("users:*", "users/seen"));
  EXPECT_TRUE(MatchesPattern("a/*", "a/b/c"));
  EXPECT_TRUE(MatchesPattern("../*", "../../etc/passwd"));
  EXPECT_TRUE(MatchesPattern("my filter", "my filter"));
  EXPECT_TRUE(MatchesPattern("caf\xC3\xA9:*", "caf\xC3\xA9:x"));
  EXPECT_TRUE(MatchesPattern("caf??", "caf\xC3\xA9")) << "'?' is one byte, as fnmatch's";
  EXPECT_TRUE(MatchesPattern("star\\*", "star*"));
  EXPECT_FALSE(MatchesPattern("star\\*", "starry"));
  EXPECT_TRUE(MatchesPattern("what\\?", "what?"));
  EXPECT_FALSE(MatchesPattern("what\\?", "whatx"));
  EXPECT_TRUE(MatchesPattern("back\\\\slash", "back\\slash"));
  EXPECT_TRUE(MatchesPattern("\\[x]", "[x]"));
  EXPECT_TRUE(MatchesPattern("*\\**", "a*b"));
  EXPECT_FALSE(MatchesPattern("*\\**", "ab"));
  EXPECT_TRUE(MatchesPattern(std::string(512, 'k'), std::string(512, 'k')));
}

TEST(AccessTableTest, GrantsOnKeyShapedNamesParseQuotedOrNot) {
  const std::string hash(64, 'a');
  absl::StatusOr<server::AccessTable> t = server::AccessTable::Parse(
      absl::StrCat("token a sha256:", hash,
                   " read:users:* write:a/b \"admin:my filter*\" read:\"x y\\\\*\" "
                   "write:star\\* admin:caf\xC3\xA9:*\n"),
      "f");
  ASSERT_TRUE(t.ok()) << t.status();
  const server::AccessEntry& a = t->entries()[0];
  EXPECT_TRUE(a.Allows(server::Access::kRead, "users:seen"));
  EXPECT_FALSE(a.Allows(server::Access::kWrite, "users:seen"));
  EXPECT_TRUE(a.Allows(server::Access::kWrite, "a/b"));
  EXPECT_FALSE(a.Allows(server::Access::kWrite, "a/bc"));
  EXPECT_TRUE(a.Allows(server::Access::kAdmin, "my filter 2"));
  EXPECT_TRUE(a.Allows(server::Access::kRead, "x y*"));
  EXPECT_FALSE(a.Allows(server::Access::kRead, "x yz"));
  EXPECT_TRUE(a.Allows(server::Access::kWrite, "star*"));
  EXPECT_FALSE(a.Allows(server::Access::kWrite, "stars"));
  EXPECT_TRUE(a.Allows(server::Access::kAdmin, "caf\xC3\xA9:x"));
}

}  // namespace
}  // namespace cuckoo::testing
