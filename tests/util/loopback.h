// Plain TCP sockets on 127.0.0.1 for the tests that speak to a server with
// raw bytes (HTTP, RESP) or need a port: the address, a connect, a
// listening socket on a port of the kernel's choosing, a free port.
#ifndef CUCKOO_TESTS_UTIL_LOOPBACK_H_
#define CUCKOO_TESTS_UTIL_LOOPBACK_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace cuckoo::testing {

// 127.0.0.1:port (0: any port, for bind).
inline sockaddr_in LoopbackAddress(int port = 0) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// Connects socket `fd` (made and set up by the caller) to 127.0.0.1:port;
// false with errno set if it could not.
inline bool ConnectLoopback(int fd, int port) {
  const sockaddr_in addr = LoopbackAddress(port);
  return ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
}

// A TCP socket bound to 127.0.0.1 on a port the kernel picks, set to
// *port, and listening (with `backlog`) unless backlog is 0; -1 if that
// failed. The caller closes it.
inline int BindLoopback(int* port, int backlog = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = LoopbackAddress();
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      (backlog > 0 && ::listen(fd, backlog) != 0) ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// A port of 127.0.0.1 no one listens on right now (the kernel's pick for
// port 0; another process may take it before the caller binds it).
inline int FreePort() {
  int port = 0;
  const int fd = BindLoopback(&port);
  if (fd >= 0) ::close(fd);
  return port;
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_LOOPBACK_H_
