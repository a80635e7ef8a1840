// TLS, mutual TLS and access tokens as an operator sets them up: a real
// cuckood started with --tls-cert/--tls-key and --auth-tokens (entries made
// by `cuckooctl hash-token`), driven through the real cuckooctl and the
// Python package; SIGHUP reloads of the access file, the JSON audit log and
// the auth failure metric. Certificates are made fresh per test
// (tests/util/test_pki.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/e2e/process.h"
#include "tests/util/http.h"
#include "tests/util/test_pki.h"

namespace cuckoo::testing {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout:\n" + r.out.substr(0, 2000) +
         "\n--- stderr:\n" + r.err.substr(0, 2000);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Polls `done` every 20 ms for up to `timeout`.
bool Eventually(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// ---------------------------------------------------------------------------
// A small JSON reader for the log lines: one object, flattened into
// {"a.b": value} (strings unescaped, other scalars as written). nullopt if
// the line is not one whole JSON object. (By hand: <regex> trips a false
// g++ 12 warning under ASan, and there is no JSON library in the tree.)
class JsonLine {
 public:
  static std::optional<std::map<std::string, std::string>> Parse(std::string_view text) {
    JsonLine p(text);
    std::map<std::string, std::string> out;
    p.SkipSpace();
    if (!p.Object("", out)) return std::nullopt;
    p.SkipSpace();
    if (p.i_ != p.s_.size()) return std::nullopt;
    return out;
  }

 private:
  explicit JsonLine(std::string_view s) : s_(s) {}

  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  bool String(std::string& out) {
    if (!Eat('"')) return false;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        c = s_[i_++];
        switch (c) {
          case '"':
          case '\\':
          case '/':
            break;
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case 'r':
            c = '\r';
            break;
          case 'b':
            c = '\b';
            break;
          case 'f':
            c = '\f';
            break;
          case 'u':  // Kept escaped: the checks compare ASCII only.
            if (i_ + 4 > s_.size()) return false;
            out += "\\u";
            out += s_.substr(i_, 4);
            i_ += 4;
            continue;
          default:
            return false;
        }
      }
      out.push_back(c);
    }
    return Eat('"');
  }
  bool Value(const std::string& key, std::map<std::string, std::string>& out) {
    SkipSpace();
    if (i_ >= s_.size()) return false;
    if (s_[i_] == '{') return Object(key + ".", out);
    if (s_[i_] == '"') return String(out[key]);
    if (s_[i_] == '[') {  // Elements checked, not kept.
      ++i_;
      std::map<std::string, std::string> ignored;
      if (Eat(']')) return true;
      do {
        if (!Value("", ignored)) return false;
      } while (Eat(','));
      return Eat(']');
    }
    const size_t start = i_;
    while (i_ < s_.size() && std::string_view("{}[],: \t\"").find(s_[i_]) == std::string::npos) {
      ++i_;
    }
    const std::string_view scalar = s_.substr(start, i_ - start);
    if (scalar.empty()) return false;
    if (scalar != "true" && scalar != "false" && scalar != "null" &&
        scalar.find_first_not_of("0123456789+-.eE") != std::string_view::npos) {
      return false;
    }
    out[key] = std::string(scalar);
    return true;
  }
  bool Object(const std::string& prefix, std::map<std::string, std::string>& out) {
    if (!Eat('{')) return false;
    if (Eat('}')) return true;
    do {
      std::string name;
      if (!String(name) || !Eat(':') || !Value(prefix + name, out)) return false;
    } while (Eat(','));
    return Eat('}');
  }

  std::string_view s_;
  size_t i_ = 0;
};

TEST(JsonLineTest, ReadsNestedObjectsAndRefusesBrokenLines) {
  auto line = JsonLine::Parse(
      R"({"msg":"audit","n":3,"audit":{"caller":"a \"b\"","ok":true,"l":[1,{"x":2}]}})");
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ((*line)["msg"], "audit");
  EXPECT_EQ((*line)["n"], "3");
  EXPECT_EQ((*line)["audit.caller"], "a \"b\"");
  EXPECT_EQ((*line)["audit.ok"], "true");
  EXPECT_FALSE(JsonLine::Parse(R"({"msg":"audit")").has_value());
  EXPECT_FALSE(JsonLine::Parse(R"({"msg":audit})").has_value());
  EXPECT_FALSE(JsonLine::Parse(R"({"msg":"a"} x)").has_value());
  EXPECT_FALSE(JsonLine::Parse("2026-01-01 info serving on").has_value());
}

// ---------------------------------------------------------------------------

// `cuckooctl hash-token`'s two lines: a new token and its access-file entry.
struct Token {
  std::string token;
  std::string entry;
};

Token HashToken(const std::string& name, const std::vector<std::string>& grants) {
  std::vector<std::string> argv = {CUCKOOCTL_PATH, "hash-token", name};
  for (const std::string& g : grants) argv.push_back("--grant=" + g);
  Result r = RunProcess(argv);
  EXPECT_EQ(r.code, 0) << Describe(r);
  std::vector<std::string> lines = Lines(r.out);
  EXPECT_EQ(lines.size(), 2u) << r.out;
  if (lines.size() != 2) return {};
  EXPECT_TRUE(lines[0].starts_with("ck_")) << lines[0];
  EXPECT_TRUE(lines[1].starts_with("token " + name + " sha256:")) << lines[1];
  return {lines[0], lines[1]};
}

class SecurityE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = MakeCa("cuckoo e2e CA");
    const Pem server = IssueCert(
        ca_, {.common_name = "localhost", .dns_sans = {"localhost"}, .ip_sans = {"127.0.0.1"}});
    ca_path_ = dir_.path() + "/ca.pem";
    cert_path_ = dir_.path() + "/server.pem";
    key_path_ = dir_.path() + "/server.key";
    access_path_ = dir_.path() + "/access.conf";
    WritePem(ca_path_, ca_.cert);
    WritePem(cert_path_, server.cert);
    WritePem(key_path_, server.key);
    admin_ = HashToken("ops", {"admin:*"});
    writer_ = HashToken("ingest", {"write:*"});
    reader_ = HashToken("reader", {"read:*"});
    billing_ = HashToken("billing-reader", {"read:billing.*"});
    WriteAccessFile({admin_.entry, writer_.entry, reader_.entry, billing_.entry});
  }

  void WriteAccessFile(const std::vector<std::string>& entries) {
    std::string text = "# KIND NAME CREDENTIAL GRANTS (made by cuckooctl hash-token)\n";
    for (const std::string& e : entries) text += e + "\n";
    WritePem(access_path_, text);  // An atomic replace, like an editor's.
  }

  void StartServer(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> flags = {"--tls-cert=" + cert_path_, "--tls-key=" + key_path_,
                                      "--auth-tokens=" + access_path_, "--log-format=json"};
    flags.insert(flags.end(), extra.begin(), extra.end());
    server_ = std::make_unique<Cuckood>(data_.path(), flags);
    ASSERT_TRUE(server_->ready()) << server_->process().out() << server_->process().err();
  }

  // cuckooctl --target=<the server> --ca=<the CA> [--token=TOKEN] args...
  Result Ctl(const std::string& token, const std::vector<std::string>& args,
             const std::string& stdin_data = "") {
    std::vector<std::string> argv = {CUCKOOCTL_PATH, "--target=" + server_->address(),
                                     "--ca=" + ca_path_};
    if (!token.empty()) argv.push_back("--token=" + token);
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, stdin_data);
  }

  // Creates `name` with the admin token: 32-bit fingerprints and a fixed
  // seed, so absent keys are absent.
  void Create(const std::string& name) {
    Result r =
        Ctl(admin_.token, {"create", name, "--capacity=1000", "--fingerprint-bits=32", "--seed=7"});
    ASSERT_EQ(r.code, 0) << Describe(r);
  }

  // The filter names `cuckooctl list` shows to `token` (first column, below
  // the header).
  std::vector<std::string> ListedNames(const std::string& token) {
    Result r = Ctl(token, {"list"});
    EXPECT_EQ(r.code, 0) << Describe(r);
    std::vector<std::string> names;
    std::vector<std::string> rows = Lines(r.out);
    for (size_t i = 1; i < rows.size(); ++i) names.push_back(rows[i].substr(0, rows[i].find(' ')));
    return names;
  }

  // The server's stdout lines parsed as JSON; a line that is not JSON fails
  // the test.
  std::vector<std::map<std::string, std::string>> LogLines() {
    std::vector<std::map<std::string, std::string>> lines;
    for (const std::string& line : Lines(server_->process().out())) {
      auto parsed = JsonLine::Parse(line);
      EXPECT_TRUE(parsed.has_value()) << "not a JSON log line: " << line;
      if (parsed) lines.push_back(*std::move(parsed));
    }
    return lines;
  }

  TempDir dir_, data_;
  Pem ca_;
  std::string ca_path_, cert_path_, key_path_, access_path_;
  Token admin_, writer_, reader_, billing_;
  std::unique_ptr<Cuckood> server_;
};

TEST_F(SecurityE2eTest, AdminCreatesWriterInsertsReaderLooksUpOverTls) {
  StartServer();
  Create("users");
  Result inserted = Ctl(writer_.token, {"insert", "users"}, "alice\nbob\n");
  EXPECT_EQ(inserted.code, 0) << Describe(inserted);
  Result looked = Ctl(reader_.token, {"lookup", "users", "alice", "bob", "mallory"});
  EXPECT_EQ(looked.code, 1) << Describe(looked);  // mallory is absent.
  EXPECT_EQ(looked.out, "present\talice\npresent\tbob\nabsent\tmallory\n");
  EXPECT_THAT(looked.err, HasSubstr("2 present, 1 absent"));
}

TEST_F(SecurityE2eTest, ReadTokenCannotInsertAndIsToldWhichGrantIsMissing) {
  StartServer();
  Create("users");
  Result denied = Ctl(reader_.token, {"insert", "users", "alice"});
  EXPECT_EQ(denied.code, 3) << Describe(denied);
  EXPECT_THAT(denied.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("\"reader\""),
                                HasSubstr("Insert"), HasSubstr("\"users\""), HasSubstr("write")))
      << denied.err;
  // Nothing was inserted.
  Result looked = Ctl(reader_.token, {"lookup", "users", "alice"});
  EXPECT_EQ(looked.out, "absent\talice\n") << Describe(looked);
  // The answer does not tell whether a filter exists: a caller without any
  // grant on "users" hears the same about it as about a missing filter.
  Result existing = Ctl(billing_.token, {"insert", "users", "alice"});
  Result missing = Ctl(billing_.token, {"insert", "no-such-filter", "alice"});
  EXPECT_EQ(existing.code, 3) << Describe(existing);
  EXPECT_EQ(missing.code, 3) << Describe(missing);
  EXPECT_THAT(existing.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("\"users\"")));
  EXPECT_THAT(missing.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("\"no-such-filter\"")));
  // A write token may insert, not create.
  Result create = Ctl(writer_.token, {"create", "more", "--capacity=10"});
  EXPECT_EQ(create.code, 3) << Describe(create);
  EXPECT_THAT(create.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("CreateFilter"),
                                HasSubstr("\"more\""), HasSubstr("admin")));
}

TEST_F(SecurityE2eTest, CallsWithoutAKnownTokenAreUnauthenticated) {
  StartServer();
  Create("users");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"lookup", "users", "alice"}, {"list"}}) {
    Result none = Ctl("", args);
    EXPECT_EQ(none.code, 3) << Describe(none);
    EXPECT_THAT(none.err, HasSubstr("UNAUTHENTICATED")) << none.err;
    // A well-formed token the access file does not hold.
    Result unknown = Ctl(HashToken("stranger", {"admin:*"}).token, args);
    EXPECT_EQ(unknown.code, 3) << Describe(unknown);
    EXPECT_THAT(unknown.err, HasSubstr("UNAUTHENTICATED")) << unknown.err;
  }
}

TEST_F(SecurityE2eTest, ListShowsOnlyTheFiltersTheTokenMayRead) {
  StartServer();
  for (const char* name : {"billing.invoices", "billing.users", "events.clicks", "xbilling.y"}) {
    Create(name);
  }
  EXPECT_THAT(ListedNames(billing_.token), ElementsAre("billing.invoices", "billing.users"));
  EXPECT_THAT(ListedNames(admin_.token),
              ElementsAre("billing.invoices", "billing.users", "events.clicks", "xbilling.y"));
  Result other = Ctl(billing_.token, {"lookup", "events.clicks", "a"});
  EXPECT_EQ(other.code, 3) << Describe(other);
  EXPECT_THAT(other.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("\"events.clicks\"")));
}

TEST_F(SecurityE2eTest, HealthOverTlsNeedsNoTokenButDoesNeedTls) {
  StartServer();
  Result health = Ctl("", {"health", "--timeout=5s"});
  EXPECT_EQ(health.code, 0) << Describe(health);
  EXPECT_EQ(health.out, "SERVING\n");
  // Plaintext to a TLS port: no answer.
  Result plain = RunProcess({CUCKOOCTL_PATH, "--target=" + server_->address(), "health",
                             "--timeout=2s", "--retry-timeout=0"});
  EXPECT_EQ(plain.code, 3) << Describe(plain);
  // A CA that did not sign the server's certificate.
  const std::string other_ca = dir_.path() + "/other-ca.pem";
  WritePem(other_ca, MakeCa("someone else").cert);
  Result wrong_ca = RunProcess({CUCKOOCTL_PATH, "--target=" + server_->address(),
                                "--ca=" + other_ca, "health", "--timeout=2s", "--retry-timeout=0"});
  EXPECT_EQ(wrong_ca.code, 3) << Describe(wrong_ca);
}

TEST_F(SecurityE2eTest, SighupRevokesARemovedTokenWithoutWaitingForTheInterval) {
  StartServer({"--auth-reload-interval=1h"});
  ASSERT_EQ(Ctl(reader_.token, {"list"}).code, 0);
  WriteAccessFile({admin_.entry, writer_.entry, billing_.entry});  // reader revoked.
  // The interval is an hour: only the signal reloads now.
  server_->process().Signal(SIGHUP);
  Result last;
  EXPECT_TRUE(Eventually([&] {
    last = Ctl(reader_.token, {"list"});
    return last.code == 3 && last.err.find("UNAUTHENTICATED") != std::string::npos;
  })) << Describe(last);
  EXPECT_EQ(Ctl(admin_.token, {"list"}).code, 0);
  // Logged just after the new table is in place.
  EXPECT_TRUE(Eventually([&] {
    return server_->process().out().find("reloaded the access file") != std::string::npos;
  })) << server_->process().out();
}

TEST_F(SecurityE2eTest, BrokenAccessFileOnSighupKeepsThePreviousOne) {
  StartServer({"--auth-reload-interval=1h"});
  WriteAccessFile({admin_.entry, "token half-an-entry", reader_.entry});
  server_->process().Signal(SIGHUP);
  EXPECT_TRUE(Eventually([&] {
    return server_->process().out().find("not reloaded") != std::string::npos;
  })) << server_->process().out();
  EXPECT_EQ(server_->process().Wait(std::chrono::milliseconds(0)), -1) << "cuckood exited";
  std::string error_line;
  for (const auto& line : LogLines()) {
    if (line.count("msg") && line.at("msg").find("not reloaded") != std::string::npos) {
      error_line = line.at("msg");
      EXPECT_EQ(line.at("level"), "error");
    }
  }
  EXPECT_THAT(error_line, HasSubstr(access_path_ + ":3")) << "names the file and the bad line";
  // The previous file is in force: the writer (not in the broken one) still
  // gets in.
  Result inserted = Ctl(writer_.token, {"list"});
  EXPECT_EQ(inserted.code, 0) << Describe(inserted);
}

TEST_F(SecurityE2eTest, DeniedAndAdminCallsAreAuditedAsJsonLogLines) {
  StartServer();
  Create("users");
  Result denied = Ctl(reader_.token, {"drop", "users"});
  ASSERT_EQ(denied.code, 3) << Describe(denied);
  ASSERT_THAT(denied.err, HasSubstr("PERMISSION_DENIED"));

  auto find = [&](const std::string& method, const std::string& outcome) {
    std::optional<std::map<std::string, std::string>> found;
    for (auto& line : LogLines()) {
      if (line["msg"] == "audit" && line["audit.method"] == method &&
          line["audit.outcome"] == outcome) {
        found = line;
      }
    }
    return found;
  };
  std::optional<std::map<std::string, std::string>> drop, create;
  EXPECT_TRUE(Eventually([&] {
    drop = find("DropFilter", "PERMISSION_DENIED");
    create = find("CreateFilter", "OK");
    return drop && create;
  })) << server_->process().out();
  ASSERT_TRUE(drop && create);
  EXPECT_EQ((*drop)["level"], "warning");  // spdlog's name for warn.
  EXPECT_EQ((*drop)["audit.caller"], "reader");
  EXPECT_EQ((*drop)["audit.filter"], "users");
  EXPECT_THAT((*drop)["audit.peer"], HasSubstr("127.0.0.1"));
  EXPECT_EQ((*create)["level"], "info");
  EXPECT_EQ((*create)["audit.caller"], "ops");
  EXPECT_EQ((*create)["audit.filter"], "users");
  // The filter is still there.
  EXPECT_THAT(ListedNames(admin_.token), ElementsAre("users"));
}

TEST_F(SecurityE2eTest, MutualTlsNeedsAClientCertificateSignedByTheClientCa) {
  const Pem client =
      IssueCert(ca_, {.common_name = "cart-service", .client = true, .server = false});
  const std::string client_cert = dir_.path() + "/client.pem";
  const std::string client_key = dir_.path() + "/client.key";
  WritePem(client_cert, client.cert);
  WritePem(client_key, client.key);
  WriteAccessFile({admin_.entry, reader_.entry, "cert cart cn:cart-service admin:cart.*"});
  StartServer({"--tls-client-ca=" + ca_path_});

  const std::vector<std::string> mtls = {"--cert=" + client_cert, "--key=" + client_key};
  auto with_cert = [&](const std::string& token, std::vector<std::string> args) {
    args.insert(args.begin(), mtls.begin(), mtls.end());
    return Ctl(token, args);
  };
  Result listed = with_cert(reader_.token, {"list"});
  EXPECT_EQ(listed.code, 0) << Describe(listed);
  // The certificate alone is a caller too (its access-file entry).
  Result created = with_cert("", {"create", "cart.items", "--capacity=100"});
  EXPECT_EQ(created.code, 0) << Describe(created);
  Result outside = with_cert("", {"create", "orders", "--capacity=100"});
  EXPECT_EQ(outside.code, 3) << Describe(outside);
  EXPECT_THAT(outside.err, AllOf(HasSubstr("PERMISSION_DENIED"), HasSubstr("\"cart\"")));

  // No client certificate: the handshake fails, token or not.
  Result without = Ctl(reader_.token, {"list", "--timeout=3s", "--retry-timeout=0"});
  EXPECT_EQ(without.code, 3) << Describe(without);
  EXPECT_THAT(without.err, Not(HasSubstr("UNAUTHENTICATED")));
  // A certificate from another CA is refused as well.
  const Pem stranger_ca = MakeCa("another CA");
  const Pem stranger =
      IssueCert(stranger_ca, {.common_name = "cart-service", .client = true, .server = false});
  WritePem(client_cert, stranger.cert);
  WritePem(client_key, stranger.key);
  Result foreign = with_cert(reader_.token, {"list", "--timeout=3s", "--retry-timeout=0"});
  EXPECT_EQ(foreign.code, 3) << Describe(foreign);
}

// Tokens sent with AUTH over the plaintext Redis port, beside a TLS gRPC
// port, are warned about at start-up, unless the port is on loopback.
TEST_F(SecurityE2eTest, TokensOverAPlaintextRedisPortBesideTlsAreWarnedAbout) {
  constexpr std::string_view kWarning =
      "is plaintext (--redis-plaintext): the tokens clients send with AUTH cross the network in "
      "plaintext, while the gRPC port uses TLS";
  StartServer({"--redis-listen=0.0.0.0:0", "--redis-plaintext"});
  std::string warning;
  for (const auto& line : LogLines()) {
    const auto msg = line.find("msg");
    if (msg != line.end() && msg->second.find(kWarning) != std::string::npos) {
      warning = line.at("level");
    }
  }
  EXPECT_EQ(warning, "warning") << server_->process().out();
  server_.reset();
  StartServer({"--redis-listen=127.0.0.1:0", "--redis-plaintext"});
  EXPECT_THAT(server_->process().out(), Not(HasSubstr(kWarning)));
}

TEST_F(SecurityE2eTest, DeniedInsertIsCountedInTheAuthFailureMetric) {
  StartServer();
  ASSERT_GT(server_->admin_port(), 0) << server_->process().out();
  Create("users");
  const std::map<std::string, std::string> denied_insert = {{"method", "Insert"},
                                                            {"reason", "permission_denied"}};
  const double before =
      MetricValue(Scrape(server_->admin_port()), "cuckood_auth_failures_total", denied_insert)
          .value_or(0);
  EXPECT_EQ(before, 0);
  Result denied = Ctl(reader_.token, {"insert", "users", "alice"});
  ASSERT_EQ(denied.code, 3) << Describe(denied);
  Result anonymous = Ctl("", {"insert", "users", "alice"});
  ASSERT_EQ(anonymous.code, 3) << Describe(anonymous);

  const std::vector<Sample> after = Scrape(server_->admin_port());
  EXPECT_GE(MetricValue(after, "cuckood_auth_failures_total", denied_insert).value_or(0), 1);
  // The call without a token counts under its own reason, on whichever call
  // cuckooctl made first.
  double missing = 0;
  for (const Sample& s : after) {
    if (s.name == "cuckood_auth_failures_total" && s.labels.count("reason") &&
        s.labels.at("reason") == "missing_credentials") {
      missing += s.value;
    }
  }
  EXPECT_GE(missing, 1);
}

// The Python package against the same kind of server: see
// tests/e2e/python_security_check.py.
TEST_F(SecurityE2eTest, PythonClientSendsItsTokenOverTls) {
  StartServer();
  Result r = RunProcess(
      {"/usr/bin/env", std::string("PYTHONPATH=") + PYTHON_PACKAGE_DIR, "PYTHONDONTWRITEBYTECODE=1",
       "/usr/bin/python3", std::string(SOURCE_DIR) + "/tests/e2e/python_security_check.py",
       "--target", server_->address(), "--ca", ca_path_, "--admin-token", admin_.token,
       "--write-token", writer_.token, "--read-token", reader_.token});
  EXPECT_EQ(r.code, 0) << Describe(r);
  for (const char* check : {"ok create_insert_lookup", "ok wrong_token", "ok no_token",
                            "ok read_token_cannot_insert", "ok plaintext_refused"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << Describe(r);
  }
  EXPECT_THAT(r.out, HasSubstr("5 checks passed")) << Describe(r);
}

}  // namespace
}  // namespace cuckoo::testing
