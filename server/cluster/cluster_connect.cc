// The connection to NATS: its options (the servers, reconnecting, TLS and
// credentials), set up when the replica is created so that a bad file
// stops the start, and why the connection is down when it is.
//
// What nats.c does with them (3.4, checked in its source): the CA and the
// client certificate are loaded into its TLS context once, here; the
// password and the token are copied once, here; a .creds file is read
// again at every connect (its JWT for the CONNECT, its seed to sign the
// server's nonce), so a replaced file is used from the next reconnect on.
// The servers' certificates are checked against the CA (and the system's
// roots, which nats.c always loads), and their names against the host of
// the URL connected to: nats.c's default build (Debian's too) forces host
// name verification (NATS_BUILD_TLS_FORCE_HOST_VERIFY), which
// nats_security_test holds it to.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/file.h"
#include "server/cluster/cluster_internal.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

void LogConnected(natsConnection* nc) {
  char url[256] = {0};
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  spdlog::info("cluster: connected to NATS at {}", NatsUrlWithoutUserInfo(url));
}

namespace {

// nats.c's text of its last error on this thread, without the place in its
// source that leads it ("(conn.c:733): SSL handshake error: ...").
std::string LastNatsErrorText() {
  const char* last = nats_GetLastError(nullptr);
  std::string text = last == nullptr ? "" : last;
  if (!text.empty() && text[0] == '(') {
    if (const size_t end = text.find("): "); end != std::string::npos) text.erase(0, end + 3);
  }
  return text;
}

// The largest file of these options read: a CA bundle (the system's is
// about 200 KiB), a certificate chain, a .creds file, a secret.
constexpr size_t kMaxFileBytes = 16 << 20;

// The file `path` of `flag`, read; INVALID_ARGUMENT naming both if it
// cannot be read or holds nothing but whitespace. The message never holds
// the contents.
absl::StatusOr<std::string> ReadNamedFile(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path, kMaxFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s=%s: cannot read it: %s", flag, path, text.status().message()));
  }
  if (absl::StripAsciiWhitespace(*text).empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s=%s is empty", flag, path));
  }
  return text;
}

// A secret (password, token): the file's contents without surrounding
// whitespace (the newline an editor or `echo` adds).
absl::StatusOr<std::string> ReadSecretFile(const char* flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadNamedFile(flag, path);
  if (!text.ok()) return text.status();
  std::string secret(absl::StripAsciiWhitespace(*text));
  std::fill(text->begin(), text->end(), '\0');
  if (secret.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s=%s holds more than one line: the file must hold the secret alone", flag, path));
  }
  return secret;
}

// A .creds file as nsc writes it: a user JWT and the user's NKey seed, each
// between "-----BEGIN ...-----" and "------END ...------" lines.
absl::Status CheckCredsFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadNamedFile("--nats-creds", path);
  if (!text.ok()) return text.status();
  bool jwt = false, seed = false;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    jwt |= absl::StartsWith(line, "eyJ") && line.find('.') != absl::string_view::npos;
    seed |= absl::StartsWith(line, "SU") && line.size() > 50;
  }
  std::fill(text->begin(), text->end(), '\0');
  if (!jwt || !seed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--nats-creds=%s is not a NATS credentials file: it must hold a user JWT and the user's "
        "NKey seed (SU...), as `nsc generate creds` writes them (it lacks the %s)",
        path, !jwt ? "JWT" : "seed"));
  }
  return absl::OkStatus();
}

// A nats.c call on a file that failed: the flag, the file and nats.c's
// reason (OpenSSL's for a PEM it cannot load).
absl::Status NatsFileError(const char* flag, const std::string& path, natsStatus s) {
  return absl::InvalidArgumentError(absl::StrFormat("%s=%s: %s", flag, path, NatsError(s)));
}

}  // namespace

absl::Status Cluster::ConfigureConnection() {
  const NatsSecurity& sec = options_.nats_security;
  natsOptions* opts = nullptr;
  if (natsStatus s = natsOptions_Create(&opts); s != NATS_OK) {
    return absl::InternalError(absl::StrCat("cannot create the NATS options: ", NatsError(s)));
  }
  impl_->opts = opts;  // Stop (or the destructor) destroys it.
  std::vector<const char*> urls;
  for (const std::string& u : options_.nats_urls) urls.push_back(u.c_str());
  if (natsStatus s = natsOptions_SetServers(opts, urls.data(), static_cast<int>(urls.size()));
      s != NATS_OK) {
    std::vector<std::string> shown;
    for (const std::string& u : options_.nats_urls) shown.push_back(NatsUrlWithoutUserInfo(u));
    return absl::InvalidArgumentError(absl::StrFormat("--nats=%s: nats.c refuses these URLs: %s",
                                                      absl::StrJoin(shown, ","), NatsError(s)));
  }
  natsOptions_SetName(opts, absl::StrCat("cuckood ", options_.replica_id).c_str());
  natsOptions_SetMaxReconnect(opts, -1);
  natsOptions_SetReconnectWait(opts, 250);
  natsOptions_SetTimeout(opts, 2000);
  natsOptions_SetPingInterval(opts, 2000);
  natsOptions_SetMaxPingsOut(opts, 2);

  std::vector<std::string> said;  // For the log: what is on, never a secret.
  if (NatsTlsOn(options_)) {
    // Secure: a server that offers no TLS is refused
    // (NATS_SECURE_CONNECTION_WANTED), never used in plaintext.
    if (natsStatus s = natsOptions_SetSecure(opts, true); s != NATS_OK) {
      return absl::InternalError(absl::StrCat("cannot turn on TLS for NATS: ", NatsError(s)));
    }
    if (!sec.tls_ca.empty()) {
      if (absl::StatusOr<std::string> ca = ReadNamedFile("--nats-tls-ca", sec.tls_ca); !ca.ok()) {
        return ca.status();
      }
      // Beside the system's roots, which nats.c's TLS context loads too
      // (SSL_CTX_set_default_verify_paths; 3.4 has no way to leave them out).
      if (natsStatus s = natsOptions_LoadCATrustedCertificates(opts, sec.tls_ca.c_str());
          s != NATS_OK) {
        return NatsFileError("--nats-tls-ca", sec.tls_ca, s);
      }
      said.push_back(absl::StrCat("TLS, servers checked against ", sec.tls_ca));
    } else {
      said.push_back("TLS (tls:// URLs), servers checked against the system's roots");
    }
    if (!sec.tls_cert.empty()) {
      for (const auto& [flag, path] : {std::pair{"--nats-tls-cert", &sec.tls_cert},
                                       std::pair{"--nats-tls-key", &sec.tls_key}}) {
        if (absl::StatusOr<std::string> f = ReadNamedFile(flag, *path); !f.ok()) return f.status();
      }
      if (natsStatus s =
              natsOptions_LoadCertificatesChain(opts, sec.tls_cert.c_str(), sec.tls_key.c_str());
          s != NATS_OK) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--nats-tls-cert=%s, --nats-tls-key=%s: %s", sec.tls_cert, sec.tls_key, NatsError(s)));
      }
      said.push_back(absl::StrCat("client certificate ", sec.tls_cert));
    }
  }
  bool secret_in_plaintext = false;
  if (!sec.creds_file.empty()) {
    if (absl::Status s = CheckCredsFile(sec.creds_file); !s.ok()) return s;
    if (natsStatus s =
            natsOptions_SetUserCredentialsFromFiles(opts, sec.creds_file.c_str(), nullptr);
        s != NATS_OK) {
      return NatsFileError("--nats-creds", sec.creds_file, s);
    }
    said.push_back(absl::StrCat("credentials of ", sec.creds_file, " (read at every connect)"));
  } else if (!sec.user.empty()) {
    absl::StatusOr<std::string> password =
        ReadSecretFile("--nats-password-file", sec.password_file);
    if (!password.ok()) return password.status();
    const natsStatus s = natsOptions_SetUserInfo(opts, sec.user.c_str(), password->c_str());
    std::fill(password->begin(), password->end(), '\0');
    if (s != NATS_OK) {
      return absl::InternalError(absl::StrCat("cannot set the NATS user: ", NatsError(s)));
    }
    said.push_back(absl::StrCat("user ", sec.user, " with the password of ", sec.password_file));
    secret_in_plaintext = !NatsTlsOn(options_);
  } else if (!sec.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecretFile("--nats-token-file", sec.token_file);
    if (!token.ok()) return token.status();
    const natsStatus s = natsOptions_SetToken(opts, token->c_str());
    std::fill(token->begin(), token->end(), '\0');
    if (s != NATS_OK) {
      return absl::InternalError(absl::StrCat("cannot set the NATS token: ", NatsError(s)));
    }
    said.push_back(absl::StrCat("the token of ", sec.token_file));
    secret_in_plaintext = !NatsTlsOn(options_);
  }
  if (!said.empty()) spdlog::info("cluster: NATS connections: {}", absl::StrJoin(said, "; "));
  if (secret_in_plaintext) {
    spdlog::warn(
        "cluster: the NATS {} is sent in plaintext: without TLS (--nats-tls-ca or tls:// URLs) "
        "anyone on the network path to NATS can read and reuse it",
        sec.user.empty() ? "token" : "password");
  }
  return absl::OkStatus();
}

std::string Cluster::DescribeConnectError(int status, const std::string& text) const {
  const NatsSecurity& sec = options_.nats_security;
  const natsStatus s = static_cast<natsStatus>(status);
  const std::string what = text.empty() ? natsStatus_GetText(s) : text;
  switch (s) {
    case NATS_SSL_ERROR:
      if (!NatsTlsOn(options_)) {
        return absl::StrCat(
            "TLS handshake with the NATS server failed (", what,
            "): the server requires TLS, which this replica is not configured for: set "
            "--nats-tls-ca to the CA of the NATS servers' certificates (or write the --nats URLs "
            "as tls://)");
      }
      if (absl::StrContains(what, "hostname mismatch") ||
          absl::StrContains(what, "IP address mismatch")) {
        return absl::StrCat("TLS handshake with the NATS server failed (", what,
                            "): its certificate is not for the host name this replica connected "
                            "to (the host of the --nats URL)");
      }
      return absl::StrCat(
          "TLS handshake with the NATS server failed (", what, "): ",
          sec.tls_ca.empty() ? "is its certificate signed by a CA the system trusts? (set "
                               "--nats-tls-ca to the CA that signed it)"
                             : "is --nats-tls-ca the CA that signed the NATS servers' "
                               "certificates?",
          sec.tls_cert.empty() ? ""
                               : " If the servers verify client certificates, --nats-tls-cert "
                                 "must be signed by a CA they trust.");
    case NATS_SECURE_CONNECTION_WANTED:
      return "TLS is on for NATS (--nats-tls-ca or tls:// URLs), but the NATS server does not "
             "offer TLS: connect to its TLS port, or configure TLS on it";
    case NATS_CONNECTION_AUTH_FAILED: {
      std::string check;
      if (!sec.creds_file.empty()) {
        check = absl::StrCat("check --nats-creds=", sec.creds_file,
                             " (a user of the account the server trusts, not expired)");
      } else if (!sec.user.empty()) {
        check = absl::StrCat("check --nats-user=", sec.user,
                             " and the password in --nats-password-file=", sec.password_file);
      } else if (!sec.token_file.empty()) {
        check = absl::StrCat("check the token in --nats-token-file=", sec.token_file);
      } else {
        check =
            "the server requires credentials and none are configured: set --nats-creds, "
            "--nats-user with --nats-password-file, or --nats-token-file";
      }
      return absl::StrCat("NATS refused this replica's credentials (authorization failed: ", what,
                          "): ", check);
    }
    case NATS_IO_ERROR:
      // With TLS 1.3 a server checks the client's certificate after the
      // client finished its side of the handshake: its refusal shows up as
      // the first write or read failing.
      if (NatsTlsOn(options_) && absl::StrContains(what, "SSL")) {
        return absl::StrCat(
            "the NATS server ended the connection right after the TLS handshake (", what,
            "): it may have refused this replica's client certificate: ",
            sec.tls_cert.empty()
                ? "if the servers verify clients (verify: true), set --nats-tls-cert and "
                  "--nats-tls-key"
                : "--nats-tls-cert must be signed by a CA the servers trust (their ca_file); "
                  "the NATS server's log says why");
      }
      return absl::StrCat(natsStatus_GetText(s), text.empty() ? "" : absl::StrCat(": ", text));
    case NATS_NO_SERVER: {
      std::vector<std::string> shown;
      for (const std::string& u : options_.nats_urls) shown.push_back(NatsUrlWithoutUserInfo(u));
      return absl::StrCat("no NATS server answered at ", absl::StrJoin(shown, ","),
                          " (not running, not listening there, or unreachable)");
    }
    default:
      return absl::StrCat(natsStatus_GetText(s), text.empty() ? "" : absl::StrCat(": ", text));
  }
}

void Cluster::SetNatsError(std::string error) {
  MutexLock lock(&mu_);
  if (error == nats_error_) return;
  if (!error.empty()) spdlog::error("cluster: cannot connect to NATS: {}", error);
  nats_error_ = std::move(error);
}

void Cluster::Connect() {
  while (!stopping_.load()) {
    natsConnection* nc = nullptr;
    // Each server once (nats.c's order), each within the 2 s timeout.
    const natsStatus s = natsConnection_Connect(&nc, impl_->opts);
    if (s == NATS_OK) {
      jsOptions jo;
      jsOptions_Init(&jo);
      jo.Wait = 5000;
      jo.PublishAsync.AckHandler = OnAckTrampoline;
      jo.PublishAsync.AckHandlerClosure = this;
      jo.PublishAsync.MaxPending = 16384;
      jo.PublishAsync.StallWait = 100;
      jsCtx* js = nullptr;
      if (natsStatus j = natsConnection_JetStream(&js, nc, &jo); j != NATS_OK) {
        SetProblem(absl::StrCat("cannot use JetStream: ", NatsError(j)));
      }
      LogConnected(nc);
      SetNatsError("");
      impl_->nc.store(nc);  // Before js: a js seen means an nc.
      impl_->js.store(js);
      return;
    }
    SetNatsError(DescribeConnectError(s, LastNatsErrorText()));
    MutexLock lock(&mu_);
    if (!stopping_.load()) mu_.WaitFor(&stop_cv_, std::chrono::milliseconds(250));
  }
}

void Cluster::WatchConnection() {
  natsConnection* const nc = impl_->nc.load();
  if (nc == nullptr) return;  // The connect thread's.
  const natsConnStatus status = natsConnection_Status(nc);
  if (status == NATS_CONN_STATUS_CONNECTED) {
    SetNatsError("");
    return;
  }
  const char* text = nullptr;
  const natsStatus s = natsConnection_GetLastError(nc, &text);
  // NATS_OK between attempts (nats.c clears the error before each): the
  // last reason stands until the connection succeeds.
  if (s == NATS_OK) return;
  // nats.c's buffer of the reason, which its reconnect thread may write:
  // copied at once, within its size.
  const std::string reason(text == nullptr ? "" : std::string(text, strnlen(text, 256)));
  std::string error = DescribeConnectError(s, reason);
  if (status == NATS_CONN_STATUS_CLOSED) {
    // nats.c gives up on a server that refuses the same credentials twice in
    // a row (and on nothing else, with unlimited reconnects).
    absl::StrAppend(&error,
                    "; the NATS client stopped retrying: restart this replica once this is fixed");
  }
  SetNatsError(std::move(error));
}

}  // namespace cuckoo::server
