#include "base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <system_error>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"

namespace cuckoo {

absl::Status EnvIoError(absl::string_view op, absl::string_view path, int err) {
  const std::string msg = absl::StrFormat("%s %s: %s", op, path,
                                          std::error_code(err, std::generic_category()).message());
  absl::Status s = (err == ENOSPC || err == EDQUOT) ? absl::ResourceExhaustedError(msg)
                                                    : absl::InternalError(msg);
  s.SetPayload("errno", absl::Cord(absl::StrCat(err)));
  return s;
}

int EnvErrno(const absl::Status& status) {
  auto p = status.GetPayload("errno");
  int err = 0;
  if (p.has_value() && absl::SimpleAtoi(std::string(*p), &err)) return err;
  return 0;
}

namespace {

class PosixEnvFile final : public EnvFile {
 public:
  PosixEnvFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixEnvFile() override { ::close(fd_); }

  absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) override {
    while (!data.empty()) {
      ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return EnvIoError("write", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return EnvIoError("fdatasync", path_, errno);
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) override {
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return EnvIoError("read", path_, errno);
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

  absl::Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return EnvIoError("truncate", path_, errno);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return EnvIoError("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  const std::string& path() const override { return path_; }

 private:
  const int fd_;
  const std::string path_;
};

class PosixFileEnv final : public Env {
 public:
  absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return EnvIoError("open", path, errno);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::DataLossError(absl::StrFormat("%s: not a regular file", path));
    }
    return std::make_unique<PosixEnvFile>(fd, path);
  }

  absl::StatusOr<std::unique_ptr<EnvFile>> Create(const std::string& path, uint64_t bytes,
                                                  const std::atomic<bool>* cancel) override {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return EnvIoError("create", path, errno);
    auto file = std::make_unique<PosixEnvFile>(fd, path);
    auto fail = [&](absl::Status s) {
      file.reset();
      ::unlink(path.c_str());
      return s;
    };
    // Allocate first: a full disk fails here, at once, not halfway through
    // the zeros.
    if (int err = bytes == 0 ? 0 : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
      return fail(EnvIoError("allocate", path, err));
    }
    // Then write the zeros: an allocated but unwritten extent would turn
    // every fdatasync into a metadata update too.
    static const std::vector<uint8_t> kZeros(size_t{1} << 20, 0);
    for (uint64_t off = 0; off < bytes; off += kZeros.size()) {
      if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
        return fail(absl::CancelledError(
            absl::StrFormat("preparing %s: cancelled (cuckood is shutting down)", path)));
      }
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kZeros.size(), bytes - off));
      if (absl::Status s = file->Write(off, absl::MakeConstSpan(kZeros.data(), n)); !s.ok()) {
        return fail(s);
      }
    }
    if (::fsync(fd) != 0) return fail(EnvIoError("fsync", path, errno));
    return std::unique_ptr<EnvFile>(std::move(file));
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return EnvIoError("rename", from, errno);
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return EnvIoError("remove", path, errno);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return EnvIoError("list", dir, errno);
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    const int err = errno;
    ::closedir(d);
    if (err != 0) return EnvIoError("list", dir, err);
    return names;
  }

  absl::Status CreateDir(const std::string& dir) override {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return EnvIoError("create directory", dir, errno);
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return EnvIoError("stat", dir, errno);
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrFormat("%s is not a directory", dir));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<VolumeSpace> DiskSpace(const std::string& path) override {
    struct statvfs st;
    if (::statvfs(path.c_str(), &st) != 0) return EnvIoError("statvfs", path, errno);
    return VolumeSpace{.total_bytes = uint64_t{st.f_blocks} * st.f_frsize,
                       .free_bytes = uint64_t{st.f_bavail} * st.f_frsize};
  }

  absl::Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return EnvIoError("open directory", dir, errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return EnvIoError("fsync directory", dir, err);
    return absl::OkStatus();
  }
};

}  // namespace

Env* PosixEnv() {
  static PosixFileEnv* env = new PosixFileEnv();
  return env;
}

}  // namespace cuckoo
