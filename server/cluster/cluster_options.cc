#include "server/cluster/cluster_options.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace cuckoo::server {

namespace {

bool IsTlsUrl(const std::string& url) {
  return absl::StartsWith(absl::AsciiStrToLower(url), "tls://");
}

// A URL holding credentials: scheme://user[:password]@host...
bool HasUserInfo(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  return url.find('@', start) != std::string::npos;
}

absl::Status ValidateNatsSecurity(const ClusterOptions& o) {
  const NatsSecurity& n = o.nats_security;
  const std::pair<const char*, const std::string*> flags[] = {
      {"--nats-tls-ca", &n.tls_ca},
      {"--nats-tls-cert", &n.tls_cert},
      {"--nats-tls-key", &n.tls_key},
      {"--nats-creds", &n.creds_file},
      {"--nats-user", &n.user},
      {"--nats-password-file", &n.password_file},
      {"--nats-token-file", &n.token_file},
  };
  std::vector<std::string> set;
  for (const auto& [flag, value] : flags) {
    if (!value->empty()) set.push_back(flag);
  }
  if (o.nats_urls.empty()) {
    if (set.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: set for the connections to NATS, but there are none without --nats (cluster mode)",
        absl::StrJoin(set, ", ")));
  }
  size_t tls_urls = 0;
  for (const std::string& url : o.nats_urls) tls_urls += IsTlsUrl(url) ? 1 : 0;
  if (tls_urls != 0 && tls_urls != o.nats_urls.size()) {
    return absl::InvalidArgumentError(
        "--nats mixes tls:// URLs with others: TLS is on for every connection to NATS or for "
        "none; write every URL as tls://, or every one as nats:// with --nats-tls-ca");
  }
  if (n.tls_cert.empty() != n.tls_key.empty()) {
    return absl::InvalidArgumentError(
        n.tls_cert.empty()
            ? "--nats-tls-key is set without --nats-tls-cert: a client certificate needs both"
            : "--nats-tls-cert is set without --nats-tls-key: a client certificate needs both");
  }
  if (!n.tls_cert.empty() && !NatsTlsOn(o)) {
    return absl::InvalidArgumentError(
        "--nats-tls-cert (mutual TLS) needs TLS to NATS: set --nats-tls-ca (the CA of the NATS "
        "servers' certificates), or write the --nats URLs as tls://");
  }
  if (n.user.empty() != n.password_file.empty()) {
    return absl::InvalidArgumentError(
        n.user.empty()
            ? "--nats-password-file is set without --nats-user: the password is that user's"
            : "--nats-user is set without --nats-password-file: give the file holding its "
              "password");
  }
  std::vector<std::string> kinds;
  if (!n.creds_file.empty()) kinds.push_back("--nats-creds");
  if (!n.user.empty()) kinds.push_back("--nats-user/--nats-password-file");
  if (!n.token_file.empty()) kinds.push_back("--nats-token-file");
  if (kinds.size() > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s are mutually exclusive: give one kind of NATS credentials (a .creds file; a user "
        "and its password file; or a token file)",
        absl::StrJoin(kinds, " and ")));
  }
  if (!kinds.empty()) {
    for (size_t i = 0; i < o.nats_urls.size(); ++i) {
      // The URL itself is not shown: it holds a secret.
      if (HasUserInfo(o.nats_urls[i])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--nats: URL %u of %u holds credentials (user@host), and %s gives them too: give "
            "them one way (the flags keep secrets off the command line)",
            i + 1, o.nats_urls.size(), kinds[0]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string NatsUrlWithoutUserInfo(const std::string& url) {
  std::string shown = url;
  const size_t scheme = shown.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  // The last '@': a password may hold '@', '/' or '?' (a NATS URL has no
  // path that could).
  const size_t at = shown.rfind('@');
  if (at != std::string::npos && at >= start) shown.erase(start, at + 1 - start);
  return shown;
}

bool NatsTlsOn(const ClusterOptions& options) {
  if (!options.nats_security.tls_ca.empty()) return true;
  for (const std::string& url : options.nats_urls) {
    if (IsTlsUrl(url)) return true;
  }
  return false;
}

absl::Status ValidateClusterOptions(const ClusterOptions& o) {
  for (const std::string& url : o.nats_urls) {
    if (url.empty() || url.find("://") == std::string::npos || url.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--nats: \"%s\" is not a NATS URL; expected nats://host:port[,nats://host:port...]",
          url));
    }
  }
  if (o.stream_replicas > 5) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--nats-replicas=%u: JetStream replicates a stream to 1 to 5 servers (0: automatic)",
        o.stream_replicas));
  }
  if (o.dedup_window < absl::Seconds(1) || o.dedup_window > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dedup-window=%s must be between 1s and 24h", absl::FormatDuration(o.dedup_window)));
  }
  if (o.replica_expiry < absl::Seconds(2) || o.replica_expiry > absl::Hours(24 * 30)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--replica-expiry=%s must be between 2s and 720h", absl::FormatDuration(o.replica_expiry)));
  }
  if (o.write_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--cluster-write-timeout=%s must be at least 100ms",
                        absl::FormatDuration(o.write_timeout)));
  }
  return ValidateNatsSecurity(o);
}

}  // namespace cuckoo::server
