// A tiny blocking HTTP/1.1 client over a loopback socket, and a reader for
// the Prometheus text format, for the admin server's tests. Deliberately not
// Beast: the tests check the server against plain bytes.
#ifndef CUCKOO_TESTS_UTIL_HTTP_H_
#define CUCKOO_TESTS_UTIL_HTTP_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/util/loopback.h"

namespace cuckoo::testing {

// A connected TCP socket to 127.0.0.1:port, closed on destruction; from
// `source` (another loopback address, e.g. "127.0.0.2", to be another peer)
// if given.
class HttpConnection {
 public:
  explicit HttpConnection(int port, const char* source = nullptr) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      inet_pton(AF_INET, source, &from.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
        close(fd_);
        fd_ = -1;
        return;
      }
    }
    if (!ConnectLoopback(fd_, port)) {
      close(fd_);
      fd_ = -1;
    }
  }
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;
  ~HttpConnection() {
    if (fd_ >= 0) close(fd_);
  }

  bool connected() const { return fd_ >= 0; }
  // Whether the server has closed the connection (without sending
  // anything), waiting up to `timeout` for it.
  bool ClosedByPeer(std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::string ignored;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Everything until the peer closes, or until `timeout` passes.
  std::string ReadToEnd(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (ReadSome(&out, until)) {
    }
    return out;
  }

  // Reads until `out` holds one whole response (headers and the body its
  // Content-Length announces; `head` for a response to HEAD, which has
  // none), and returns its raw bytes, leaving any rest in the buffer.
  std::string ReadResponse(bool head = false,
                           std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const size_t end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t length = 0;
        std::string lower = buffer_.substr(0, end);
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const size_t cl = lower.find("content-length:");
        if (cl != std::string::npos && !head) length = std::strtoul(&lower[cl + 15], nullptr, 10);
        if (buffer_.size() >= end + 4 + length) {
          std::string response = buffer_.substr(0, end + 4 + length);
          buffer_.erase(0, end + 4 + length);
          return response;
        }
      }
      if (!ReadSome(&buffer_, until)) {
        std::string rest = std::move(buffer_);
        buffer_.clear();
        return rest;
      }
    }
  }

 private:
  // One read into *out; false at EOF, on error or after `until`.
  bool ReadSome(std::string* out, std::chrono::steady_clock::time_point until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[65536];
    ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
};

struct HttpResponse {
  int status = 0;                              // 0: no response.
  std::map<std::string, std::string> headers;  // Names lower-cased.
  std::string body;
};

inline HttpResponse ParseHttpResponse(const std::string& raw) {
  HttpResponse r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  std::istringstream lines(raw.substr(0, end));
  std::string line;
  std::getline(lines, line);  // The status line.
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
  }
  r.body = raw.substr(end + 4);
  return r;
}

// One request on a new connection ("Connection: close").
inline HttpResponse HttpRequest(int port, const std::string& method, const std::string& path,
                                const char* source = nullptr) {
  HttpConnection c(port, source);
  if (!c.connected()) return {};
  c.Send(method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  return ParseHttpResponse(c.ReadToEnd());
}

inline HttpResponse HttpGet(int port, const std::string& path, const char* source = nullptr) {
  return HttpRequest(port, "GET", path, source);
}

// The Prometheus text format, parsed: each sample's name, labels and value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

inline std::vector<Sample> ParseMetrics(const std::string& text) {
  std::vector<Sample> samples;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = line.find_first_of("{ ");
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        const std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;  // Past ="
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;
    }
    s.value = std::strtod(line.c_str() + i, nullptr);
    samples.push_back(std::move(s));
  }
  return samples;
}

// The value of the sample `name` with exactly `labels`, if there is one.
inline std::optional<double> MetricValue(const std::vector<Sample>& samples,
                                         const std::string& name,
                                         const std::map<std::string, std::string>& labels = {}) {
  for (const Sample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

// Scrapes /metrics; empty if the scrape failed.
inline std::vector<Sample> Scrape(int port) {
  HttpResponse r = HttpGet(port, "/metrics");
  if (r.status != 200) return {};
  return ParseMetrics(r.body);
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_HTTP_H_
