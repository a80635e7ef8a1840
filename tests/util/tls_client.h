// A blocking TLS client of OpenSSL's for tests of cuckood's TLS ports (the
// Redis port's, tests/e2e/redis_tls_test.cc and
// tests/server/resp/resp_tls_test.cc): one connection to 127.0.0.1:port,
// checked against a CA file, optionally with a client certificate, sending
// raw bytes and reading reply lines. Test code: failures show as ok() false
// with OpenSSL's reason in error().
#ifndef CUCKOO_TESTS_UTIL_TLS_CLIENT_H_
#define CUCKOO_TESTS_UTIL_TLS_CLIENT_H_

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace cuckoo::testing {

// One TLS connection to 127.0.0.1:port, made with OpenSSL directly.
class TlsConn {
 public:
  // `ca`: the CA file to check the server with; `cert`/`key`: a client
  // certificate (mutual TLS), or empty.
  TlsConn(int port, const std::string& ca, const std::string& cert = "",
          const std::string& key = "") {
    ctx_ = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(ctx_, ca.c_str(), nullptr);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (!cert.empty()) {
      SSL_CTX_use_certificate_chain_file(ctx_, cert.c_str());
      SSL_CTX_use_PrivateKey_file(ctx_, key.c_str(), SSL_FILETYPE_PEM);
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{.tv_sec = 10, .tv_usec = 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    SSL_set_tlsext_host_name(ssl_, "localhost");
    SSL_set1_host(ssl_, "localhost");
    if (SSL_connect(ssl_) == 1) {
      ok_ = true;
    } else {
      error_ = ERR_error_string(ERR_get_error(), nullptr);
    }
  }
  ~TlsConn() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) ::close(fd_);
    SSL_CTX_free(ctx_);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  // The server certificate's subject common name.
  std::string PeerCommonName() const {
    X509* peer = SSL_get1_peer_certificate(ssl_);
    if (peer == nullptr) return "";
    char cn[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof cn);
    X509_free(peer);
    return cn;
  }
  // Sends `raw` (RESP); false on an error.
  bool Send(const std::string& raw) {
    return ok_ && SSL_write(ssl_, raw.data(), static_cast<int>(raw.size())) > 0;
  }
  // The next reply line without its CRLF ("+PONG"), or "" on an error or
  // the server closing.
  std::string ReadLine() {
    std::string line;
    char c;
    while (ok_ && SSL_read(ssl_, &c, 1) == 1) {
      if (c == '\n') return line;
      if (c != '\r') line.push_back(c);
    }
    return "";
  }
  // Reads exactly n bytes (a bulk reply's body); "" on an error.
  std::string ReadBytes(size_t n) {
    std::string out(n, '\0');
    size_t got = 0;
    while (ok_ && got < n) {
      const int r = SSL_read(ssl_, out.data() + got, static_cast<int>(n - got));
      if (r <= 0) return "";
      got += static_cast<size_t>(r);
    }
    return out;
  }
  // Send, then the first reply line.
  std::string Call(const std::string& raw) { return Send(raw) ? ReadLine() : ""; }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool ok_ = false;
  std::string error_;
};

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_TLS_CLIENT_H_
