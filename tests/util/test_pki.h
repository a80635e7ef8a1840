// A throwaway public key infrastructure for the TLS and mutual-TLS tests: a
// certificate authority, certificates it signs (server, client or both; with
// any subject alternative names; valid, expired or not yet valid), and the
// file writes a certificate rotation is made of. Keys are EC P-256, made
// fresh in memory by OpenSSL's libcrypto: no fixtures on disk that expire
// some day, nothing shared between tests.
//
// Test code: any OpenSSL failure aborts with OpenSSL's message, since a test
// cannot go on without its certificates anyway.
#ifndef CUCKOO_TESTS_UTIL_TEST_PKI_H_
#define CUCKOO_TESTS_UTIL_TEST_PKI_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"

namespace cuckoo::testing {

// A certificate and its private key, PEM encoded (the key as unencrypted
// PKCS#8, "BEGIN PRIVATE KEY"): what gRPC's TLS options and the files
// --tls-cert / --tls-key take.
struct Pem {
  std::string cert;
  std::string key;
};

// A self-signed CA certificate (basicConstraints CA:TRUE, keyUsage
// keyCertSign/cRLSign), valid from an hour ago for ten years.
Pem MakeCa(std::string_view common_name);

struct CertSpec {
  std::string common_name;
  std::vector<std::string> dns_sans;  // "localhost"
  std::vector<std::string> ip_sans;   // "127.0.0.1", "::1"
  std::vector<std::string> uri_sans;  // "spiffe://acme/batch"
  std::string organization;           // subject O=, left out when empty
  // Validity, relative to now. An hour back by default so that a clock a
  // little behind (another process, another container) still accepts it.
  // Expired: not_before = -48h, not_after = -24h.
  absl::Duration not_before = -absl::Hours(1);
  absl::Duration not_after = absl::Hours(24);
  // extendedKeyUsage: clientAuth and/or serverAuth (both for a cluster peer,
  // which serves and also copies from its peers).
  bool client = false;
  bool server = true;
};

// A leaf certificate for a fresh key, signed by `ca` (a MakeCa result).
Pem IssueCert(const Pem& ca, const CertSpec& spec);

// Replaces the file at `path` with `pem` atomically: writes a temporary file
// in the same directory, then renames it over `path`, so a reader (the
// server's certificate watcher) sees the old contents or the new, never half
// a file. Note that writing a certificate and then its key is two steps: a
// reader may see the new certificate with the old key in between (see
// WriteSecretVolume for a switch of both at once).
void WritePem(const std::string& path, std::string_view pem);

// Writes `files` (name -> contents) the way the kubelet updates a mounted
// Secret volume: into a fresh hidden directory `dir/..<n>`, then swaps the
// symlink `dir/..data` to it with one rename; `dir/<name>` are symlinks to
// `..data/<name>`. All files change at the same instant, as a rotated
// certificate and key do in Kubernetes. Later calls with the same `dir` and
// names rotate; the previous hidden directory is removed.
void WriteSecretVolume(const std::string& dir, const std::map<std::string, std::string>& files);

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_TEST_PKI_H_
