// The end-to-end check of the log (docs/CLUSTER.md, "Checking the log end
// to end"): every replica keeps a running digest of the entries it applied,
//
//   digest(p) = XXH3-64 of (digest(p - 1), p, XXH3-64 of the entry's bytes),
//               three little-endian u64s
//
// with digest(0) = 0, publishes (position, digest) to the KV bucket
// "<stream>_digests", and compares its digests with the other replicas' at
// the same positions. Two replicas that applied the same entries at the same
// positions agree at every position; one that skipped an entry, applied one
// twice or applied another's (a NATS server whose copy of the stream
// diverged) disagrees from there on, at every later position.
//
//   DigestHistory history(kDigestHistoryPositions);
//   digest = NextLogDigest(digest, position, LogEntryHash(bytes));
//   history.Add(position, digest);
//   DigestReport me = history.Report(key, applied, digest);
//   Judgement j = JudgeDigests(history, me, peers);
//
// Thread safety: functions, and a DigestHistory is used by one thread at a
// time (Cluster holds it under its mutex).
#ifndef CUCKOO_SERVER_CLUSTER_LOG_DIGEST_H_
#define CUCKOO_SERVER_CLUSTER_LOG_DIGEST_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cuckoo::server {

// The digests a replica keeps of its own recent positions, one for each
// (8 bytes each: 512 KiB), to compare with what the others publish.
inline constexpr size_t kDigestHistoryPositions = size_t{1} << 16;
// Positions that are multiples of this are "marks": each replica publishes
// its last kDigestMarks of them, so that any two replicas can be compared
// at a position both passed, whoever reads their reports.
inline constexpr uint64_t kDigestMarkEvery = 64;
inline constexpr size_t kDigestMarks = 16;

// An entry's hash: XXH3-64 of its bytes as the stream holds them.
uint64_t LogEntryHash(absl::string_view entry);
// The digest after applying the entry hashed `entry_hash` at `position`,
// over `previous` (the digest at position - 1).
uint64_t NextLogDigest(uint64_t previous, uint64_t position, uint64_t entry_hash);

struct DigestPoint {
  uint64_t position = 0;
  uint64_t digest = 0;
  bool operator==(const DigestPoint&) const = default;
};

// What one replica publishes: its applied position and the digest there,
// and its last marks. `digest` is empty while the replica does not know
// it (it replays entries from before the position its checkpoint or its
// copy named: docs/CLUSTER.md).
struct DigestReport {
  std::string key;       // The replica's KV key (its --replica-id, escaped).
  std::string identity;  // The log's ("<stream>@<creation time>").
  uint64_t applied = 0;
  std::optional<uint64_t> digest;
  std::vector<DigestPoint> marks;  // Ascending.
  // The position from which its current consumer applies the stream.
  uint64_t consumer_from = 0;
  // It found itself diverged (and has not healed yet): it does not vote.
  bool diverged = false;

  // The positions whose digests this report gives: the marks and applied.
  std::vector<DigestPoint> Points() const;
};

// The KV value of a report ("cuckood-digest v1 identity=... applied=...
// digest=<16 hex>|none from=... marks=<p>:<hex>,... diverged=1"), and
// back.
// INVALID_ARGUMENT naming what is wrong for a value that is not one.
std::string FormatDigestReport(const DigestReport& report);
absl::StatusOr<DigestReport> ParseDigestReport(absl::string_view key, absl::string_view value);

// The last `capacity` positions' digests and entry hashes, contiguous.
class DigestHistory {
 public:
  explicit DigestHistory(size_t capacity = kDigestHistoryPositions);

  // Forgets everything (a copy from a peer replaced the state).
  void Clear();
  // `position` follows the last one added, or the history starts again
  // from it. `entry_hash` 0: the entry is not known (a digest taken from a
  // peer or started without one).
  void Add(uint64_t position, uint64_t digest, uint64_t entry_hash = 0);
  std::optional<uint64_t> At(uint64_t position) const;
  // The hash of the entry applied at `position`, when held and known.
  std::optional<uint64_t> EntryAt(uint64_t position) const;
  // Up to kDigestMarks of the last marks held, ascending.
  std::vector<DigestPoint> Marks() const;
  uint64_t first() const { return size_ == 0 ? 0 : last_ - size_ + 1; }
  uint64_t last() const { return last_; }

 private:
  std::vector<uint64_t> ring_;
  std::vector<uint64_t> entries_;
  uint64_t last_ = 0;
  size_t size_ = 0;
};

enum class DigestRelation { kUnknown, kAgree, kDisagree };

struct DigestComparison {
  DigestRelation relation = DigestRelation::kUnknown;
  uint64_t position = 0;  // Where they were compared: the highest position both give.
};

// Two reports at the highest position both give a digest for.
DigestComparison CompareReports(const DigestReport& a, const DigestReport& b);
// A peer's report against this replica's own history (every position it
// holds), and its marks.
DigestComparison CompareWithHistory(const DigestHistory& mine, const DigestReport& mine_report,
                                    const DigestReport& peer);

struct DigestJudgement {
  enum class State {
    // No disagreement with a majority; `verified` is the highest position at
    // which a majority of the replicas (this one included) agree with it.
    kAgreed,
    // This replica disagrees with a majority that agrees among itself: its
    // copy of the log is not the majority's from `at` (or earlier) on.
    kDiverged,
    // Replicas disagree and no side is a majority (two replicas, or three
    // of which one has not reported the position yet).
    kNoMajority,
  };
  State state = State::kAgreed;
  uint64_t verified = 0;
  uint64_t at = 0;  // kDiverged, kNoMajority: the position compared.
  // The replicas reporting with a digest, this one included.
  size_t voters = 1;
  // kDiverged: the majority's keys (the peers to copy from).
  std::vector<std::string> majority;
  // kDiverged, kNoMajority: who disagrees with whom, for the message.
  std::string detail;
};

// Judges this replica (its history and report) against its live peers'
// reports of the same log. Peers without a digest, or that found themselves
// diverged, do not vote. Alone (no peer voting), it agrees with itself up to
// its applied position.
DigestJudgement JudgeDigests(const DigestHistory& mine, const DigestReport& mine_report,
                             const std::vector<DigestReport>& peers);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_LOG_DIGEST_H_
