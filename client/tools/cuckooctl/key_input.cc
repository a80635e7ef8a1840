#include "client/tools/cuckooctl/key_input.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "base/units.h"

namespace cuckoo::ctl {
namespace {

class ArgsSource : public KeySource {
 public:
  explicit ArgsSource(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  absl::Status Next(Chunk& chunk, bool) override {
    chunk.Clear(keys_read_);
    while (next_ < keys_.size() && !chunk.full()) chunk.Add(keys_[next_++]);
    keys_read_ += chunk.size();
    return absl::OkStatus();
  }
  bool done() const override { return next_ == keys_.size(); }

 private:
  std::vector<std::string> keys_;
  size_t next_ = 0;
};

// Lines of a file descriptor, read with a buffer that holds at least the
// longest line (up to kMaxLineBytes) and never the whole input.
class FdSource : public KeySource {
 public:
  FdSource(int fd, std::string name, bool owned) : fd_(fd), name_(std::move(name)), owned_(owned) {
    buf_.resize(1 << 20);
  }
  ~FdSource() override {
    if (owned_) close(fd_);
  }

  absl::Status Next(Chunk& chunk, bool may_block) override {
    chunk.Clear(keys_read_);
    while (!chunk.full()) {
      const char* data = buf_.data();
      if (const void* nl = memchr(data + begin_, '\n', end_ - begin_); nl != nullptr) {
        const size_t len = static_cast<const char*>(nl) - (data + begin_);
        AddLine(chunk, std::string_view(data + begin_, len));
        begin_ += len + 1;
        continue;
      }
      if (eof_) {
        if (begin_ < end_) AddLine(chunk, std::string_view(data + begin_, end_ - begin_));
        begin_ = end_;
        break;
      }
      if ((!may_block || chunk.size() > 0) && !Readable()) break;
      if (absl::Status s = Fill(); !s.ok()) return s;
    }
    keys_read_ += chunk.size();
    return absl::OkStatus();
  }

  bool done() const override { return eof_ && begin_ == end_; }

 private:
  void AddLine(Chunk& chunk, std::string_view line) {
    ++lines_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) chunk.Add(line);
  }

  bool Readable() const {
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    // An error or hang-up is "readable": read() reports it.
    return r != 0;
  }

  // Reads more input after the partial line at begin_.
  absl::Status Fill() {
    if (begin_ > 0) {
      memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: line %u is longer than %s; expected one key per line", name_,
                            lines_ + 1, FormatByteSize(kMaxLineBytes)));
      }
      buf_.resize(buf_.size() * 2);
    }
    while (true) {
      const ssize_t n = read(fd_, buf_.data() + end_, buf_.size() - end_);
      if (n > 0) {
        end_ += static_cast<size_t>(n);
        return absl::OkStatus();
      }
      if (n == 0) {
        eof_ = true;
        return absl::OkStatus();
      }
      if (errno != EINTR) {
        return absl::InvalidArgumentError(
            absl::StrFormat("cannot read %s: %s", name_, strerror(errno)));
      }
    }
  }

  int fd_;
  std::string name_;
  bool owned_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // Unconsumed bytes.
  bool eof_ = false;
  uint64_t lines_ = 0;
};

}  // namespace

std::optional<Failure> OpenKeySource(const CommandLine& cl, std::unique_ptr<KeySource>& source,
                                     bool& from_args) {
  std::vector<std::string> arg_keys(cl.positional.begin() + 2, cl.positional.end());
  for (size_t i = 0; i < arg_keys.size(); ++i) {
    if (arg_keys[i].empty()) {
      return UsageError(absl::StrFormat("KEY argument %u is empty; a key cannot be empty", i + 1));
    }
  }
  from_args = false;
  if (std::optional<std::string> file = cl.Get("file")) {
    if (!arg_keys.empty()) {
      return UsageError(absl::StrFormat(
          "give keys as arguments or with --file, not both (first KEY argument: \"%s\")",
          arg_keys[0]));
    }
    if (*file == "-") {
      source = std::make_unique<FdSource>(STDIN_FILENO, "stdin", false);
    } else {
      const int fd = open(file->c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        return UsageError(absl::StrFormat("cannot open --file=%s: %s", *file, strerror(errno)));
      }
      source = std::make_unique<FdSource>(fd, *file, true);
    }
  } else if (!arg_keys.empty()) {
    source = std::make_unique<ArgsSource>(std::move(arg_keys));
    from_args = true;
  } else {
    if (isatty(STDIN_FILENO)) {
      absl::FPrintF(stderr, "cuckooctl: reading keys from stdin, one per line (Ctrl-D ends)\n");
    }
    source = std::make_unique<FdSource>(STDIN_FILENO, "stdin", false);
  }
  return std::nullopt;
}

}  // namespace cuckoo::ctl
