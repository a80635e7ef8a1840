#include "server/security/auth.h"

#include <grpc/grpc_security_constants.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/access_file.h"
#include "base/file.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// Unique ids of loaded tables across every Authenticator of the process (in
// tests several servers share threads' caches).
std::atomic<uint64_t> next_table_id{1};

// One thread's verified tokens: token -> entry of the table `id`.
struct TokenCache {
  uint64_t id = 0;
  std::shared_ptr<const AccessTable> table;
  absl::flat_hash_map<std::string, const AccessEntry*> tokens;
};
thread_local TokenCache token_cache;

absl::Status Unauthenticated(AuthFailure* failure, AuthFailure why, absl::string_view message) {
  *failure = why;
  return absl::UnauthenticatedError(message);
}

}  // namespace

std::string_view AuthFailureName(AuthFailure failure) {
  switch (failure) {
    case AuthFailure::kMissingCredentials:
      return "missing_credentials";
    case AuthFailure::kMalformedHeader:
      return "malformed_header";
    case AuthFailure::kUnknownToken:
      return "unknown_token";
    case AuthFailure::kUnknownCertificate:
      return "unknown_certificate";
    case AuthFailure::kPermissionDenied:
      return "permission_denied";
  }
  return "?";
}

bool Caller::AdminOfSome() const {
  if (entry_ == nullptr) return true;
  return std::any_of(entry_->grants.begin(), entry_->grants.end(),
                     [](const Grant& g) { return g.access == Access::kAdmin; });
}

std::string Caller::GrantsText() const {
  if (entry_ == nullptr) return "everything";
  std::string out;
  for (const Grant& g : entry_->grants) {
    absl::StrAppend(&out, out.empty() ? "" : " ", std::string(AccessName(g.access)), ":",
                    g.pattern);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Start(Options options) {
  std::unique_ptr<Authenticator> a(new Authenticator(std::move(options)));
  if (absl::Status s = a->Load(/*initial=*/true); !s.ok()) return s;
  a->watcher_ = std::thread([p = a.get()] { p->Watch(); });
  return a;
}

Authenticator::~Authenticator() {
  {
    MutexLock lock(&watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
}

absl::StatusOr<std::string> Authenticator::ReadFile(const std::string& path,
                                                    std::string* identity) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string message = absl::StrFormat("cannot read the access file --auth-tokens=%s: %s", path,
                                          std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the access file --auth-tokens=%s is not a regular file", path));
  }
  if (st.st_size > (int64_t{64} << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the access file --auth-tokens=%s is %d bytes; at most 64 MiB", path, st.st_size));
  }
  *identity = FileIdentity(st);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "cannot read the access file --auth-tokens=%s: %s", path, text.status().message()));
  }
  return text;
}

absl::Status Authenticator::Load(bool initial) {
  // One load at a time: a SIGHUP's and the watcher's must not install an
  // older read after a newer one (a revoked token back until the next).
  MutexLock one_at_a_time(&load_mu_);
  std::string identity;
  absl::StatusOr<std::string> text = ReadFile(options_.path, &identity);
  absl::Status status = text.status();
  if (status.ok()) {
    absl::StatusOr<AccessTable> table = AccessTable::Parse(*text, options_.path);
    status = table.status();
    if (table.ok()) {
      auto shared = std::make_shared<const AccessTable>(*std::move(table));
      const size_t tokens = shared->tokens(), certs = shared->certs();
      {
        MutexLock lock(&mu_);
        table_ = std::move(shared);
        identity_ = identity;
        table_id_.store(next_table_id.fetch_add(1), std::memory_order_release);
      }
      spdlog::info("{} the access file {}: {} tokens, {} certificate entries",
                   initial ? "loaded" : "reloaded", options_.path, tokens, certs);
    }
  }
  if (!status.ok()) {
    if (!initial) {
      // Not again for this version of the file: the watcher would log it
      // every interval.
      MutexLock lock(&mu_);
      identity_ = identity;
    }
    if (!initial) {
      spdlog::error("the access file was not reloaded, the previous one stays in force: {}",
                    std::string(status.message()));
    }
  }
  if (!initial && options_.on_reload) options_.on_reload(status);
  return status;
}

absl::Status Authenticator::Reload() { return Load(/*initial=*/false); }

void Authenticator::Watch() {
  MutexLock lock(&watch_mu_);
  while (!stopping_) {
    watch_mu_.WaitFor(&watch_cv_, absl::ToChronoNanoseconds(options_.reload_interval));
    if (stopping_) break;
    struct stat st {};
    const std::string identity = ::stat(options_.path.c_str(), &st) == 0 ? FileIdentity(st) : "";
    bool changed;
    {
      MutexLock table_lock(&mu_);
      changed = identity != identity_;
    }
    if (changed) {
      lock.Unlock();
      Load(/*initial=*/false).IgnoreError();
      lock.Lock();
    }
  }
}

std::shared_ptr<const AccessTable> Authenticator::table() const {
  MutexLock lock(&mu_);
  return table_;
}

namespace {
// This thread's cache, refreshed when the table changed.
TokenCache& FreshCache(const std::atomic<uint64_t>& table_id,
                       absl::FunctionRef<std::shared_ptr<const AccessTable>()> table) {
  TokenCache& cache = token_cache;
  const uint64_t id = table_id.load(std::memory_order_acquire);
  if (cache.id != id) {
    cache.tokens.clear();
    cache.table = table();
    // The table may have moved on again since `id` was read; the cache is
    // then refreshed on the next call.
    cache.id = id;
  }
  return cache;
}
}  // namespace

absl::StatusOr<Caller> Authenticator::Authenticate(const grpc::ServerContextBase& ctx,
                                                   AuthFailure* failure) const {
  TokenCache& cache = FreshCache(table_id_, [this] { return table(); });
  const auto& metadata = ctx.client_metadata();
  auto header = metadata.find("authorization");
  if (header == metadata.end()) {
    // Mutual TLS: the verified client certificate may name the caller.
    if (cache.table->certs() > 0) {
      std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
      if (auth != nullptr && auth->IsPeerAuthenticated()) {
        auto values = [&](const char* property) {
          std::vector<std::string_view> out;
          for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
            out.emplace_back(v.data(), v.size());
          }
          return out;
        };
        const std::vector<std::string_view> cns = values(GRPC_X509_CN_PROPERTY_NAME);
        const std::vector<std::string_view> sans = values(GRPC_X509_SAN_PROPERTY_NAME);
        const std::vector<std::string_view> subjects = values(GRPC_X509_SUBJECT_PROPERTY_NAME);
        bool ambiguous = false;
        if (const AccessEntry* e = cache.table->FindCert(cns, sans, subjects, &ambiguous);
            e != nullptr) {
          return Caller(cache.table, e);
        }
        if (ambiguous) {
          return Unauthenticated(
              failure, AuthFailure::kUnknownCertificate,
              absl::StrFormat("the client certificate (subject \"%s\") matches several entries of "
                              "the server's access file, so which grants apply is ambiguous; send "
                              "a token, or make the entries name different certificates",
                              subjects.empty() ? std::string_view("?") : subjects.front()));
        }
        return Unauthenticated(
            failure, AuthFailure::kUnknownCertificate,
            absl::StrFormat("the client certificate (subject \"%s\") is not in the server's access "
                            "file, and the call has no \"authorization: Bearer <token>\" metadata",
                            subjects.empty() ? std::string_view("?") : subjects.front()));
      }
    }
    return Unauthenticated(failure, AuthFailure::kMissingCredentials,
                           "this server requires a token: send the metadata \"authorization: "
                           "Bearer <token>\" (cuckooctl --token or $CUCKOO_TOKEN)");
  }
  absl::string_view value(header->second.data(), header->second.size());
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "bearer ")) {
    return Unauthenticated(failure, AuthFailure::kMalformedHeader,
                           "the authorization metadata must be \"Bearer <token>\"");
  }
  const absl::string_view token = absl::StripLeadingAsciiWhitespace(value.substr(7));
  return AuthenticateToken(std::string_view(token.data(), token.size()), failure);
}

absl::StatusOr<Caller> Authenticator::AuthenticateToken(std::string_view token_view,
                                                        AuthFailure* failure) const {
  TokenCache& cache = FreshCache(table_id_, [this] { return table(); });
  const absl::string_view token(token_view.data(), token_view.size());
  if (token.empty() || token.size() > kMaxAccessTokenBytes) {
    return Unauthenticated(
        failure, AuthFailure::kMalformedHeader,
        absl::StrFormat("the bearer token must be 1 to %d characters", kMaxAccessTokenBytes));
  }
  if (auto hit = cache.tokens.find(token); hit != cache.tokens.end()) {
    return Caller(cache.table, hit->second);
  }
  const AccessEntry* e =
      cache.table->FindToken(Sha256(std::string_view(token.data(), token.size())));
  if (e == nullptr) {
    return Unauthenticated(failure, AuthFailure::kUnknownToken,
                           "the bearer token is not known to this server (revoked, mistyped, or "
                           "for another server)");
  }
  if (cache.tokens.size() >= kTokenCacheEntries) cache.tokens.clear();
  cache.tokens.emplace(token, e);
  return Caller(cache.table, e);
}

absl::Status Authenticator::Validate(const Options& options) {
  if (options.reload_interval < absl::Milliseconds(100) ||
      options.reload_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--auth-reload-interval=%s must be between 100ms and 24h",
                        absl::FormatDuration(options.reload_interval)));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
