// Closing connections to keep memory bounded: past client_memory those
// using the most ("client_memory"); with auth_required, those not
// authenticated yet past max_unauthenticated (the oldest) or
// unauthenticated_memory (the largest). RespServer::Core chooses under
// registry_mu; each connection's own thread closes it.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "boost/asio/post.hpp"
#include "server/resp/resp_server_internal.h"

namespace cuckoo::server::resp {

namespace {

constexpr std::string_view kUnauthenticatedMemory =
    "-ERR unauthenticated clients memory limit: the connections that have not sent AUTH hold "
    "more than their share of --redis-client-memory, and this one the most; AUTH right after "
    "connecting\r\n";

}  // namespace

namespace internal {

void Connection::Evict() {
  if (closed_ || close_after_flush_) return;
  if (evict_reason != EvictReason::kClientMemory) {
    if (session_.authenticated) {  // in the meantime
      core_->Undisplace(this);
      return;
    }
    // (Over TLS the error would have to be encrypted: closed without it.)
    if (!writing_active_ && tls_ == nullptr) {
      const std::string_view error = evict_reason == EvictReason::kMaxUnauthenticated
                                         ? kMaxUnauthenticated
                                         : kUnauthenticatedMemory;
      error_code ignored;
      socket_.non_blocking(true, ignored);
      socket_.write_some(asio::buffer(error), ignored);
    }
    Close(evict_reason == EvictReason::kMaxUnauthenticated ? "max_unauthenticated"
                                                           : "unauthenticated_memory");
    return;
  }
  core_->evicted.fetch_add(1, std::memory_order_relaxed);
  if (core_->options.on_evict) {
    core_->options.on_evict(absl::StrFormat("id=%u addr=%s name=%s tot-mem=%u", session_.id,
                                            session_.peer, session_.name, charged_),
                            static_cast<size_t>(std::max<int64_t>(0, core_->client_bytes.load())));
  }
  if (!writing_active_ && tls_ == nullptr) {
    const std::string error = absl::StrFormat(
        "-ERR client memory limit: this connection held %u bytes and the Redis port's clients "
        "together more than their limit of %u bytes (--redis-client-memory), so the clients "
        "using the most were closed\r\n",
        charged_, core_->options.client_memory);
    error_code ignored;
    socket_.non_blocking(true, ignored);
    socket_.write_some(asio::buffer(error), ignored);
  }
  Close("client_memory");
}

}  // namespace internal

void RespServer::Core::MarkEvicting(internal::Connection* c, size_t bytes,
                                    internal::EvictReason reason) {
  c->evicted_bytes = bytes;
  c->evict_reason = reason;
  c->evicting.store(true);
  eviction_bytes.fetch_add(static_cast<int64_t>(bytes));
  if (reason != internal::EvictReason::kClientMemory) {
    displacing_count.fetch_add(1);
    displacing_bytes.fetch_add(static_cast<int64_t>(bytes));
  }
  if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::Evict() {
  const int64_t limit = static_cast<int64_t>(options.client_memory);
  if (client_bytes.load() - eviction_bytes.load() <= limit) return;
  std::vector<std::shared_ptr<internal::Connection>> victims;
  {
    std::unique_lock<std::mutex> lock(registry_mu, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another thread is at it
    const int64_t total = client_bytes.load() - eviction_bytes.load();
    if (total <= limit) return;
    std::vector<std::pair<size_t, internal::Connection*>> by_size;
    by_size.reserve(registry.size());
    for (internal::Connection* c : registry) {
      if (!c->evicting.load()) by_size.emplace_back(c->charged.load(), c);
    }
    victims = ChooseLargest(std::move(by_size), total, limit, internal::EvictReason::kClientMemory);
  }
  PostEvict(std::move(victims));
}

std::vector<std::shared_ptr<internal::Connection>> RespServer::Core::ChooseLargest(
    std::vector<std::pair<size_t, internal::Connection*>> by_size, int64_t total, int64_t limit,
    internal::EvictReason reason) {
  std::sort(by_size.begin(), by_size.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::shared_ptr<internal::Connection>> victims;
  for (const auto& [bytes, c] : by_size) {
    if (total <= limit) break;
    std::shared_ptr<internal::Connection> victim = c->weak_from_this().lock();
    if (victim == nullptr) continue;  // being destroyed
    MarkEvicting(c, bytes, reason);
    total -= static_cast<int64_t>(bytes);
    victims.push_back(std::move(victim));
  }
  return victims;
}

void RespServer::Core::PostEvict(std::vector<std::shared_ptr<internal::Connection>> victims) {
  for (auto& v : victims) {
    asio::io_context& io = v->io();
    asio::post(io, [v = std::move(v)] { v->Evict(); });
  }
}

void RespServer::Core::Register(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.insert(c);
  // Counted unauthenticated since it was accepted (Accept).
  if (options.auth_required) {
    c->unauthenticated_pos = unauthenticated.insert(unauthenticated.end(), c);
    c->in_unauthenticated = true;
  }
}

void RespServer::Core::Unregister(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.erase(c);
  if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::UnauthenticatedChanged(internal::Connection* c, bool now_unauthenticated) {
  std::lock_guard<std::mutex> lock(registry_mu);
  if (now_unauthenticated) {
    // RESET: the newest. (A finalized connection is never unauthenticated.)
    if (!c->in_unauthenticated && !c->evicting.load()) {
      c->unauthenticated_pos = unauthenticated.insert(unauthenticated.end(), c);
      c->in_unauthenticated = true;
    }
  } else if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::Undisplace(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  if (!c->evicting.load()) return;
  eviction_bytes.fetch_sub(static_cast<int64_t>(c->evicted_bytes));
  displacing_count.fetch_sub(1);
  displacing_bytes.fetch_sub(static_cast<int64_t>(c->evicted_bytes));
  c->evicting.store(false);
}

bool RespServer::Core::DisplaceOldestUnauthenticated() {
  std::shared_ptr<internal::Connection> victim;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (internal::Connection* c : unauthenticated) {
      victim = c->weak_from_this().lock();
      if (victim == nullptr) continue;  // being destroyed
      MarkEvicting(c, c->charged.load(), internal::EvictReason::kMaxUnauthenticated);
      break;
    }
  }
  if (victim == nullptr) return false;
  asio::io_context& io = victim->io();
  asio::post(io, [v = std::move(victim)] { v->Evict(); });
  return true;
}

void RespServer::Core::DisplaceLargestUnauthenticated() {
  const int64_t limit = static_cast<int64_t>(options.unauthenticated_memory);
  std::vector<std::shared_ptr<internal::Connection>> victims;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    const int64_t total = unauthenticated_bytes.load() - displacing_bytes.load();
    if (total <= limit) return;
    std::vector<std::pair<size_t, internal::Connection*>> by_size;
    by_size.reserve(unauthenticated.size());
    for (internal::Connection* c : unauthenticated) by_size.emplace_back(c->charged.load(), c);
    victims = ChooseLargest(std::move(by_size), total, limit,
                            internal::EvictReason::kUnauthenticatedMemory);
  }
  PostEvict(std::move(victims));
}

}  // namespace cuckoo::server::resp
