// Filter expiry: SetFilterExpiry, the drop of expired filters (the timer
// and CreateFilter over an expired name) and CreateFilter's expire_at.
//
// An expiry is a property of the filter (CuckooFilter::expire_at, Unix
// milliseconds), set through the log: a single node's kSetExpiry record, a
// cluster's kSetExpiry entry, naming the filter's id. The drop when it
// passes is a logged drop like DropFilter's (a kDropFilter record or
// entry naming the id), issued here: by the timer (every
// kExpiryCheckInterval), or by a CreateFilter of the expired filter's
// name. Replay and replicas never drop on their clock: only at the logged
// drop, so every replay and every replica drops the same filter at the
// same position. Between expire_at and that drop the filter is invisible
// to clients (FilterRegistry::GetLive / ListLive).
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/guarded.h"
#include "server/cluster/log_entry.h"
#include "server/service/filter_service.h"
#include "server/service/filter_service_internal.h"
#include "server/service/status.h"
#include "server/wal/wal_format.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

static_assert(kWalMaxExpireAt == kLogEntryMaxExpireAt);

absl::StatusOr<int64_t> ExpireAtMillis(const google::protobuf::Timestamp& t,
                                       std::string_view field) {
  // Timestamp's own range: 0001-01-01 to 9999-12-31; ours starts at 1970
  // (0 means none).
  if (t.seconds() < 0 || t.nanos() < 0 || t.nanos() > 999'999'999 ||
      t.seconds() > kWalMaxExpireAt / 1000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s (seconds %d, nanos %d) is not a time from 1970-01-01T00:00:00.001Z to "
                        "9999-12-31T23:59:59.999Z",
                        field, t.seconds(), t.nanos()));
  }
  const int64_t ms = t.seconds() * 1000 + t.nanos() / 1'000'000;
  if (ms == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s is 1970-01-01T00:00:00Z, which cuckood keeps for \"no expiry\": leave it unset",
        field));
  }
  return ms;
}

void SetExpireAt(int64_t ms, google::protobuf::Timestamp* out) {
  out->set_seconds(ms / 1000);
  out->set_nanos(static_cast<int32_t>(ms % 1000) * 1'000'000);
}

void FilterServiceImpl::DropExpired(const std::string& name,
                                    const std::shared_ptr<CuckooFilter>& filter,
                                    std::function<void(absl::Status, uint64_t position)> done) {
  spdlog::info("filter {} expired at {}: dropping it", FilterRegistry::QuoteName(name),
               absl::FormatTime(absl::RFC3339_full, absl::FromUnixMillis(filter->expire_at()),
                                absl::UTCTimeZone()));
  if (cluster_ != nullptr) {
    // Any replica may publish it (each one's timer does): the drop names
    // the filter's id, so a second one applies to nothing (NOT_FOUND).
    cluster_->Publish(
        {EncodeDropEntry(filter->id(), name)}, "",
        [done = std::move(done)](Cluster::WriteResult r) { done(r.status, r.position); });
    return;
  }
  persistence_->DropAsync(
      name, std::weak_ptr<CuckooFilter>(filter),
      [this, name, done = std::move(done)](absl::StatusOr<std::shared_ptr<CuckooFilter>> dropped) {
        if (dropped.ok()) {
          spdlog::info("dropped expired filter {}: {} items, {} bytes freed",
                       FilterRegistry::QuoteName(name), (*dropped)->items(),
                       (*dropped)->memory_bytes());
          dropped->reset();
        }
        done(dropped.status(), AppliedPosition());
      });
}

size_t FilterServiceImpl::DropExpiredNow() {
  if (!accepting_.load(std::memory_order_acquire)) return 0;
  if (cluster_ != nullptr && !cluster_->CheckServing().ok()) return 0;
  size_t started = 0;
  for (auto& [name, filter] : registry_->List()) {
    if (!registry_->Expired(*filter)) continue;
    const uint64_t id = filter->id();
    {
      MutexLock lock(&expiry_mu_);
      if (!expiring_.insert(id).second) continue;  // Its drop is under way.
    }
    ++started;
    DropExpired(name, filter, [this, id, name = name](absl::Status s, uint64_t) {
      {
        MutexLock lock(&expiry_mu_);
        expiring_.erase(id);
      }
      // NOT_FOUND: dropped already (by a client, another replica's timer
      // or a CreateFilter of the name). Other errors: the next check tries
      // again.
      if (!s.ok() && !absl::IsNotFound(s)) {
        spdlog::warn("expired filter {} not dropped yet (retried): {}",
                     FilterRegistry::QuoteName(name), s.ToString());
      }
    });
  }
  return started;
}

void FilterServiceImpl::StartExpiry() {
  if (expiry_check_ != 0) return;
  expiry_check_ = expiry_timer_.Add([this](IdleSweeper::Clock::time_point) {
    (void)Guarded([&] {
      DropExpiredNow();
      return absl::OkStatus();
    });
  });
}

void FilterServiceImpl::StopExpiry() { expiry_timer_.Remove(std::exchange(expiry_check_, 0)); }

absl::Status FilterServiceImpl::DoSetFilterExpiry(const v1::SetFilterExpiryRequest& req,
                                                  v1::SetFilterExpiryResponse* resp,
                                                  CallReactor* reactor, Next* next) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kSetFilterExpiry, req.name(), reactor->ctx());
      !a.ok()) {
    return a;
  }
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
  reactor->MarkAudited(req.name());
  int64_t at = 0;
  if (req.has_expire_at()) {
    absl::StatusOr<int64_t> ms = ExpireAtMillis(req.expire_at(), "expire_at");
    if (!ms.ok()) return ms.status();
    at = *ms;
  }
  using Condition = v1::SetFilterExpiryRequest;
  if (!v1::SetFilterExpiryRequest::Condition_IsValid(req.condition())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("condition %d is not one this server knows", req.condition()));
  }
  if (at == 0 && req.condition() != Condition::ALWAYS) {
    return absl::InvalidArgumentError(
        "a condition other than ALWAYS needs expire_at (clearing an expiry has none)");
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> found = FindFilter(req.name());
  if (!found.ok()) return found.status();
  const std::shared_ptr<CuckooFilter>& filter = *found;
  // Whether the change applies to an expiry of `current` (Redis 7's NX,
  // XX, GT, LT: no expiry counts as infinitely late).
  auto applies = [at, condition = req.condition()](int64_t current) {
    if (at == 0) return current != 0;  // Clearing: only an expiry there is.
    switch (condition) {
      case Condition::IF_NONE:
        return current == 0;
      case Condition::IF_SET:
        return current != 0;
      case Condition::IF_LATER:
        return current != 0 && at > current;
      case Condition::IF_EARLIER:
        return current == 0 || at < current;
      default:
        return true;
    }
  };
  auto unchanged = [&] {
    resp->set_changed(false);
    if (filter->expire_at() != 0) SetExpireAt(filter->expire_at(), resp->mutable_expire_at());
    resp->set_log_position(AppliedPosition());
    return absl::OkStatus();
  };
  if (!applies(filter->expire_at())) return unchanged();
  if (at != 0 && at <= registry_->NowMs()) {
    // A time not in the future deletes the key now, as Redis's does.
    next->answered = true;
    DropExpired(req.name(), filter, [reactor, resp](absl::Status s, uint64_t position) {
      if (s.ok()) {
        resp->set_changed(true);
        resp->set_dropped(true);
        resp->set_log_position(position);
      }
      reactor->Done(ToGrpcStatus(s));
    });
    return absl::OkStatus();
  }
  if (cluster_ != nullptr) {
    // The condition is checked here, against this replica's state: a
    // change made at the same time through another replica may come first
    // in the log (docs/CLUSTER.md).
    next->answered = true;
    cluster_->Publish({EncodeSetExpiryEntry(filter->id(), req.name(), at)}, "",
                      [reactor, resp, at](Cluster::WriteResult r) {
                        if (r.status.ok()) {
                          resp->set_changed(true);
                          if (at != 0) SetExpireAt(at, resp->mutable_expire_at());
                          resp->set_log_position(r.position);
                        }
                        reactor->Done(ToGrpcStatus(r.status));
                      });
    return absl::OkStatus();
  }
  bool changed = false;
  absl::StatusOr<uint64_t> lsn = persistence_->LogExpiry(*filter, at, applies, &changed);
  if (!lsn.ok()) return lsn.status();
  if (!changed) return unchanged();
  resp->set_changed(true);
  if (at != 0) SetExpireAt(at, resp->mutable_expire_at());
  resp->set_log_position(*lsn != 0 ? *lsn : AppliedPosition());
  next->durable_lsn = *lsn;
  spdlog::info("filter {}: {}", FilterRegistry::QuoteName(req.name()),
               at == 0 ? std::string("expiry cleared")
                       : absl::StrCat("expires at ",
                                      absl::FormatTime(absl::RFC3339_full, absl::FromUnixMillis(at),
                                                       absl::UTCTimeZone())));
  return absl::OkStatus();
}

}  // namespace cuckoo::server
