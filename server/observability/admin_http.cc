#include "server/observability/admin_http.h"

#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "boost/beast/core/error.hpp"
#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/core/tcp_stream.hpp"
#include "boost/beast/http/error.hpp"
#include "boost/beast/http/read.hpp"
#include "boost/beast/http/string_body.hpp"
#include "boost/beast/http/write.hpp"
#include "boost/beast/ssl.hpp"
#include "cuckoo_version.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

namespace {

constexpr size_t kMaxHeaderBytes = 8 << 10;
constexpr size_t kMaxBodyBytes = 4 << 10;
// How long a connection may take to send a request (or sit idle before it),
// and to take a response. Probes and scrapes send their request at once.
constexpr std::chrono::seconds kTimeout(10);
constexpr std::chrono::seconds kLingerTime(2);

const std::string kServerHeader = absl::StrCat("cuckood/", kVersion);

using SslStream = beast::ssl_stream<beast::tcp_stream>;

// The certificate or key file of --`flag`.
absl::StatusOr<std::string> ReadFile(const std::string& path, std::string_view flag) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot read --%s=%s: %s", flag, path, text.status().message()));
  }
  return text;
}

// A TLS server context with the certificate chain and key in these files
// (read once each, so a rotation between two reads cannot mix them up),
// TLS 1.2 and later.
absl::StatusOr<std::shared_ptr<asio::ssl::context>> LoadTlsContext(const std::string& cert_file,
                                                                   const std::string& key_file) {
  absl::StatusOr<std::string> cert = ReadFile(cert_file, "tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(key_file, "tls-key");
  if (!key.ok()) return key.status();
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  beast::error_code ec;
  context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                           asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                           asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use,
                       ec);
  if (ec) return absl::InternalError(absl::StrCat("TLS options: ", ec.message()));
  // An encrypted key is refused, never prompted for (OpenSSL's default
  // callback reads the terminal and would block the admin thread).
  SSL_CTX_set_default_passwd_cb(context->native_handle(),
                                [](char*, int, int, void*) -> int { return 0; });
  if (context->use_certificate_chain(asio::buffer(*cert), ec); ec) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls-cert=%s: no certificate in it: %s", cert_file, ec.message()));
  }
  if (context->use_private_key(asio::buffer(*key), asio::ssl::context::pem, ec); ec) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls-key=%s: not a private key, or not the one of --tls-cert=%s: %s",
                        key_file, cert_file, ec.message()));
  }
  if (SSL_CTX_check_private_key(context->native_handle()) != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--tls-key=%s is not the private key of --tls-cert=%s", key_file, cert_file));
  }
  return context;
}

// The status a request that failed to parse gets.
http::status ParseErrorStatus(const beast::error_code& ec) {
  if (ec == http::error::body_limit) return http::status::payload_too_large;
  if (ec == http::error::header_limit) return http::status::request_header_fields_too_large;
  return http::status::bad_request;
}

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == beast::error_code(http::error::bad_target).category();
}

}  // namespace

// One connection: (TLS: handshake, then) read a request, answer it, repeat
// while keep-alive. Lives on the server's thread; registered with the server
// (Sessions) for the connection limits. Session is what the limits see;
// StreamSession<beast::tcp_stream or SslStream> does the I/O.
class AdminHttpServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Sessions* sessions, std::string peer) : sessions_(sessions), peer_(std::move(peer)) {}
  virtual ~Session() { sessions_->Remove(this, peer_); }

  const std::string& peer() const { return peer_; }

  // Closes a connection waiting for a request (or for its TLS handshake),
  // to make room for a new one: at once, without the linger of Close() (it
  // has sent nothing to be answered), so its descriptor goes with it and a
  // peer opening connections fast cannot keep more than its limit open.
  virtual void Evict() = 0;

 protected:
  Sessions* const sessions_;
  const std::string peer_;
};

template <class Stream>
class AdminHttpServer::StreamSession final : public AdminHttpServer::Session {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, SslStream>;

  // Plain.
  StreamSession(tcp::socket socket, const AdminHandlers* handlers, Sessions* sessions,
                std::string peer) requires(!kTls)
      : Session(sessions, std::move(peer)), stream_(std::move(socket)), handlers_(handlers) {}
  // TLS, with the context in use when the connection was accepted: kept
  // alive by the connection, whatever rotations come later.
  StreamSession(tcp::socket socket, std::shared_ptr<asio::ssl::context> context,
                const AdminHandlers* handlers, Sessions* sessions, std::string peer) requires kTls
      : Session(sessions, std::move(peer)),
        context_(std::move(context)),
        stream_(std::move(socket), *context_),
        handlers_(handlers) {}

  void Start() {
    if constexpr (kTls) {
      // A client that connects and never completes the handshake is treated
      // like one that never sends a request: timed out, and evictable.
      transport().expires_after(kTimeout);
      sessions_->Waiting(shared_from_this());
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = Self()](beast::error_code ec) { self->OnHandshake(ec); });
    } else {
      Read();
    }
  }

  void Evict() override {
    evicted_ = true;
    beast::error_code ignored;
    transport().socket().close(ignored);
  }

 private:
  std::shared_ptr<StreamSession> Self() {
    return std::static_pointer_cast<StreamSession>(shared_from_this());
  }
  beast::tcp_stream& transport() { return beast::get_lowest_layer(stream_); }

  void OnHandshake(beast::error_code ec) {
    sessions_->NotWaiting(this);
    if (evicted_) return;
    if (ec) {
      // Not TLS (e.g. plain HTTP), a certificate the client refused, or
      // too slow: nothing to answer.
      transport().close();
      return;
    }
    handshake_done_ = true;
    Read();
  }

  void Read() {
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(kMaxBodyBytes);
    transport().expires_after(kTimeout);
    sessions_->Waiting(shared_from_this());
    http::async_read(stream_, buffer_, *parser_,
                     [self = Self()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    sessions_->NotWaiting(this);
    if (evicted_) return;
    if (ec) {
      // end_of_stream: the client closed between requests; timeout: it was
      // idle or too slow; anything else but a parse error: the socket (or
      // the TLS session) failed.
      if (!IsParseError(ec) || ec == http::error::end_of_stream) return CloseAfterError();
      const http::status status = ParseErrorStatus(ec);
      Respond(status, 11, /*keep_alive=*/false, /*head=*/false,
              AdminResponse{.status = static_cast<unsigned>(status),
                            .body = absl::StrCat(std::string(http::obsolete_reason(status)), ": ",
                                                 ec.message(), "\n")});
      return;
    }
    const http::request<http::string_body>& req = parser_->get();
    std::string_view target(req.target().data(), req.target().size());
    target = target.substr(0, target.find('?'));
    const std::function<AdminResponse()>* handler = nullptr;
    if (target == "/metrics") {
      handler = &handlers_->metrics;
    } else if (target == "/healthz") {
      handler = &handlers_->healthz;
    } else if (target == "/readyz") {
      handler = &handlers_->readyz;
    }
    const bool head = req.method() == http::verb::head;
    AdminResponse response;
    if (handler == nullptr || !*handler) {
      response = {.status = 404,
                  .body = "not found: the admin server has /metrics, /healthz and /readyz\n"};
    } else if (req.method() != http::verb::get && !head) {
      response = {.status = 405, .body = "method not allowed: use GET or HEAD\n"};
    } else {
      response = (*handler)();
    }
    Respond(static_cast<http::status>(response.status), req.version(), req.keep_alive(), head,
            std::move(response));
  }

  void Respond(http::status status, unsigned version, bool keep_alive, bool head,
               AdminResponse response) {
    res_ = {};
    res_.result(status);
    res_.version(version);
    res_.set(http::field::server, kServerHeader);
    res_.set(http::field::content_type, response.content_type);
    if (status == http::status::method_not_allowed) res_.set(http::field::allow, "GET, HEAD");
    if (status != http::status::ok) res_.set(http::field::cache_control, "no-store");
    res_.keep_alive(keep_alive);
    res_.body() = std::move(response.body);
    res_.prepare_payload();
    if (head) res_.body().clear();  // Content-Length still tells the GET's.
    transport().expires_after(kTimeout);
    http::async_write(stream_, res_, [self = Self(), keep_alive](beast::error_code ec, size_t) {
      if (ec) return self->CloseAfterError();
      if (!keep_alive) return self->Close();
      self->Read();
    });
  }

  // Ends the connection: our side first (TLS: its close_notify, then the
  // TCP FIN), then whatever the client still sends is read and dropped
  // until it closes too (for at most kLingerTime). Closing with unread input
  // would make the kernel send a reset, which can destroy our last response
  // before the client reads it (e.g. a 431 answered before the whole
  // oversized header arrived).
  void Close() {
    transport().expires_after(kLingerTime);
    if constexpr (kTls) {
      if (handshake_done_) {
        stream_.async_shutdown([self = Self()](beast::error_code) { self->CloseTcp(); });
        return;
      }
    }
    CloseTcp();
  }
  // After a failed read or write. TLS: the session may be broken (and
  // OpenSSL must not shut down a session after a fatal error), so the socket
  // just closes; the client gave up or failed anyway.
  void CloseAfterError() {
    if constexpr (kTls) {
      transport().close();
    } else {
      Close();
    }
  }
  void CloseTcp() {
    beast::error_code ignored;
    transport().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Drain();
  }
  void Drain() {
    transport().async_read_some(asio::buffer(drain_),
                                [self = Self()](beast::error_code ec, size_t) {
                                  if (ec) return self->transport().close();
                                  self->Drain();
                                });
  }

  // Declared before stream_, which refers to it.
  const std::shared_ptr<asio::ssl::context> context_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  std::array<char, 4096> drain_;
  const AdminHandlers* const handlers_;
  bool handshake_done_ = false;
  bool evicted_ = false;
};

void AdminHttpServer::Sessions::Add(const std::string& peer) {
  ++open_;
  ++per_peer_[peer];
}

void AdminHttpServer::Sessions::Remove(Session* session, const std::string& peer) {
  NotWaiting(session);
  --open_;
  if (auto it = per_peer_.find(peer); it != per_peer_.end() && --it->second == 0) {
    per_peer_.erase(it);
  }
}

void AdminHttpServer::Sessions::Waiting(const std::shared_ptr<Session>& session) {
  NotWaiting(session.get());
  waiting_.push_back(session);
}

void AdminHttpServer::Sessions::NotWaiting(Session* session) {
  // Also drops the entries of sessions already gone.
  waiting_.remove_if([session](const std::weak_ptr<Session>& w) {
    std::shared_ptr<Session> s = w.lock();
    return s == nullptr || s.get() == session;
  });
}

bool AdminHttpServer::Sessions::MakeRoom(const std::string& peer) {
  const bool peer_full = PeerCount(peer) >= kMaxSessionsPerPeer;
  if (!peer_full && open_ < kMaxSessions) return true;
  // Evict the connection that has waited longest for a request: from this
  // peer when it is at its own limit, else from anyone.
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    std::shared_ptr<Session> s = it->lock();
    if (s == nullptr || (peer_full && s->peer() != peer)) continue;
    waiting_.erase(it);
    s->Evict();
    return true;
  }
  return false;
}

int AdminHttpServer::Sessions::PeerCount(const std::string& peer) const {
  auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? 0 : it->second;
}

AdminHttpServer::AdminHttpServer(AdminHandlers handlers, std::optional<AdminTlsOptions> tls)
    : handlers_(std::move(handlers)),
      tls_(std::move(tls)),
      acceptor_(io_),
      retry_(io_),
      certificate_timer_(io_) {}

absl::StatusOr<std::unique_ptr<AdminHttpServer>> AdminHttpServer::Start(
    const std::string& listen, AdminHandlers handlers, std::optional<AdminTlsOptions> tls) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("admin address \"%s\" is not host:port", listen));
  }
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";

  std::unique_ptr<AdminHttpServer> s(new AdminHttpServer(std::move(handlers), std::move(tls)));
  if (s->tls_.has_value()) {
    if (absl::Status st = s->CheckCertificate(/*initial=*/true); !st.ok()) return st;
  }
  auto fail = [&](std::string_view what, const beast::error_code& ec) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on admin address %s: %s: %s", listen, what, ec.message()));
  };
  beast::error_code ec;
  tcp::resolver resolver(s->io_);
  tcp::resolver::results_type endpoints =
      resolver.resolve(host, port, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) return fail("resolving it", ec);
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  if (s->acceptor_.open(endpoint.protocol(), ec); ec) return fail("socket", ec);
  if (s->acceptor_.set_option(asio::socket_base::reuse_address(true), ec); ec) {
    return fail("SO_REUSEADDR", ec);
  }
  if (s->acceptor_.bind(endpoint, ec); ec) return fail("bind", ec);
  if (s->acceptor_.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return fail("listen", ec);
  }
  s->port_ = s->acceptor_.local_endpoint(ec).port();
  if (ec) return fail("getsockname", ec);
  s->address_ = absl::StrCat(listen.substr(0, colon + 1), s->port_);
  s->Accept();
  if (s->tls_.has_value()) s->WatchCertificate();
  s->thread_ = std::thread([server = s.get()] { server->io_.run(); });
  return s;
}

void AdminHttpServer::Accept() {
  acceptor_.async_accept(io_, [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly rather than spin.
      spdlog::warn("admin HTTP: accept failed: {}", ec.message());
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    beast::error_code peer_ec;
    const std::string peer = socket.remote_endpoint(peer_ec).address().to_string();
    if (peer_ec || !sessions_.MakeRoom(peer)) {
      beast::error_code ignored;
      socket.close(ignored);  // Every connection is busy: this one is refused.
    } else {
      sessions_.Add(peer);
      if (tls_.has_value()) {
        std::make_shared<StreamSession<SslStream>>(std::move(socket), tls_state_.context,
                                                   &handlers_, &sessions_, peer)
            ->Start();
      } else {
        std::make_shared<StreamSession<beast::tcp_stream>>(std::move(socket), &handlers_,
                                                           &sessions_, peer)
            ->Start();
      }
    }
    Accept();
  });
}

absl::Status AdminHttpServer::CheckCertificate(bool initial) {
  const std::string identity =
      absl::StrCat(FileIdentity(tls_->cert_file), " ", FileIdentity(tls_->key_file));
  if (!initial && identity == tls_state_.identity) return absl::OkStatus();
  tls_state_.identity = identity;
  absl::StatusOr<std::shared_ptr<asio::ssl::context>> context =
      LoadTlsContext(tls_->cert_file, tls_->key_file);
  if (!context.ok()) {
    if (initial) return context.status();
    spdlog::warn(
        "admin HTTPS: the changed certificate files were not loaded, new connections still get "
        "the previous certificate: {}",
        std::string(context.status().message()));
    return context.status();
  }
  tls_state_.context = *std::move(context);
  if (!initial) {
    spdlog::info("admin HTTPS: certificate reloaded from {}; new connections get it",
                 tls_->cert_file);
  }
  return absl::OkStatus();
}

void AdminHttpServer::WatchCertificate() {
  certificate_timer_.expires_after(tls_->check_interval);
  certificate_timer_.async_wait([this](beast::error_code ec) {
    if (ec) return;
    (void)CheckCertificate(/*initial=*/false);
    WatchCertificate();
  });
}

AdminHttpServer::~AdminHttpServer() { Stop(); }

void AdminHttpServer::Stop() {
  if (stopped_.exchange(true)) return;
  io_.stop();
  if (thread_.joinable()) thread_.join();
  beast::error_code ignored;
  acceptor_.close(ignored);
}

}  // namespace cuckoo::server
