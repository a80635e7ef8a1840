#include "server/service/listen.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

constexpr absl::string_view kUnixScheme = "unix:";

// "--listen=\"LIST\"" and, for a list, which entry.
std::string Where(absl::string_view listen, absl::string_view entry) {
  if (listen == entry) return absl::StrFormat("--listen=\"%s\"", listen);
  return absl::StrFormat("--listen=\"%s\": \"%s\"", listen, entry);
}

// The socket path of a unix: entry (without the checks of the file system).
absl::StatusOr<std::string> UnixPath(absl::string_view listen, absl::string_view entry) {
  absl::string_view rest = entry.substr(kUnixScheme.size());
  // gRPC 1.51's server binds what follows "unix:" as it is: "///run/x.sock"
  // for unix:///run/x.sock (the same file, two bytes longer in sun_path).
  const absl::string_view bound = rest;
  if (absl::StartsWith(rest, "//")) {
    // gRPC's URI form: unix://AUTHORITY/PATH, and it takes no authority.
    if (!absl::StartsWith(rest, "///")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: a Unix socket is unix:///ABSOLUTE/PATH or unix:RELATIVE/PATH (\"unix://NAME\" "
          "would make NAME a host, which gRPC refuses)",
          Where(listen, entry)));
    }
    rest.remove_prefix(2);
  }
  if (rest.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the Unix socket's path is empty; e.g. unix:///run/cuckood/cuckood.sock",
        Where(listen, entry)));
  }
  if (rest.find_first_of("%?#") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the Unix socket's path has a %%, ? or #, which gRPC would read as "
                        "part of a URI (an escape, a query, a fragment); choose another path",
                        Where(listen, entry)));
  }
  if (bound.size() > kMaxUnixSocketPath) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the Unix socket's path is %u bytes long%s; the most a socket address holds is %u "
        "(sun_path): choose a shorter path",
        Where(listen, entry), bound.size(),
        bound.size() == rest.size() ? "" : " as gRPC binds it (with the slashes of unix:///)",
        kMaxUnixSocketPath));
  }
  return std::string(rest);
}

// The directory a socket at `path` is made in: it must exist.
absl::Status CheckSocketDirectory(absl::string_view listen, absl::string_view entry,
                                  const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the Unix socket's directory %s %s", Where(listen, entry), dir,
                        err == ENOENT ? "does not exist: create it first (cuckood does not)"
                                      : absl::StrCat("cannot be read: ", std::strerror(err))));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the Unix socket's directory %s is not a directory", Where(listen, entry), dir));
  }
  return absl::OkStatus();
}

// A TCP entry: HOST:PORT with a numeric port (0 to 65535), an IPv6 host in
// brackets.
absl::Status CheckHostPort(absl::string_view listen, absl::string_view entry) {
  const size_t colon = entry.rfind(':');
  uint32_t port = 0;
  bool ok = colon != absl::string_view::npos && absl::SimpleAtoi(entry.substr(colon + 1), &port) &&
            port <= 65535 &&
            entry.substr(colon + 1).find_first_not_of("0123456789") == absl::string_view::npos;
  if (ok) {
    const absl::string_view host = entry.substr(0, colon);
    if (absl::StartsWith(host, "[")) {
      ok = absl::EndsWith(host, "]") && host.size() > 2;
    } else {
      // A colon or a slash left: "ipv4:1.2.3.4", "dns:///h", an IPv6
      // address without brackets.
      ok = host.find_first_of(":/[]") == absl::string_view::npos;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is neither host:port (e.g. 0.0.0.0:50051, [::]:50051) nor unix:PATH (e.g. "
        "unix:///run/cuckood/cuckood.sock)",
        Where(listen, entry)));
  }
  return absl::OkStatus();
}

bool LoopbackHostPort(absl::string_view address) {
  return absl::StartsWith(address, "127.") || absl::StartsWith(address, "localhost:") ||
         absl::StartsWith(address, "[::1]:");
}

}  // namespace

absl::StatusOr<std::vector<ListenAddress>> ParseListenAddresses(absl::string_view listen) {
  if (absl::StripAsciiWhitespace(listen).empty()) {
    return absl::InvalidArgumentError(
        "--listen is empty: give host:port (e.g. 0.0.0.0:50051), unix:PATH, or a comma-separated "
        "list of them");
  }
  std::vector<ListenAddress> out;
  std::set<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(listen, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--listen=\"%s\" has an empty entry: separate addresses with one comma", listen));
    }
    ListenAddress address{.text = std::string(entry), .path = {}};
    std::string key;
    if (absl::StartsWith(entry, kUnixScheme)) {
      absl::StatusOr<std::string> path = UnixPath(listen, entry);
      if (!path.ok()) return path.status();
      if (absl::Status s = CheckSocketDirectory(listen, entry, *path); !s.ok()) return s;
      address.path = *std::move(path);
      key = absl::StrCat(kUnixScheme,
                         std::filesystem::path(address.path).lexically_normal().string());
    } else {
      if (absl::Status s = CheckHostPort(listen, entry); !s.ok()) return s;
      key = address.text;
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--listen=\"%s\" names \"%s\" twice: give each address once", listen, entry));
    }
    out.push_back(std::move(address));
  }
  return out;
}

bool ListenIsLocal(absl::string_view listen) {
  absl::StatusOr<std::vector<ListenAddress>> addresses = ParseListenAddresses(listen);
  if (!addresses.ok()) return false;
  for (const ListenAddress& a : *addresses) {
    if (!a.is_unix() && !LoopbackHostPort(a.text)) return false;
  }
  return true;
}

std::string DefaultAdvertiseAddress(absl::string_view listen) {
  absl::StatusOr<std::vector<ListenAddress>> addresses = ParseListenAddresses(listen);
  if (!addresses.ok()) return "";
  for (const ListenAddress& a : *addresses) {
    if (a.is_unix()) continue;
    const size_t colon = a.text.rfind(':');
    const std::string port = a.text.substr(colon + 1);
    if (port == "0") return "";
    std::string host = a.text.substr(0, colon);
    if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
      char name[256] = {0};
      if (::gethostname(name, sizeof(name) - 1) != 0) return "";
      host = name;
    }
    return absl::StrCat(host, ":", port);
  }
  return "";
}

absl::Status RemoveStaleSocket(const std::string& path, bool* removed) {
  if (removed != nullptr) *removed = false;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot check the socket path %s: %s", path, std::strerror(errno)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s exists and is not a socket: cuckood does not remove it; choose another path or "
        "remove it yourself",
        path));
  }
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrFormat("socket(AF_UNIX): %s", std::strerror(errno)));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), kMaxUnixSocketPath));
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = errno;
  ::close(fd);
  if (rc == 0 || err == EAGAIN) {
    // EAGAIN: its listen queue is full, so someone listens.
    return absl::FailedPreconditionError(absl::StrFormat(
        "another process is serving on the Unix socket %s: stop it first, or choose another "
        "path",
        path));
  }
  if (err != ECONNREFUSED) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot tell whether a process serves on the Unix socket %s (connect: %s); not removing "
        "it",
        path, std::strerror(err)));
  }
  // Refused: no one listens; a server that was killed left it behind.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot remove the stale Unix socket %s: %s", path, std::strerror(errno)));
  }
  if (removed != nullptr) *removed = true;
  return absl::OkStatus();
}

Listeners::Listeners(std::vector<ListenAddress> addresses, uint32_t socket_mode)
    : addresses_(std::move(addresses)),
      socket_mode_(socket_mode),
      ports_(new int[addresses_.size()]()) {}

absl::StatusOr<std::unique_ptr<Listeners>> Listeners::Prepare(absl::string_view listen,
                                                              uint32_t socket_mode) {
  absl::StatusOr<std::vector<ListenAddress>> addresses = ParseListenAddresses(listen);
  if (!addresses.ok()) return addresses.status();
  for (const ListenAddress& a : *addresses) {
    if (!a.is_unix()) continue;
    bool removed = false;
    if (absl::Status s = RemoveStaleSocket(a.path, &removed); !s.ok()) {
      return absl::UnavailableError(
          absl::StrFormat("cannot listen on %s: %s", a.text, s.message()));
    }
    if (removed) {
      spdlog::info(
          "removed the stale Unix socket {} (nothing accepted on it: left by a server "
          "that did not shut down cleanly)",
          a.path);
    }
  }
  return std::unique_ptr<Listeners>(new Listeners(*std::move(addresses), socket_mode));
}

Listeners::~Listeners() {
  for (const FileId& f : files_) {
    struct stat st {};
    // Only the socket this server bound: not a file someone put there since.
    if (::lstat(f.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == f.dev &&
        st.st_ino == f.ino) {
      ::unlink(f.path.c_str());
    }
  }
}

void Listeners::AddTo(grpc::ServerBuilder& builder,
                      const std::shared_ptr<grpc::ServerCredentials>& credentials) {
  for (size_t i = 0; i < addresses_.size(); ++i) {
    builder.AddListeningPort(addresses_[i].text, credentials, &ports_[i]);
  }
}

absl::Status Listeners::Started(bool built) {
  bool bound = built;
  for (size_t i = 0; i < addresses_.size(); ++i) bound &= ports_[i] != 0;
  if (!bound) {
    // A socket that was bound before another address failed: nothing
    // accepts on it now.
    for (const ListenAddress& a : addresses_) {
      if (a.is_unix()) RemoveStaleSocket(a.path).IgnoreError();
    }
    bool sockets = false;
    for (const ListenAddress& a : addresses_) sockets |= a.is_unix();
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s: %s in use, not local, or not host:port%s", address(),
                        addresses_.size() == 1 ? "the address is" : "an address is",
                        sockets ? ", or a socket's directory is not writable" : ""));
  }
  for (const ListenAddress& a : addresses_) {
    if (!a.is_unix()) continue;
    if (::chmod(a.path.c_str(), socket_mode_) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("cannot set the mode of the Unix socket %s "
                          "to %04o: %s",
                          a.path, socket_mode_, std::strerror(errno)));
    }
    struct stat st {};
    if (::lstat(a.path.c_str(), &st) == 0) {
      files_.push_back({.path = a.path, .dev = st.st_dev, .ino = st.st_ino});
    }
  }
  return absl::OkStatus();
}

std::string Listeners::address() const {
  std::vector<std::string> texts;
  for (size_t i = 0; i < addresses_.size(); ++i) {
    const std::string& text = addresses_[i].text;
    if (!addresses_[i].is_unix() && absl::EndsWith(text, ":0") && ports_[i] != 0) {
      texts.push_back(absl::StrCat(text.substr(0, text.size() - 1), ports_[i]));
    } else {
      texts.push_back(text);
    }
  }
  return absl::StrJoin(texts, ",");
}

int Listeners::port() const {
  for (size_t i = 0; i < addresses_.size(); ++i) {
    if (!addresses_[i].is_unix()) return ports_[i];
  }
  return 0;
}

}  // namespace cuckoo::server
