// The key commands: insert, lookup, delete and count. Keys are read, sent
// and printed in chunks, each chunk sent while the next one is read (see
// key_input.h), one line or JSON object per key on stdout and a summary at
// the end.
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "client/tools/cuckooctl/commands.h"
#include "client/tools/cuckooctl/key_input.h"
#include "client/tools/cuckooctl/output.h"

namespace cuckoo::ctl {
namespace {

namespace v1 = ::cuckoo::v1;

constexpr auto kProgressInterval = std::chrono::milliseconds(500);

// What one key command does and how its per-key outcomes are named.
struct KeyOp {
  const char* command;
  const char* progress_verb;
  // Outcome names; index = outcome code. count has none: its code is the count.
  std::vector<const char*> outcomes;
  // Outcomes that make the exit code 1 (count: a count of 0).
  std::vector<bool> bad;
};

// Sends one chunk, writes with `request_id` (empty: the client's random one);
// returns an outcome code per key.
using SendFn = std::function<absl::StatusOr<std::vector<uint32_t>>(
    absl::Span<const std::string_view>, const std::string& request_id)>;

class Progress {
 public:
  Progress(bool enabled, bool forced, const char* verb)
      : enabled_(enabled), forced_(forced), tty_(isatty(STDERR_FILENO)), verb_(verb) {
    start_ = last_ = std::chrono::steady_clock::now();
  }
  void Update(uint64_t keys) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < kProgressInterval) return;
    last_ = now;
    Print(keys, now);
    printed_ = true;
  }
  void Finish(uint64_t keys) {
    if (!enabled_ || !(printed_ || forced_)) return;
    Print(keys, std::chrono::steady_clock::now());
    fputc('\n', stderr);
    fflush(stderr);
  }

 private:
  void Print(uint64_t keys, std::chrono::steady_clock::time_point now) {
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(keys) / seconds : 0;
    absl::FPrintF(stderr, "\r%s %u keys (%.0f keys/s)%s", verb_, keys, rate, tty_ ? "\x1b[K" : "");
    fflush(stderr);
  }

  bool enabled_, forced_, tty_;
  const char* verb_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

// Adds where an error happened when keys before it were already processed.
absl::Status InBatch(const absl::Status& s, const Chunk& chunk) {
  if (chunk.first == 0) return s;
  const std::string where = chunk.size() == 1 ? absl::StrFormat("input key %u", chunk.first + 1)
                                              : absl::StrFormat("input keys %u-%u", chunk.first + 1,
                                                                chunk.first + chunk.size());
  const std::string before =
      chunk.first == 1 ? std::string("the key before was processed")
                       : absl::StrFormat("the %u keys before were processed", chunk.first);
  return absl::Status(s.code(), absl::StrFormat("%s (in %s; %s)", s.message(), where, before));
}

// --request-id, checked; empty when not given.
std::optional<Failure> ParseRequestId(const CommandLine& cl, std::string& request_id) {
  request_id = cl.Get("request-id").value_or("");
  if (!cl.Has("request-id")) return std::nullopt;
  // Room for the suffixes of later batches and of split ones (see --help).
  constexpr size_t kMaxRequestId = 100;
  const bool printable = std::all_of(request_id.begin(), request_id.end(),
                                     [](char c) { return c >= '!' && c <= '~'; });
  if (request_id.empty() || request_id.size() > kMaxRequestId || !printable) {
    return UsageError(
        absl::StrFormat("--request-id=\"%s\" must be 1 to %u characters from ! to ~ (no spaces)",
                        absl::CHexEscape(request_id), kMaxRequestId));
  }
  return std::nullopt;
}

KeyOp KeyOpOf(Command cmd) {
  switch (cmd) {
    case kInsert:
      return {"insert", "inserted", {"inserted", "already_present", "full"}, {false, false, true}};
    case kLookup:
      return {"lookup", "looked up", {"present", "absent"}, {false, true}};
    case kDelete:
      return {"delete", "deleted", {"deleted", "not_found"}, {false, true}};
    default:  // kCount
      return {"count", "counted", {}, {}};
  }
}

// The client call of `cmd` on filter `name`, its results as KeyOpOf(cmd)'s
// outcome codes.
SendFn SenderOf(Command cmd, client::Client* client, const std::string& name, bool if_absent) {
  switch (cmd) {
    case kInsert:
      return [client, name, if_absent](
                 absl::Span<const std::string_view> keys,
                 const std::string& id) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Insert(name, keys, if_absent, id);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) {
          switch ((*r)[i]) {
            case v1::INSERT_RESULT_INSERTED:
              out[i] = 0;
              break;
            case v1::INSERT_RESULT_ALREADY_PRESENT:
              out[i] = 1;
              break;
            case v1::INSERT_RESULT_FULL:
              out[i] = 2;
              break;
            default:
              return absl::InternalError(absl::StrFormat("the server returned insert result %d",
                                                         static_cast<int>((*r)[i])));
          }
        }
        return out;
      };
    case kLookup:
      return [client, name](absl::Span<const std::string_view> keys,
                            const std::string&) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Lookup(name, keys);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) out[i] = (*r)[i] ? 0 : 1;
        return out;
      };
    case kDelete:
      return [client, name](absl::Span<const std::string_view> keys,
                            const std::string& id) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Delete(name, keys, id);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) {
          switch ((*r)[i]) {
            case v1::DELETE_RESULT_DELETED:
              out[i] = 0;
              break;
            case v1::DELETE_RESULT_NOT_FOUND:
              out[i] = 1;
              break;
            default:
              return absl::InternalError(absl::StrFormat("the server returned delete result %d",
                                                         static_cast<int>((*r)[i])));
          }
        }
        return out;
      };
    default:  // kCount
      return [client, name](absl::Span<const std::string_view> keys,
                            const std::string&) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Count(name, keys);
        if (!r.ok()) return r.status();
        return *std::move(r);
      };
  }
}

// One run of a key command: what it does, where its results go, and what
// they were so far.
struct KeyRun {
  const GlobalOptions& g;
  std::string name;
  KeyOp op;
  SendFn send;
  bool quiet;
  Progress progress;
  Output out;
  // Per outcome code (count: [0] = present, [1] = absent).
  std::vector<uint64_t> tally;
  uint64_t total_copies = 0;
  uint64_t done_keys = 0;

  bool is_count() const { return op.outcomes.empty(); }
};

// Tallies one chunk's results; its lines for stdout (none with --quiet).
std::string ChunkLines(KeyRun& run, const Chunk& chunk, const std::vector<uint32_t>& results) {
  const bool is_count = run.is_count();
  std::string text;
  for (size_t i = 0; i < chunk.size(); ++i) {
    const uint32_t code = results[i];
    const std::string_view key = chunk.keys[i];
    if (is_count) {
      ++run.tally[code == 0 ? 1 : 0];
      run.total_copies += code;
    } else {
      ++run.tally[code];
    }
    if (run.quiet) continue;
    if (run.g.json) {
      JsonObject o;
      o.Bytes("key", key);
      if (is_count) {
        o.Uint("count", code);
      } else {
        o.String("result", run.op.outcomes[code]);
      }
      text += o.Done();
    } else {
      text += is_count ? absl::StrFormat("%u", code) : run.op.outcomes[code];
      text.push_back('\t');
      text += key;
    }
    text.push_back('\n');
  }
  return text;
}

// Sends every chunk of `source`, each while the next one is read, and
// writes each one's results as soon as they arrive. Stops at the first
// failure, of the server or of the input.
std::optional<Failure> StreamKeys(KeyRun& run, KeySource& source, const std::string& request_id) {
  uint64_t chunks = 0;
  Chunk current, next;
  if (absl::Status s = source.Next(current, /*may_block=*/true); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  while (current.size() > 0) {
    current.Seal();  // Here, not when filled: swapping moved the bytes (small strings inline).
    // Send this chunk while the next one is read.
    // --request-id for the first chunk, ID/k for the k-th after it.
    const std::string chunk_id = request_id.empty() || chunks == 0
                                     ? request_id
                                     : absl::StrFormat("%s/%u", request_id, chunks);
    ++chunks;
    std::future<absl::StatusOr<std::vector<uint32_t>>> pending =
        std::async(std::launch::async, [&] { return run.send(current.keys, chunk_id); });
    absl::Status read_status = source.Next(next, /*may_block=*/false);
    absl::StatusOr<std::vector<uint32_t>> results = pending.get();
    if (!results.ok()) {
      run.out.Flush();
      run.progress.Finish(run.done_keys);
      return ServerError(InBatch(results.status(), current), run.g.target);
    }
    run.out.Write(ChunkLines(run, current, *results));
    run.out.Flush();  // A consumer of a slow stream sees each batch as it is answered.
    run.done_keys += current.size();
    run.progress.Update(run.done_keys);
    if (!read_status.ok()) {
      run.progress.Finish(run.done_keys);
      return UsageError(std::string(read_status.message()));
    }
    if (next.size() == 0 && !source.done()) {
      if (absl::Status s = source.Next(next, /*may_block=*/true); !s.ok()) {
        run.progress.Finish(run.done_keys);
        return UsageError(std::string(s.message()));
      }
    }
    std::swap(current, next);
  }
  run.progress.Finish(run.done_keys);
  return std::nullopt;
}

// Writes the summary (stderr, or stdout with --quiet or --format=json);
// the exit code: 1 if any key had the other outcome.
int Summarize(KeyRun& run) {
  const bool is_count = run.is_count();
  const std::vector<uint64_t>& tally = run.tally;
  const uint64_t log_position = run.g.client->last_log_position();
  bool any_bad = false;
  if (is_count) {
    any_bad = tally[1] > 0;
  } else {
    for (size_t i = 0; i < tally.size(); ++i) any_bad |= run.op.bad[i] && tally[i] > 0;
  }
  if (run.g.json) {
    JsonObject summary;
    summary.String("command", run.op.command)
        .String("filter", run.name)
        .Uint("keys", run.done_keys);
    if (is_count) {
      summary.Uint("present", tally[0])
          .Uint("absent", tally[1])
          .Uint("total_count", run.total_copies);
    } else {
      for (size_t i = 0; i < tally.size(); ++i) summary.Uint(run.op.outcomes[i], tally[i]);
    }
    summary.Uint("log_position", log_position);
    run.out.Write(JsonObject().Raw("summary", summary.Done()).Done() + "\n");
  } else {
    std::string line = absl::StrFormat("%s %s: %u %s:", run.op.command, run.name, run.done_keys,
                                       run.done_keys == 1 ? "key" : "keys");
    if (is_count) {
      line += absl::StrFormat(" %u present, %u absent, total count %u", tally[0], tally[1],
                              run.total_copies);
    } else {
      for (size_t i = 0; i < tally.size(); ++i) {
        line += absl::StrFormat("%s %u %s", i == 0 ? "" : ",", tally[i], run.op.outcomes[i]);
      }
    }
    line += absl::StrFormat("; log position %u\n", log_position);
    if (run.quiet) {
      run.out.Write(line);
    } else {
      run.out.Flush();
      fputs(line.c_str(), stderr);
    }
  }
  if (std::optional<Failure> f = run.out.Check()) return Fail(*f);
  return any_bad ? kExitSomeKeys : kExitOk;
}

}  // namespace

int RunKeyCommand(const GlobalOptions& g, const CommandLine& cl, Command cmd) {
  // Arguments and input first: local problems are found before the server is asked.
  if (cl.positional.size() < 2) {
    return Fail(UsageError(absl::StrFormat("%s needs a filter NAME (see cuckooctl %s --help)",
                                           cl.positional[0], cl.positional[0])));
  }
  const std::string name = cl.positional[1];
  std::unique_ptr<KeySource> source;
  bool from_args = false;
  if (std::optional<Failure> f = OpenKeySource(cl, source, from_args)) return Fail(*f);
  const bool quiet = cl.Bool("quiet");
  std::string request_id;
  if (std::optional<Failure> f = ParseRequestId(cl, request_id)) return Fail(*f);

  // Fails fast on an unknown filter or bad name, even with no keys or a slow stdin.
  if (absl::StatusOr<v1::FilterInfo> info = g.client->GetFilter(name); !info.ok()) {
    return Fail(ServerError(info.status(), g.target));
  }

  const KeyOp op = KeyOpOf(cmd);
  const bool progress_forced = cl.Bool("progress");
  const bool progress_auto = !cl.Has("progress") && !cl.Bool("no-progress") && !from_args &&
                             isatty(STDERR_FILENO) && (quiet || !isatty(STDOUT_FILENO));
  KeyRun run{
      .g = g,
      .name = name,
      .op = op,
      .send = SenderOf(cmd, g.client.get(), name, cl.Bool("if-absent")),
      .quiet = quiet,
      .progress = Progress(progress_forced || progress_auto, progress_forced, op.progress_verb),
      .tally = std::vector<uint64_t>(op.outcomes.empty() ? 2 : op.outcomes.size(), 0)};
  if (std::optional<Failure> f = StreamKeys(run, *source, request_id)) return Fail(*f);
  return Summarize(run);
}

}  // namespace cuckoo::ctl
