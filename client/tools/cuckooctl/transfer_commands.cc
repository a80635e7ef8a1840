// export and import: a filter's snapshot file to a file or stdout, and from
// a file or stdin to a new filter.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/units.h"
#include "client/tools/cuckooctl/commands.h"
#include "client/tools/cuckooctl/output.h"

namespace cuckoo::ctl {
namespace {

namespace v1 = ::cuckoo::v1;

// The deadline of an export or import: --timeout if given (a transfer is
// one RPC), else an hour.
absl::Duration TransferTimeout(const GlobalOptions& g, const CommandLine& cl) {
  return cl.Has("timeout") ? g.timeout : absl::Hours(1);
}

}  // namespace

int RunExport(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  const std::string file = cl.Get("file").value_or("-");
  const bool to_stdout = file == "-";
  int fd = STDOUT_FILENO;
  if (to_stdout) {
    if (isatty(STDOUT_FILENO)) {
      return Fail(UsageError(
          "refusing to write a binary snapshot to a terminal: redirect stdout (cuckooctl export "
          "NAME > FILE) or give --file=PATH"));
    }
  } else {
    fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Fail(
          UsageError(absl::StrFormat("cannot create --file=%s: %s", file, strerror(errno))));
    }
  }
  const std::string where = to_stdout ? "stdout" : file;
  int write_errno = 0;
  client::Client::ExportSink sink = [&](std::string_view bytes) -> absl::Status {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        write_errno = errno;
        return absl::AbortedError("local write failed");
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  absl::StatusOr<client::Client::ExportInfo> info =
      g.client->ExportFilter(name, sink, TransferTimeout(g, cl));
  if (!to_stdout) {
    // A backup is complete only once it is on disk.
    if (info.ok() && write_errno == 0 && fsync(fd) != 0) write_errno = errno;
    if (close(fd) != 0 && info.ok() && write_errno == 0) write_errno = errno;
    if (!info.ok() || write_errno != 0) unlink(file.c_str());  // Never a partial backup.
  }
  if (write_errno != 0) {
    return Fail(
        UsageError(absl::StrFormat("cannot write to %s: %s", where, strerror(write_errno))));
  }
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  std::string summary;
  if (g.json) {
    summary = JsonObject()
                  .String("name", name)
                  .String("file", where)
                  .Uint("bytes", info->total_bytes)
                  .Uint("items", info->items)
                  .Uint("log_position", info->log_position)
                  .Uint("filter_id", info->filter_id)
                  .Raw("filter", FilterInfoJson(info->filter))
                  .Done() +
              "\n";
  } else {
    // The size says why it is what it is: a snapshot holds every table
    // slot, empty or not, so a filter created for 10M keys exports ~15 MiB
    // with 2 keys in it (zeros, which compress to almost nothing:
    // docs/SNAPSHOT_FORMAT.md).
    summary = absl::StrFormat(
        "exported %s: %u items, %u bytes (%s: the filter's whole tables, %u slots, empty ones "
        "included) to %s; log position %u\n",
        name, info->items, info->total_bytes, FormatByteSize(info->total_bytes),
        info->filter.slots(), where, info->log_position);
  }
  if (to_stdout) {
    fputs(summary.c_str(), stderr);
    return kExitOk;
  }
  return Emit(summary);
}

int RunImport(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  const std::string file = cl.Get("file").value_or("-");
  const bool from_stdin = file == "-";
  int fd = STDIN_FILENO;
  if (from_stdin) {
    if (isatty(STDIN_FILENO)) {
      return Fail(UsageError(
          "refusing to read a binary snapshot from a terminal: redirect stdin (cuckooctl import "
          "NAME < FILE) or give --file=PATH"));
    }
  } else {
    fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Fail(UsageError(absl::StrFormat("cannot open --file=%s: %s", file, strerror(errno))));
    }
  }
  const std::string where = from_stdin ? "stdin" : file;
  // A regular file's size goes with the upload: the server then never takes
  // a part of it for the whole.
  uint64_t total = 0;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) total = static_cast<uint64_t>(st.st_size);
  int read_errno = 0;
  client::Client::ImportSource source = [&](absl::Span<char> buffer) -> absl::StatusOr<size_t> {
    while (true) {
      const ssize_t n = read(fd, buffer.data(), buffer.size());
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      read_errno = errno;
      return absl::AbortedError("local read failed");
    }
  };
  absl::StatusOr<v1::ImportFilterResponse> resp =
      g.client->ImportFilter(name, source, total, TransferTimeout(g, cl));
  if (!from_stdin) close(fd);
  if (read_errno != 0) {
    return Fail(UsageError(absl::StrFormat("cannot read %s: %s", where, strerror(read_errno))));
  }
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    return Emit(JsonObject()
                    .String("name", name)
                    .String("source_name", resp->source_name())
                    .Uint("bytes", resp->bytes())
                    .Uint("log_position", resp->log_position())
                    .Raw("filter", FilterInfoJson(resp->filter()))
                    .Done() +
                "\n");
  }
  TextFields t;
  t.Add("imported", absl::StrFormat("%u bytes (%s) from %s, a snapshot of filter %s", resp->bytes(),
                                    FormatByteSize(resp->bytes()), where, resp->source_name()))
      .Add("log_position", absl::StrFormat("%u", resp->log_position()));
  AddFilterInfoText(t, resp->filter());
  return Emit(t.Done());
}

}  // namespace cuckoo::ctl
