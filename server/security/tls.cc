#include "server/security/tls.h"

#include <fcntl.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

absl::StatusOr<std::string> ReadPem(std::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: cannot open: %s", flag, path, text.status().message()));
  }
  return text;
}

// OpenSSL's last error, as text, or "no PEM data".
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data found";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

// An encrypted key is refused, never prompted for: OpenSSL's default asks
// on the terminal, which would hang a server (or its watcher thread).
int NoPassphrase(char*, int, int, void*) { return 0; }

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

std::vector<X509Ptr> ReadCertificates(const std::string& pem) {
  std::vector<X509Ptr> out;
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x);
  ERR_clear_error();  // The end of the data reads as an error.
  return out;
}

absl::Time ToTime(const ASN1_TIME* t) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

std::string Subject(X509* x) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(x), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// The TLS files as read and checked: what gRPC is given.
struct TlsFiles {
  CertificateSummary summary;
  std::string pair;       // The key, then the certificate chain (PEM).
  std::string client_ca;  // Empty without mutual TLS.
};

absl::StatusOr<TlsFiles> ReadTlsFiles(const TlsOptions& tls) {
  absl::StatusOr<std::string> cert = ReadPem("tls-cert", tls.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("tls-key", tls.key);
  if (!key.ok()) return key.status();
  std::vector<X509Ptr> chain = ReadCertificates(*cert);
  if (chain.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls-cert=%s holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")", tls.cert));
  }
  BioPtr key_bio(BIO_new_mem_buf(key->data(), static_cast<int>(key->size())));
  PkeyPtr pkey(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (pkey == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls-key=%s holds no unencrypted PEM private key: %s", tls.key, OpenSslError()));
  }
  if (X509_check_private_key(chain.front().get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls-key=%s is not the private key of the certificate in --tls-cert=%s",
                        tls.key, tls.cert));
  }
  TlsFiles files;
  if (!tls.client_ca.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("tls-client-ca", tls.client_ca);
    if (!ca.ok()) return ca.status();
    if (ReadCertificates(*ca).empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--tls-client-ca=%s holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")",
          tls.client_ca));
    }
    files.client_ca = *std::move(ca);
  }
  files.summary.subject = Subject(chain.front().get());
  files.summary.not_before = ToTime(X509_get0_notBefore(chain.front().get()));
  files.summary.not_after = ToTime(X509_get0_notAfter(chain.front().get()));
  files.summary.chain_length = static_cast<int>(chain.size());
  files.pair = absl::StrCat(*key, "\n", *cert);
  return files;
}

// An in-memory file holding `contents`, or -1 (errno set).
int MemoryFile(const std::string& contents) {
  const int fd = memfd_create("cuckood-tls", MFD_CLOEXEC);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

}  // namespace

absl::StatusOr<CertificateSummary> CheckTlsFiles(const TlsOptions& tls) {
  absl::StatusOr<TlsFiles> files = ReadTlsFiles(tls);
  if (!files.ok()) return files.status();
  return files->summary;
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsOptions& tls,
                                                              const CertificateWatcher* served) {
  if (tls.cert.empty() || served == nullptr) return grpc::InsecureServerCredentials();
  const unsigned interval =
      static_cast<unsigned>(std::max<int64_t>(1, absl::ToInt64Seconds(tls.reload_interval)));
  // gRPC reads the watcher's checked copies, never the configured files:
  // gRPC 1.51 would take a key that does not match its certificate (or a
  // CA file that is not PEM) and then fail every new handshake.
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (tls.client_ca.empty()) {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        served->pair_path(), served->pair_path(), interval);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        served->pair_path(), served->pair_path(), served->client_ca_path(), interval);
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (tls.client_ca.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const TlsOptions& tls) {
  if (tls.cert.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  const std::string& ca = !tls.peer_ca.empty() ? tls.peer_ca : tls.client_ca;
  if (!ca.empty()) {
    absl::StatusOr<std::string> roots =
        ReadPem(!tls.peer_ca.empty() ? "peer-ca" : "tls-client-ca", ca);
    if (!roots.ok()) return roots.status();
    options.pem_root_certs = *std::move(roots);
  }
  absl::StatusOr<std::string> cert = ReadPem("tls-cert", tls.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("tls-key", tls.key);
  if (!key.ok()) return key.status();
  options.pem_cert_chain = *std::move(cert);
  options.pem_private_key = *std::move(key);
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::unique_ptr<CertificateWatcher>> CertificateWatcher::Start(
    const TlsOptions& tls) {
  absl::StatusOr<TlsFiles> files = ReadTlsFiles(tls);
  if (!files.ok()) return files.status();
  std::unique_ptr<CertificateWatcher> w(new CertificateWatcher(tls, files->summary));
  w->pair_fd_ = MemoryFile(files->pair);
  if (w->pair_fd_ >= 0 && !tls.client_ca.empty()) {
    w->client_ca_fd_ = MemoryFile(files->client_ca);
  }
  if (w->pair_fd_ < 0 || (!tls.client_ca.empty() && w->client_ca_fd_ < 0)) {
    return absl::InternalError(absl::StrFormat(
        "cannot make an in-memory copy of the TLS files: memfd_create: %s", std::strerror(errno)));
  }
  w->pair_ = std::move(files->pair);
  w->client_ca_ = std::move(files->client_ca);
  w->thread_ = std::thread([p = w.get()] { p->Watch(); });
  return w;
}

CertificateWatcher::CertificateWatcher(const TlsOptions& tls, const CertificateSummary& initial)
    : options_(tls), initial_(initial), subject_(initial.subject) {
  not_after_.store(absl::ToDoubleSeconds(initial.not_after - absl::UnixEpoch()));
}

std::string CertificateWatcher::pair_path() const {
  return absl::StrCat("/proc/self/fd/", pair_fd_);
}

std::string CertificateWatcher::client_ca_path() const {
  return absl::StrCat("/proc/self/fd/", client_ca_fd_);
}

bool CertificateWatcher::Replace(int fd, const std::string& contents) {
  const int fresh = MemoryFile(contents);
  if (fresh < 0) return false;
  // One step: a reader of /proc/self/fd/<fd> opens the old copy or the new.
  const bool ok = ::dup3(fresh, fd, O_CLOEXEC) >= 0;
  ::close(fresh);
  return ok;
}

CertificateWatcher::~CertificateWatcher() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (pair_fd_ >= 0) ::close(pair_fd_);
  if (client_ca_fd_ >= 0) ::close(client_ca_fd_);
}

void CertificateWatcher::Watch() {
  MutexLock lock(&mu_);
  absl::Time last_warning = absl::InfinitePast();
  double last_not_after = not_after_.load();
  while (!stopping_) {
    mu_.WaitFor(&cv_, absl::ToChronoNanoseconds(options_.reload_interval));
    if (stopping_) break;
    absl::StatusOr<TlsFiles> files = ReadTlsFiles(options_);
    if (files.ok() && (files->pair != pair_ || files->client_ca != client_ca_)) {
      // Checked: gRPC may take them (at its next --tls-reload-interval).
      if (Replace(pair_fd_, files->pair) &&
          (client_ca_fd_ < 0 || Replace(client_ca_fd_, files->client_ca))) {
        pair_ = files->pair;
        client_ca_ = files->client_ca;
        generation_.fetch_add(1, std::memory_order_release);
      } else {
        files = absl::InternalError(absl::StrFormat(
            "cannot update the in-memory copy of the TLS files: %s", std::strerror(errno)));
      }
    }
    absl::StatusOr<CertificateSummary> now =
        files.ok() ? absl::StatusOr<CertificateSummary>(files->summary) : files.status();
    if (!now.ok()) {
      // Mid-rotation (key and certificate not yet both replaced) or broken:
      // gRPC keeps serving the last good pair.
      if (absl::Now() - last_warning > absl::Minutes(5)) {
        spdlog::warn("TLS files not usable, the last good certificate is still served: {}",
                     std::string(now.status().message()));
        last_warning = absl::Now();
      }
      continue;
    }
    const double not_after = absl::ToDoubleSeconds(now->not_after - absl::UnixEpoch());
    not_after_.store(not_after, std::memory_order_relaxed);
    if (not_after != last_not_after || now->subject != subject_) {
      spdlog::info("TLS certificate changed: now {} valid until {}; new connections use it",
                   now->subject, absl::FormatTime(now->not_after, absl::UTCTimeZone()));
      subject_ = now->subject;
      last_not_after = not_after;
    }
    if (now->not_after - absl::Now() < absl::Hours(24 * 7) &&
        absl::Now() - last_warning > absl::Hours(1)) {
      spdlog::warn("the TLS certificate {} {} {}", now->subject,
                   now->not_after < absl::Now() ? "expired" : "expires",
                   absl::FormatTime(now->not_after, absl::UTCTimeZone()));
      last_warning = absl::Now();
    }
  }
}

absl::Status ValidateTlsOptions(const TlsOptions& tls) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(tls.cert.empty()
                                          ? "--tls-key is set without --tls-cert: TLS needs both"
                                          : "--tls-cert is set without --tls-key: TLS needs both");
  }
  if (tls.cert.empty()) {
    if (!tls.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca (mutual TLS) needs TLS: set --tls-cert and --tls-key too");
    }
    if (!tls.peer_ca.empty()) {
      return absl::InvalidArgumentError(
          "--peer-ca is used only with TLS: set --tls-cert and --tls-key too");
    }
  }
  if (tls.reload_interval < absl::Seconds(1) || tls.reload_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls-reload-interval=%s must be between 1s and 24h",
                        absl::FormatDuration(tls.reload_interval)));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
