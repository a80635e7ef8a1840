// Whole files and what tells one version of a file from the next: the
// certificates, the access file, token files and PEM files the server and
// the tools read.
//
//   absl::StatusOr<std::string> pem = cuckoo::ReadFileToString(path);
//   if (!pem.ok()) return Error("cannot read --tls-cert=", path, ": ", pem.status().message());
#ifndef CUCKOO_BASE_FILE_H_
#define CUCKOO_BASE_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <limits>
#include <string>

#include "absl/status/statusor.h"

namespace cuckoo {

// The file at `path` read to its end, or its first `max_bytes` bytes if it
// is longer (for what may be endless, such as a token file that is
// /dev/zero). Any kind of file that read(2) reads: a pipe, /dev/stdin, a
// process substitution; a directory fails with EISDIR. The error's code is
// errno's (absl::ErrnoToStatusCode) and its message strerror's text alone
// ("No such file or directory"): the caller says which file it was.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             size_t max_bytes = std::numeric_limits<size_t>::max());

// What tells one version of a file from the next: device, inode, size and
// modification time, "DEV/INO/SIZE/SEC.NSEC". A new inode counts: Kubernetes
// updates a Secret volume by swapping the ..data link its files point
// through.
std::string FileIdentity(const struct stat& st);
// The same for what `path` resolves to (stat follows symlinks); "-" when it
// cannot be stat'ed.
std::string FileIdentity(const std::string& path);

}  // namespace cuckoo

#endif  // CUCKOO_BASE_FILE_H_
