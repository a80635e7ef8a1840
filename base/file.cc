#include "base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuckoo {
namespace {

absl::Status ErrnoError(int err) {
  return absl::Status(absl::ErrnoToStatusCode(err), std::strerror(err));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno);
  std::string contents;
  struct stat st {};
  // A regular file's size, to read it into one buffer; others grow as read.
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    contents.reserve(std::min<size_t>(static_cast<size_t>(st.st_size), max_bytes));
  }
  char buffer[16384];
  while (contents.size() < max_bytes) {
    const ssize_t n =
        ::read(fd, buffer, std::min<size_t>(sizeof buffer, max_bytes - contents.size()));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return ErrnoError(err);
    }
    contents.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return contents;
}

std::string FileIdentity(const struct stat& st) {
  return absl::StrCat(st.st_dev, "/", st.st_ino, "/", st.st_size, "/", st.st_mtim.tv_sec, ".",
                      st.st_mtim.tv_nsec);
}

std::string FileIdentity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "-";
  return FileIdentity(st);
}

}  // namespace cuckoo
