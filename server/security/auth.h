// Authenticator: who is calling (--auth-tokens), for FilterServiceImpl.
//
// A call is authenticated by its "authorization: Bearer <token>" metadata,
// or, with mutual TLS and no such metadata, by its verified client
// certificate; the access file (server/security/access.h) says which token or
// certificate is which caller and what it may do. No credentials, a header
// that is not "Bearer <token>", or a token or certificate the file does not
// list: UNAUTHENTICATED. Without --auth-tokens every call is allowed, as
// before (Caller::anyone()).
//
// Cost: a token's SHA-256 is computed once per thread and table; later calls
// with it are a hash-map lookup in a small per-thread cache (at most
// kTokenCacheEntries tokens, positive results only: an unknown token is
// hashed every time and never remembered, so guessing cannot fill memory).
// bench/auth_bench measures both paths.
//
// The file is re-read when its modification time, size or inode changes
// (checked every `reload_interval`; a Kubernetes Secret update swaps a
// symlink, which changes the inode) and on Reload() (SIGHUP). A file that
// does not parse keeps the previous table; the error is logged and
// counted, and last_reload_status() has it.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_SECURITY_AUTH_H_
#define CUCKOO_SERVER_SECURITY_AUTH_H_

#include <grpcpp/server_context.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "server/security/access.h"

namespace cuckoo::server {

// Why a call was refused, for the metrics.
enum class AuthFailure : uint8_t {
  kMissingCredentials,  // no authorization header and no known certificate
  kMalformedHeader,     // not "Bearer <token>"
  kUnknownToken,
  kUnknownCertificate,  // mutual TLS: a verified certificate no entry names
  kPermissionDenied,    // a known caller without the grant
};
inline constexpr size_t kAuthFailures = 5;
std::string_view AuthFailureName(AuthFailure failure);

// The caller of one call: an entry of the access table (kept alive with it),
// or anyone when authentication is off.
class Caller {
 public:
  Caller() = default;  // Anyone.
  Caller(std::shared_ptr<const AccessTable> table, const AccessEntry* entry)
      : table_(std::move(table)), entry_(entry) {}

  bool anyone() const { return entry_ == nullptr; }
  // The entry's name; "-" for anyone.
  std::string_view name() const {
    return entry_ == nullptr ? std::string_view("-") : std::string_view(entry_->name);
  }
  bool Allows(Access access, std::string_view filter) const {
    return entry_ == nullptr || entry_->Allows(access, filter);
  }
  bool AdminOfAll() const { return entry_ == nullptr || entry_->AdminOfAll(); }
  // Whether some grant is admin (on any pattern).
  bool AdminOfSome() const;
  // "read:billing.* write:cart.*", for messages.
  std::string GrantsText() const;

 private:
  std::shared_ptr<const AccessTable> table_;
  const AccessEntry* entry_ = nullptr;
};

inline constexpr size_t kTokenCacheEntries = 256;

class Authenticator {
 public:
  struct Options {
    std::string path;
    absl::Duration reload_interval = absl::Seconds(5);
    // Called after each reload attempt (not the first load).
    std::function<void(const absl::Status&)> on_reload;
  };
  // INVALID_ARGUMENT when reload_interval is outside 100ms to 24h (the
  // message names --auth-reload-interval).
  static absl::Status Validate(const Options& options);
  // Reads and parses the file: INVALID_ARGUMENT naming the file and line, or
  // NOT_FOUND / PERMISSION_DENIED when it cannot be read. Starts the watcher.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Start(Options options);
  ~Authenticator();  // Stops the watcher.

  // The caller of the call `ctx`, or UNAUTHENTICATED (and *failure).
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& ctx,
                                      AuthFailure* failure) const;
  // The caller whose token is `token` (the Redis port's AUTH), or
  // UNAUTHENTICATED (and *failure): the same check and cache as a call's
  // "authorization: Bearer <token>".
  absl::StatusOr<Caller> AuthenticateToken(std::string_view token, AuthFailure* failure) const;
  // Re-reads the file now (SIGHUP). On error the previous table stays.
  absl::Status Reload();

  std::shared_ptr<const AccessTable> table() const;
  const std::string& path() const { return options_.path; }

 private:
  explicit Authenticator(Options options) : options_(std::move(options)) {}
  // Reads, parses and installs the file; `identity` is its stat identity.
  absl::Status Load(bool initial);
  void Watch();
  static absl::StatusOr<std::string> ReadFile(const std::string& path, std::string* identity);

  const Options options_;
  Mutex load_mu_;  // Held through a whole Load.
  mutable Mutex mu_;
  std::shared_ptr<const AccessTable> table_ ABSL_GUARDED_BY(mu_);
  // A process-wide unique id of table_, for the per-thread caches.
  std::atomic<uint64_t> table_id_{0};
  // The loaded file's stat (device, inode, size, modification time).
  std::string identity_ ABSL_GUARDED_BY(mu_);
  Mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stopping_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watcher_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SECURITY_AUTH_H_
