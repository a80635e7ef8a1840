// The commands on filters and the server: create, info, list, drop,
// server-info, snapshot and health.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/json.h"
#include "base/units.h"
#include "client/tools/cuckooctl/commands.h"
#include "client/tools/cuckooctl/output.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace cuckoo::ctl {

namespace v1 = ::cuckoo::v1;
namespace health = ::grpc::health::v1;

namespace {

// --ttl=DURATION (from now) or --expire-at=TIME / --at=TIME (RFC 3339) as a
// Timestamp; `at_flag` is the name of the absolute one.
std::optional<Failure> ParseExpiry(const CommandLine& cl, const char* at_flag,
                                   google::protobuf::Timestamp* out) {
  if (cl.Has("ttl") && cl.Has(at_flag)) {
    return UsageError(absl::StrFormat("give --ttl or --%s, not both", at_flag));
  }
  absl::Time t;
  if (cl.Has("ttl")) {
    std::optional<absl::Duration> d = ParseTimeout(*cl.Get("ttl"), /*allow_zero=*/false);
    if (!d.has_value()) {
      return UsageError(absl::StrFormat(
          "--ttl=\"%s\" is not a duration such as 48h, 90m or 3600 (seconds), more than 0",
          *cl.Get("ttl")));
    }
    t = absl::Now() + *d;
  } else {
    std::string err;
    if (!absl::ParseTime(absl::RFC3339_full, *cl.Get(at_flag), &t, &err)) {
      return UsageError(
          absl::StrFormat("--%s=\"%s\" is not an RFC 3339 time such as 2026-12-01T00:00:00Z",
                          at_flag, *cl.Get(at_flag)));
    }
  }
  const int64_t ms = absl::ToUnixMillis(t);
  out->set_seconds(ms >= 0 ? ms / 1000 : -1);
  out->set_nanos(ms >= 0 ? static_cast<int32_t>(ms % 1000) * 1'000'000 : 0);
  return std::nullopt;
}

}  // namespace

int RunCreate(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  if (!cl.Has("capacity")) {
    return Fail(UsageError("create needs --capacity=N, the number of keys the filter must hold"));
  }
  if (cl.Has("fpr") && cl.Has("fingerprint-bits")) {
    return Fail(UsageError("give --fpr or --fingerprint-bits, not both"));
  }
  v1::CreateFilterRequest req;
  req.set_name(cl.positional[1]);
  uint64_t v = 0;
  if (auto f = ParseUintFlag(cl, "capacity", UINT64_MAX, v)) return Fail(*f);
  req.set_capacity(v);
  if (cl.Has("fpr")) {
    double rate = 0;
    if (!ParseNumber(std::string_view(*cl.Get("fpr")), rate) || !std::isfinite(rate)) {
      return Fail(UsageError(
          absl::StrFormat("--fpr=\"%s\" is not a rate such as 0.001 or 1e-4", *cl.Get("fpr"))));
    }
    req.set_false_positive_rate(rate);
  }
  struct U32Flag {
    const char* name;
    void (v1::CreateFilterRequest::*set)(uint32_t);
  };
  static constexpr U32Flag kU32Flags[] = {
      {"fingerprint-bits", &v1::CreateFilterRequest::set_fingerprint_bits},
      {"bucket-size", &v1::CreateFilterRequest::set_bucket_size},
      {"shards", &v1::CreateFilterRequest::set_shards},
      {"max-kicks", &v1::CreateFilterRequest::set_max_kicks},
      {"growth-factor", &v1::CreateFilterRequest::set_growth_factor},
  };
  for (const U32Flag& flag : kU32Flags) {
    if (!cl.Has(flag.name)) continue;
    if (auto f = ParseUintFlag(cl, flag.name, UINT32_MAX, v)) return Fail(*f);
    (req.*flag.set)(static_cast<uint32_t>(v));
  }
  if (cl.Has("seed")) {
    if (auto f = ParseUintFlag(cl, "seed", UINT64_MAX, v)) return Fail(*f);
    req.set_seed(v);
  }
  if (cl.Has("max-capacity")) {
    if (!cl.Has("growth-factor")) {
      return Fail(UsageError(
          "--max-capacity needs --growth-factor: a fixed filter's capacity is its maximum"));
    }
    if (auto f = ParseUintFlag(cl, "max-capacity", UINT64_MAX, v)) return Fail(*f);
    req.set_max_capacity(v);
  }
  if (cl.Has("grow-on-repeats")) {
    if (!cl.Has("growth-factor")) {
      return Fail(
          UsageError("--grow-on-repeats needs --growth-factor: a fixed filter never grows"));
    }
    req.set_grow_on_repeats(cl.Bool("grow-on-repeats"));
  }
  if (cl.Has("semi-sort")) req.set_semi_sort(cl.Bool("semi-sort"));
  req.set_if_not_exists(cl.Bool("if-not-exists"));
  if (cl.Has("ttl") || cl.Has("expire-at")) {
    if (auto f = ParseExpiry(cl, "expire-at", req.mutable_expire_at())) return Fail(*f);
  }

  absl::StatusOr<v1::CreateFilterResponse> resp = g.client->CreateFilter(req);
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    return Emit(JsonObject()
                    .Bool("created", resp->created())
                    .Raw("filter", FilterInfoJson(resp->filter()))
                    .Done() +
                "\n");
  }
  TextFields t;
  t.Add("created", resp->created() ? "true" : "false (it existed with the same settings)");
  AddFilterInfoText(t, resp->filter());
  return Emit(t.Done());
}

int RunInfo(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  absl::StatusOr<v1::FilterInfo> info = g.client->GetFilter(cl.positional[1]);
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  if (g.json) return Emit(JsonObject().Raw("filter", FilterInfoJson(*info)).Done() + "\n");
  TextFields t;
  AddFilterInfoText(t, *info);
  return Emit(t.Done());
}

int RunList(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 0, "")) return Fail(*f);
  absl::StatusOr<std::vector<v1::FilterInfo>> filters = g.client->ListFilters();
  if (!filters.ok()) return Fail(ServerError(filters.status(), g.target));
  if (g.json) {
    std::string array = "[";
    for (size_t i = 0; i < filters->size(); ++i) {
      if (i > 0) array.push_back(',');
      array += FilterInfoJson((*filters)[i]);
    }
    array.push_back(']');
    return Emit(JsonObject().Raw("filters", array).Done() + "\n");
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "ITEMS", "CAPACITY", "REACHABLE", "LOAD",
                                                 "MEMORY", "F", "B", "TABLE", "SHARDS", "FPR"}};
  for (const v1::FilterInfo& f : *filters) {
    // REACHABLE: the keys the filter can hold once grown as far as it may
    // (max_capacity when set); a fixed filter's capacity.
    rows.push_back(
        {TerminalName(f.name()), absl::StrFormat("%u", f.items()),
         absl::StrFormat("%u", f.capacity()), absl::StrFormat("%u", f.reachable_capacity()),
         absl::StrFormat("%.2f%%", 100 * f.load_factor()), FormatByteSize(f.memory_bytes()),
         absl::StrFormat("%u", f.fingerprint_bits()), absl::StrFormat("%u", f.bucket_size()),
         f.semi_sort() ? "semi_sorted" : "packed", absl::StrFormat("%u", f.shards()),
         absl::StrFormat("%.3g", f.expected_false_positive_rate())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      text += row[c];
      if (c + 1 < row.size()) text.append(width[c] + 2 - row[c].size(), ' ');
    }
    text.push_back('\n');
  }
  return Emit(text);
}

int RunDrop(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  absl::StatusOr<uint64_t> freed = g.client->DropFilter(name);
  if (!freed.ok()) return Fail(ServerError(freed.status(), g.target));
  if (g.json) {
    return Emit(JsonObject().String("name", name).Uint("freed_bytes", *freed).Done() + "\n");
  }
  return Emit(
      absl::StrFormat("dropped %s: freed %u bytes (%s)\n", name, *freed, FormatByteSize(*freed)));
}

int RunRename(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 2, 2, "a filter NAME and its NEW_NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  const std::string& new_name = cl.positional[2];
  absl::StatusOr<v1::RenameFilterResponse> r =
      g.client->RenameFilter(name, new_name, cl.Bool("replace"));
  if (!r.ok()) return Fail(ServerError(r.status(), g.target));
  if (g.json) {
    return Emit(JsonObject()
                    .String("name", name)
                    .String("new_name", new_name)
                    .Bool("replaced", r->replaced())
                    .Uint("replaced_freed_bytes", r->replaced_freed_bytes())
                    .Uint("log_position", r->log_position())
                    .Done() +
                "\n");
  }
  if (r->replaced()) {
    return Emit(absl::StrFormat(
        "renamed %s to %s, replacing the filter %s had: freed %u bytes (%s)\n", name, new_name,
        new_name, r->replaced_freed_bytes(), FormatByteSize(r->replaced_freed_bytes())));
  }
  return Emit(absl::StrFormat("renamed %s to %s\n", name, new_name));
}

int RunServerInfo(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 0, "")) return Fail(*f);
  absl::StatusOr<v1::GetServerInfoResponse> info = g.client->ServerInfo();
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  const bool cluster = info->mode() == "cluster";
  const v1::ClusterInfo& c = info->cluster();
  if (g.json) {
    std::string cluster_json = "null";
    if (cluster) {
      cluster_json = JsonObject()
                         .String("replica_id", c.replica_id())
                         .String("nats_status", c.nats_status())
                         .String("nats_server", c.nats_server())
                         .String("stream", c.stream())
                         .Uint("stream_replicas", c.stream_replicas())
                         .Uint("stream_first_position", c.stream_first_position())
                         .Uint("stream_last_position", c.stream_last_position())
                         .Uint("lag", c.lag())
                         .Done();
    }
    return Emit(JsonObject()
                    .String("target", g.target)
                    .String("version", info->version())
                    .String("mode", info->mode())
                    .String("durability", info->durability())
                    .Double("wal_sync_interval_seconds", DurationSeconds(info->wal_sync_interval()))
                    .Uint("max_batch_keys", info->max_batch_keys())
                    .Uint("max_key_bytes", info->max_key_bytes())
                    .Uint("max_message_bytes", info->max_message_bytes())
                    .Uint("max_filters", info->max_filters())
                    .Uint("memory_budget_bytes", info->memory_budget_bytes())
                    .Uint("memory_used_bytes", info->memory_used_bytes())
                    .Uint("filters", info->filters())
                    .String("data_dir", info->data_dir())
                    .Double("snapshot_interval_seconds", DurationSeconds(info->snapshot_interval()))
                    .Uint("applied_log_position", info->applied_log_position())
                    .Double("dedup_window_seconds", DurationSeconds(info->dedup_window()))
                    .Raw("cluster", cluster_json)
                    .Done() +
                "\n");
  }
  auto bytes = [](uint64_t b) { return absl::StrFormat("%u (%s)", b, FormatByteSize(b)); };
  auto number = [](uint64_t n) { return absl::StrFormat("%u", n); };
  const bool no_snapshots =
      info->snapshot_interval().seconds() == 0 && info->snapshot_interval().nanos() == 0;
  TextFields t;
  t.Add("target", g.target)
      .Add("version", info->version())
      .Add("mode", info->mode())
      .Add("durability", info->durability() == "interval"
                             ? absl::StrFormat("interval (fdatasync every %s)",
                                               FormatDuration(info->wal_sync_interval()))
                             : info->durability())
      .Add("max_batch_keys", number(info->max_batch_keys()))
      .Add("max_key_bytes", number(info->max_key_bytes()))
      .Add("max_message_bytes", bytes(info->max_message_bytes()))
      .Add("max_filters", number(info->max_filters()))
      .Add("memory_budget_bytes", bytes(info->memory_budget_bytes()))
      .Add("memory_used_bytes", bytes(info->memory_used_bytes()))
      .Add("filters", number(info->filters()))
      .Add("data_dir", info->data_dir())
      .Add("snapshot_interval", no_snapshots ? "off (only on snapshot and at shutdown)"
                                             : FormatDuration(info->snapshot_interval()))
      .Add("applied_log_position", number(info->applied_log_position()))
      .Add("dedup_window", FormatDuration(info->dedup_window()));
  if (cluster) {
    t.Add("replica_id", c.replica_id())
        .Add("nats_status", c.nats_status())
        .Add("nats_server", c.nats_server())
        .Add("stream", c.stream())
        .Add("stream_replicas", number(c.stream_replicas()))
        .Add("stream_first_position", number(c.stream_first_position()))
        .Add("stream_last_position", number(c.stream_last_position()))
        .Add("lag", number(c.lag()));
  }
  return Emit(t.Done());
}

int RunSnapshot(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 1, "")) return Fail(*f);
  const std::string name = cl.positional.size() > 1 ? cl.positional[1] : "";
  absl::StatusOr<v1::SnapshotResponse> resp = g.client->Snapshot(
      name, cl.Bool("changed-only"), cl.Has("timeout") ? g.timeout : absl::Minutes(10));
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    std::string files = "[";
    for (const v1::SnapshotFile& f : resp->files()) {
      if (files.size() > 1) files.push_back(',');
      files += JsonObject()
                   .String("filter", f.filter())
                   .String("path", f.path())
                   .Uint("bytes", f.bytes())
                   .Uint("items", f.items())
                   .String("time", FormatTimestamp(f.time()))
                   .Double("seconds", DurationSeconds(f.duration()))
                   .Done();
    }
    files.push_back(']');
    std::string unchanged = "[";
    for (const std::string& u : resp->unchanged()) {
      if (unchanged.size() > 1) unchanged.push_back(',');
      unchanged += JsonString(u);
    }
    unchanged.push_back(']');
    return Emit(JsonObject()
                    .Raw("files", files)
                    .Raw("unchanged", unchanged)
                    .Uint("bytes", resp->bytes())
                    .Double("seconds", DurationSeconds(resp->duration()))
                    .Done() +
                "\n");
  }
  std::string text;
  for (const v1::SnapshotFile& f : resp->files()) {
    const double secs = DurationSeconds(f.duration());
    text += absl::StrFormat("%s: %u items, %s to %s in %.3fs (%.2f GB/s)\n", f.filter(), f.items(),
                            FormatByteSize(f.bytes()), f.path(), secs,
                            f.bytes() / 1e9 / std::max(secs, 1e-9));
  }
  for (const std::string& u : resp->unchanged()) {
    text += absl::StrFormat("%s: unchanged since its last snapshot\n", u);
  }
  text += absl::StrFormat("snapshot: %d files, %s in %.3fs\n", resp->files_size(),
                          FormatByteSize(resp->bytes()), DurationSeconds(resp->duration()));
  return Emit(text);
}

int RunHealth(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 1, "")) return Fail(*f);
  const std::string service = cl.positional.size() > 1 ? cl.positional[1] : "";
  // Through the client's channel (so a --target list works), but not retried:
  // a health check answers at once.
  std::unique_ptr<health::Health::Stub> stub = health::Health::NewStub(g.client->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + g.timeout));
  // The server answers health checks without a token; one does no harm.
  g.client->AddCallMetadata(ctx);
  health::HealthCheckRequest req;
  req.set_service(service);
  health::HealthCheckResponse resp;
  if (grpc::Status s = stub->Check(&ctx, req, &resp); !s.ok()) {
    return Fail(ServerError(client::FromGrpcStatus(s), g.target));
  }
  const std::string status = health::HealthCheckResponse::ServingStatus_Name(resp.status());
  const int code = resp.status() == health::HealthCheckResponse::SERVING ? kExitOk : kExitSomeKeys;
  if (cl.Bool("quiet")) return code;
  const int emitted =
      Emit(g.json ? JsonObject().String("service", service).String("status", status).Done() + "\n"
                  : status + "\n");
  return emitted != kExitOk ? emitted : code;
}

int RunExpire(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const int given = cl.Has("ttl") + cl.Has("at") + cl.Has("expire-at") + cl.Has("persist");
  if (given != 1) {
    return Fail(UsageError("expire needs one of --ttl=DURATION, --at=TIME or --persist"));
  }
  v1::SetFilterExpiryRequest req;
  req.set_name(cl.positional[1]);
  if (!cl.Has("persist")) {
    if (auto f =
            ParseExpiry(cl, cl.Has("expire-at") ? "expire-at" : "at", req.mutable_expire_at())) {
      return Fail(*f);
    }
  }
  absl::StatusOr<v1::SetFilterExpiryResponse> resp = g.client->SetFilterExpiry(req);
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  const std::string at = resp->has_expire_at() ? FormatTimestamp(resp->expire_at()) : std::string();
  if (g.json) {
    return Emit(JsonObject()
                    .String("name", req.name())
                    .Bool("changed", resp->changed())
                    .Bool("dropped", resp->dropped())
                    .Raw("expire_at", at.empty() ? "null" : JsonString(at))
                    .Done() +
                "\n");
  }
  if (resp->dropped()) {
    return Emit(absl::StrFormat("%s: the time is not in the future: dropped\n", req.name()));
  }
  if (at.empty()) {
    return Emit(absl::StrFormat("%s: %s\n", req.name(),
                                resp->changed() ? "expiry cleared" : "had no expiry"));
  }
  return Emit(absl::StrFormat("%s: expires at %s\n", req.name(), at));
}

}  // namespace cuckoo::ctl
