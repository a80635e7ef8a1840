// TLS for cuckood's gRPC port (--tls-cert, --tls-key, --tls-client-ca).
//
// The credentials are gRPC's TlsServerCredentials over a
// FileWatcherCertificateProvider: gRPC re-reads the files every
// --tls-reload-interval and new connections get the new certificate
// (Kubernetes updates a mounted Secret in place); connections already open
// keep theirs. gRPC reads in-memory copies that CertificateWatcher makes of
// the files once they pass the checks below, so a pair that does not match (a
// key replaced before its certificate, a wrong key) is never taken: the last
// good one stays in use.
//
// CheckTlsFiles reads the files at start-up with OpenSSL, so that a missing
// file, a key that does not belong to its certificate or a CA file with no
// certificate stops the server with a message naming the file, instead of
// every handshake failing later. CertificateWatcher logs each change of the
// served certificate (subject, expiry) and warns when it has expired or
// expires within 7 days.
#ifndef CUCKOO_SERVER_SECURITY_TLS_H_
#define CUCKOO_SERVER_SECURITY_TLS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"

namespace cuckoo::server {

// The TLS settings (--tls-cert, --tls-key, --tls-client-ca,
// --tls-reload-interval, --peer-ca); error messages name those flags.
struct TlsOptions {
  std::string cert;       // PEM certificate chain; empty: no TLS.
  std::string key;        // PEM private key of `cert`.
  std::string client_ca;  // PEM CA for client certificates: mutual TLS.
  std::string peer_ca;    // Cluster mode: the CA peers are checked against.
  absl::Duration reload_interval = absl::Seconds(10);
};

// INVALID_ARGUMENT when only one of cert and key is set, client_ca or
// peer_ca is set without them, or reload_interval is outside 1s to 24h; the
// message names the flags.
absl::Status ValidateTlsOptions(const TlsOptions& tls);

// What CheckTlsFiles found in the certificate file (its first certificate).
struct CertificateSummary {
  std::string subject;    // RFC 2253, e.g. "CN=cuckood,O=Acme"
  absl::Time not_before;  // validity
  absl::Time not_after;
  int chain_length = 0;  // certificates in the file
};

// INVALID_ARGUMENT naming the flag and file when the certificate, the key or
// the client CA cannot be read or parsed, or the key is not the
// certificate's.
absl::StatusOr<CertificateSummary> CheckTlsFiles(const TlsOptions& tls);

// Cluster mode: how a replica connects to a peer to copy its filters. With
// --tls-cert: TLS, checking the peer against --peer-ca (default
// --tls-client-ca, else the system's roots) and presenting --tls-cert as
// the client certificate; else insecure.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const TlsOptions& tls);

// Watches the TLS files: re-reads them every --tls-reload-interval, and when
// they changed and pass CheckTlsFiles's checks, puts them in the in-memory
// copies gRPC reads (pair_path(), client_ca_path()); files that do not pass
// (a key replaced before its certificate, a wrong key, a broken CA file) are
// not given to gRPC, which goes on serving the last good ones. Logs each
// change of the served certificate (subject, expiry) and warns when it has
// expired or expires within 7 days.
class CertificateWatcher {
 public:
  // INVALID_ARGUMENT as CheckTlsFiles; INTERNAL if the copies cannot be made.
  static absl::StatusOr<std::unique_ptr<CertificateWatcher>> Start(const TlsOptions& tls);
  ~CertificateWatcher();
  // What the files held at Start.
  const CertificateSummary& initial() const { return initial_; }
  // The served certificate's expiry as last read (Unix seconds), for
  // /metrics.
  double not_after_seconds() const { return not_after_.load(std::memory_order_relaxed); }
  // The checked copies: the key then the certificate chain, and the client
  // CA (mutual TLS only), as paths gRPC can read ("/proc/self/fd/N", each
  // an in-memory file replaced in one step).
  std::string pair_path() const;
  std::string client_ca_path() const;
  // How many times the copies were replaced since Start: a reader of them
  // (the Redis port's TLS context) makes a new context when it changes.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

 private:
  CertificateWatcher(const TlsOptions& tls, const CertificateSummary& initial);
  void Watch();
  // Points `fd` at a new in-memory file holding `contents` (errno on false).
  static bool Replace(int fd, const std::string& contents);

  const TlsOptions options_;
  const CertificateSummary initial_;
  std::atomic<double> not_after_{0};
  std::atomic<uint64_t> generation_{0};
  std::string subject_;
  int pair_fd_ = -1;
  int client_ca_fd_ = -1;
  // What the copies hold (the watcher thread's).
  std::string pair_;
  std::string client_ca_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The gRPC port's credentials: TLS (mutual with --tls-client-ca) from
// `served`'s checked copies when --tls-cert is set, else insecure.
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsOptions& tls,
                                                              const CertificateWatcher* served);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SECURITY_TLS_H_
