// The gRPC port's addresses (--listen): TCP and Unix-domain sockets.
//
// --listen is one address or a comma-separated list, each its own listening
// port of the same server (same services, credentials and limits):
//
//   host:port          TCP: "0.0.0.0:50051", "[::]:50051", "127.0.0.1:0"
//                      (port 0: the kernel picks one)
//   unix:PATH          a Unix-domain socket at PATH, relative to the working
//                      directory or absolute ("unix:cuckood.sock",
//                      "unix:/run/cuckood/cuckood.sock")
//   unix:///ABS/PATH   the same, absolute, in gRPC's URI form
//                      ("unix:///run/cuckood/cuckood.sock")
//
// e.g. "0.0.0.0:50051,unix:///run/cuckood/cuckood.sock" for a sidecar that
// serves its pod's app over the socket and everyone else over TCP.
//
// A socket file is handled as a daemon's should be: a socket left behind by
// a killed server (nothing accepts on it) is removed before binding; a path
// another process serves on, or a path that is not a socket, is refused
// (nothing but a stale socket is ever deleted); the socket gets
// --listen-socket-mode (0660 by default) once bound, and is removed on
// shutdown.
#ifndef CUCKOO_SERVER_SERVICE_LISTEN_H_
#define CUCKOO_SERVER_SERVICE_LISTEN_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cuckoo::server {

// The longest socket path: sun_path's 108 bytes less the terminating NUL.
inline constexpr size_t kMaxUnixSocketPath = sizeof(sockaddr_un::sun_path) - 1;

// The mode a Unix socket gets when --listen-socket-mode is not given: read
// and write (connect) for its owner and group.
inline constexpr uint32_t kDefaultListenSocketMode = 0660;

// One entry of --listen.
struct ListenAddress {
  // As written (without surrounding whitespace): what gRPC is given.
  std::string text;
  // A Unix socket's file path (as gRPC binds it: relative to the working
  // directory unless absolute); empty for TCP.
  std::string path;

  bool is_unix() const { return !path.empty(); }
};

// Splits and checks --listen: every entry host:port (a numeric port, an IPv6
// host in brackets) or unix:PATH / unix:///PATH, no empty entry, no address
// twice; a socket path not empty, at most kMaxUnixSocketPath bytes as gRPC
// binds it (everything after "unix:", so unix:///ABS counts two more), without
// the characters gRPC's URI parser would take apart (% ? #), in a directory
// that exists. INVALID_ARGUMENT naming --listen, the entry and the problem.
absl::StatusOr<std::vector<ListenAddress>> ParseListenAddresses(absl::string_view listen);

// True when every entry of `listen` is reachable from this machine only: a
// loopback address (127.*, localhost, [::1]) or a Unix socket. For a list
// that does not parse, false.
bool ListenIsLocal(absl::string_view listen);

// The cluster's default --advertise: the first TCP entry of `listen`, with
// the host name for a wildcard host (0.0.0.0, [::], none). Empty when there
// is no TCP entry, its port is 0 (chosen at start-up), or the host name
// cannot be read.
std::string DefaultAdvertiseAddress(absl::string_view listen);

// Makes `path` free for a Unix socket to be bound at: nothing there: OK; a
// socket nothing accepts on (connect() is refused: a server was killed and
// left it): removed, and *removed set; a socket a process accepts on:
// FAILED_PRECONDITION "another process is serving on PATH"; anything else
// (a regular file, a directory, ...): FAILED_PRECONDITION, left alone.
absl::Status RemoveStaleSocket(const std::string& path, bool* removed = nullptr);

// The listening ports of one gRPC server, for CuckooServer::Start:
//
//   auto listeners = Listeners::Prepare(config.listen, config.listen_socket_mode);
//   listeners->AddTo(builder, credentials);
//   server = builder.BuildAndStart();
//   listeners->Started(server != nullptr);   // the ports bound, or why not
//
// Destroyed after the server has shut down, it removes the socket files it
// made (those still there and still the same files).
class Listeners {
 public:
  // Parses `listen` (ParseListenAddresses) and makes every socket path free
  // (RemoveStaleSocket; each stale socket removed is logged).
  static absl::StatusOr<std::unique_ptr<Listeners>> Prepare(absl::string_view listen,
                                                            uint32_t socket_mode);
  Listeners(const Listeners&) = delete;
  Listeners& operator=(const Listeners&) = delete;
  ~Listeners();

  // Adds every address to `builder` with `credentials`.
  void AddTo(grpc::ServerBuilder& builder,
             const std::shared_ptr<grpc::ServerCredentials>& credentials);
  // After BuildAndStart (`built`: it returned a server): gives each socket
  // its mode and remembers its file. UNAVAILABLE naming the addresses if
  // the server was not built or a port was not bound (the socket files the
  // attempt left are removed again).
  absl::Status Started(bool built);

  // Every address, comma-separated as in --listen, with the TCP ports
  // bound (":0" resolved).
  std::string address() const;
  // The first TCP port bound; 0 when there is none (sockets only).
  int port() const;
  const std::vector<ListenAddress>& addresses() const { return addresses_; }

 private:
  Listeners(std::vector<ListenAddress> addresses, uint32_t socket_mode);

  const std::vector<ListenAddress> addresses_;
  const uint32_t socket_mode_;
  // gRPC's selected port of each address (written by BuildAndStart; for a
  // socket nonzero once bound).
  std::unique_ptr<int[]> ports_;
  // The files of the sockets bound (st_dev, st_ino), to remove only those.
  struct FileId {
    std::string path;
    dev_t dev;
    ino_t ino;
  };
  std::vector<FileId> files_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_LISTEN_H_
