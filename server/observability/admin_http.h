// AdminHttpServer: cuckood's small HTTP/1.1 server for operators and
// orchestrators (Boost.Beast on Boost.Asio), separate from the gRPC port:
//
//   GET /metrics   Prometheus text format 0.0.4
//   GET /healthz   200 "ok" while the process is up; 503 once shutting down
//   GET /readyz    200 "ready" while serving; 503 while loading snapshots
//                  at start-up and from the start of shutdown
//
// HEAD is answered like GET without the body; other methods get 405, other
// paths 404, a request that does not parse 400, one with a body over 4 KiB
// 413 and headers over 8 KiB 431. Connections are kept alive (HTTP/1.1) and
// closed after 10 s without a request. At most 128 are open at once, 16 from
// one peer address; a new connection beyond either limit closes the one
// that has waited longest for a request (from that peer, at the per-peer
// limit), so idle or stalled connections cannot lock probes out. It is
// refused only when every connection is busy answering.
//
// HTTPS (cuckood --admin-tls): given AdminTlsOptions, every connection is
// TLS (1.2 or later) with the certificate chain and key files the gRPC port
// serves. The TLS handshake counts as waiting for a request: it has the same
// 10 s limit, and a connection still handshaking may be closed to make room
// like an idle one. A plain HTTP request on the TLS port gets no HTTP answer
// (the handshake fails and the connection is closed). The files are checked
// (stat, following symlinks, as Kubernetes swaps a Secret volume's ..data
// link) every `check_interval`; when they change, new connections get the
// new certificate and connections already open keep theirs. A pair that does
// not load (a key that is not the certificate's, half a file) leaves the
// previous one in use and is logged once.
//
// One thread runs an Asio io_context with every connection on it, async
// throughout: a slow or stalled client holds only its own connection. The
// handlers run on that thread; /metrics renders there too (a few
// microseconds per filter).
//
//   AdminHandlers h{.metrics = ..., .healthz = ..., .readyz = ...};
//   auto admin = AdminHttpServer::Start("0.0.0.0:9090", h);
//   // or HTTPS: Start("0.0.0.0:9090", h, AdminTlsOptions{.cert_file = ...,
//   //                                                      .key_file = ...});
//   ... (*admin)->port() ...
//   (*admin)->Stop();  // or destroy it
//
// Thread safety: Stop may be called from any thread but the server's own.
#ifndef CUCKOO_SERVER_OBSERVABILITY_ADMIN_HTTP_H_
#define CUCKOO_SERVER_OBSERVABILITY_ADMIN_HTTP_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace cuckoo::server {

// What one endpoint answers.
struct AdminResponse {
  unsigned status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct AdminHandlers {
  std::function<AdminResponse()> metrics;
  std::function<AdminResponse()> healthz;
  std::function<AdminResponse()> readyz;
};

// HTTPS on the admin port (see the top).
struct AdminTlsOptions {
  std::string cert_file;  // PEM: the certificate, then its chain
  std::string key_file;   // PEM: its private key
  // How often the files are checked for a change.
  std::chrono::milliseconds check_interval{10000};
};

inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class AdminHttpServer {
 public:
  // Binds `listen` (host:port; host may be a name, an IPv4 address, an IPv6
  // address in brackets, or empty for 0.0.0.0; port 0 picks a free port) and
  // starts serving, over TLS when `tls` is given. UNAVAILABLE if it cannot
  // be bound, INVALID_ARGUMENT if it is not host:port or the certificate or
  // key cannot be loaded.
  static absl::StatusOr<std::unique_ptr<AdminHttpServer>> Start(
      const std::string& listen, AdminHandlers handlers,
      std::optional<AdminTlsOptions> tls = std::nullopt);

  AdminHttpServer(const AdminHttpServer&) = delete;
  AdminHttpServer& operator=(const AdminHttpServer&) = delete;
  ~AdminHttpServer();  // Stop()s.

  // host:port actually bound (the port resolved when `listen` ended in :0).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  bool tls() const { return tls_.has_value(); }

  // Closes the listening socket and every connection and joins the thread.
  // Idempotent.
  void Stop();

  static constexpr int kMaxSessions = 128;
  static constexpr int kMaxSessionsPerPeer = 16;

 private:
  class Session;
  template <class Stream>
  class StreamSession;
  // The open connections, by peer, and those waiting for a request, oldest
  // first. Used on the server's thread only.
  class Sessions {
   public:
    void Add(const std::string& peer);
    void Remove(Session* session, const std::string& peer);
    void Waiting(const std::shared_ptr<Session>& session);
    void NotWaiting(Session* session);
    // Whether a new connection from `peer` may open, after evicting a
    // waiting one if a limit is reached.
    bool MakeRoom(const std::string& peer);

   private:
    int PeerCount(const std::string& peer) const;

    int open_ = 0;
    std::map<std::string, int> per_peer_;
    std::list<std::weak_ptr<Session>> waiting_;
  };

  // The TLS certificate and key in use, and the files' identity (device,
  // inode, size, modification time of each) they were read at.
  struct TlsState {
    std::shared_ptr<boost::asio::ssl::context> context;
    std::string identity;  // of the files last loaded, or last failed
  };

  AdminHttpServer(AdminHandlers handlers, std::optional<AdminTlsOptions> tls);
  void Accept();
  // TLS: loads the files again if they changed since the last look; on the
  // server's thread (or before it starts).
  absl::Status CheckCertificate(bool initial);
  void WatchCertificate();

  const AdminHandlers handlers_;
  const std::optional<AdminTlsOptions> tls_;
  TlsState tls_state_;
  // Before io_: sessions left in io_ when it is destroyed unregister here.
  Sessions sessions_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  // Paces accepting again after an accept error.
  boost::asio::steady_timer retry_;
  // TLS: when to look at the certificate files again.
  boost::asio::steady_timer certificate_timer_;
  std::string address_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_OBSERVABILITY_ADMIN_HTTP_H_
