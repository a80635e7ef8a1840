// Helpers for the Redis-port end-to-end tests (tests/e2e/redis_*_test.cc): a
// real cuckood with --redis-listen on a free loopback port, a plain-socket
// RESP client that reads replies exactly as the server sent them (no client
// library in between, so malformed or missing replies show), redis-cli runs,
// and the server's resident memory.
#ifndef CUCKOO_TESTS_E2E_REDIS_TEST_UTIL_H_
#define CUCKOO_TESTS_E2E_REDIS_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/e2e/process.h"
#include "tests/util/loopback.h"

namespace cuckoo::testing {

constexpr char kRedisCli[] = "/usr/bin/redis-cli";

// A cuckood serving the Redis protocol on 127.0.0.1:redis_port() besides its
// gRPC port. `flags` are added after --redis-listen.
class RedisCuckood {
 public:
  RedisCuckood(const std::string& data_dir, std::vector<std::string> flags = {}) {
    // Port 0: cuckood binds a port of its own choosing and logs it, read
    // back here as the admin port is, so no other process can take it
    // between a pick and the bind.
    flags.insert(flags.begin(), "--redis-listen=127.0.0.1:0");
    server_ = std::make_unique<Cuckood>(data_dir, flags);
    constexpr std::string_view kLine = "CF.* commands) on 127.0.0.1:";
    const std::string out = server_->process().out();
    if (const size_t at = out.find(kLine); at != std::string::npos) {
      redis_port_ = std::atoi(out.c_str() + at + kLine.size());
    }
  }
  bool ready() const { return server_->ready(); }
  int redis_port() const { return redis_port_; }
  int admin_port() const { return server_->admin_port(); }
  const std::string& address() const { return server_->address(); }
  Process& process() { return server_->process(); }
  std::string Log() { return server_->process().out() + server_->process().err(); }

 private:
  int redis_port_ = 0;
  std::unique_ptr<Cuckood> server_;
};

// One RESP reply as sent: its type byte and its parts.
struct RespReply {
  char type = 0;                 // '+', '-', ':', '$', '*', '_', '%', '~', ',', '#', '=', ...
  std::string str;               // simple string, error, bulk (without CRLF), or the number text
  int64_t integer = 0;           // ':' value; '$'/'*' length (-1 for a null)
  std::vector<RespReply> elems;  // '*', '%' (2n: key, value), '~'
  bool null() const { return type == '_' || ((type == '$' || type == '*') && integer == -1); }
};

// A plain blocking TCP connection speaking RESP, with a receive deadline.
class RespConn {
 public:
  explicit RespConn(int port, std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : timeout_(timeout) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (!ConnectLoopback(fd_, port)) {
      close(fd_);
      fd_ = -1;
      return;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  RespConn(const RespConn&) = delete;
  RespConn& operator=(const RespConn&) = delete;
  ~RespConn() { Close(); }

  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Shuts down the sending side only (the server sees EOF).
  void ShutdownWrite() { shutdown(fd_, SHUT_WR); }

  // Sends all of `data`; false if the connection failed (e.g. the server
  // closed it).
  bool Send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // A command as a RESP array of bulk strings.
  static std::string Encode(const std::vector<std::string>& args) {
    std::string out = "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& a : args) {
      out += "$" + std::to_string(a.size()) + "\r\n";
      out += a;
      out += "\r\n";
    }
    return out;
  }
  bool SendCommand(const std::vector<std::string>& args) { return Send(Encode(args)); }

  // The next reply; nullopt when the connection closed (closed() then
  // says so) or nothing came within the timeout.
  std::optional<RespReply> Read() {
    RespReply r;
    if (!ReadOne(&r)) return std::nullopt;
    return r;
  }
  // The command's reply.
  std::optional<RespReply> Call(const std::vector<std::string>& args) {
    if (!SendCommand(args)) return std::nullopt;
    return Read();
  }
  // True once the server closed the connection (a read returned EOF or
  // reset), waiting up to the timeout for it. Bytes still unread are
  // discarded.
  bool WaitClosed() {
    while (!closed_) {
      if (!Fill()) break;
      buffer_.clear();
      pos_ = 0;
    }
    return closed_;
  }
  bool closed() const { return closed_; }
  bool timed_out() const { return timed_out_; }
  // Everything received so far and not parsed.
  std::string Unparsed() const { return buffer_.substr(pos_); }

 private:
  // Reads more bytes into buffer_; false on EOF, error or timeout.
  bool Fill() {
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(timeout_.count()));
    if (ready <= 0) {
      timed_out_ = ready == 0;
      return false;
    }
    char chunk[65536];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  bool Line(std::string* line) {
    while (true) {
      const size_t end = buffer_.find("\r\n", pos_);
      if (end != std::string::npos) {
        *line = buffer_.substr(pos_, end - pos_);
        pos_ = end + 2;
        return true;
      }
      if (!Fill()) return false;
    }
  }
  bool Bytes(size_t n, std::string* out) {
    while (buffer_.size() - pos_ < n + 2) {
      if (!Fill()) return false;
    }
    *out = buffer_.substr(pos_, n);
    pos_ += n + 2;
    if (pos_ > (1 << 20)) {
      buffer_.erase(0, pos_);
      pos_ = 0;
    }
    return true;
  }
  bool ReadOne(RespReply* r) {
    std::string line;
    if (!Line(&line) || line.empty()) return false;
    r->type = line[0];
    r->str = line.substr(1);
    switch (r->type) {
      case ':':
      case '(':
        r->integer = std::stoll(r->str);
        return true;
      case '$':
      case '=':
      case '!': {
        r->integer = std::stoll(r->str);
        if (r->integer < 0) return true;
        return Bytes(static_cast<size_t>(r->integer), &r->str);
      }
      case '*':
      case '~':
      case '>':
      case '%': {
        r->integer = std::stoll(r->str);
        if (r->integer < 0) return true;
        const int64_t n = r->type == '%' ? 2 * r->integer : r->integer;
        r->elems.resize(static_cast<size_t>(n));
        for (RespReply& e : r->elems) {
          if (!ReadOne(&e)) return false;
        }
        return true;
      }
      default:  // + - _ , #
        return true;
    }
  }

  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
  size_t pos_ = 0;
  bool closed_ = false;
  bool timed_out_ = false;
};

// A process's resident memory (VmRSS), in KiB; 0 if unknown.
inline uint64_t RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmRSS:")) return std::stoull(line.substr(6));
  }
  return 0;
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_E2E_REDIS_TEST_UTIL_H_
