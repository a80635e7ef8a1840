#include "server/cluster/log_digest.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/little_endian.h"
#include "xxhash.h"

namespace cuckoo::server {

uint64_t LogEntryHash(absl::string_view entry) { return XXH3_64bits(entry.data(), entry.size()); }

uint64_t NextLogDigest(uint64_t previous, uint64_t position, uint64_t entry_hash) {
  uint8_t block[24];
  Put64(block, previous);
  Put64(block + 8, position);
  Put64(block + 16, entry_hash);
  return XXH3_64bits(block, sizeof(block));
}

std::vector<DigestPoint> DigestReport::Points() const {
  std::vector<DigestPoint> points = marks;
  if (digest.has_value() && (points.empty() || points.back().position < applied)) {
    points.push_back({applied, *digest});
  }
  return points;
}

namespace {

constexpr absl::string_view kReportMagic = "cuckood-digest v1";

bool ParseHex64(absl::string_view text, uint64_t* out) {
  return text.size() == 16 && absl::SimpleHexAtoi(text, out);
}

}  // namespace

std::string FormatDigestReport(const DigestReport& r) {
  std::string out = absl::StrFormat(
      "%s identity=%s applied=%u digest=%s from=%u marks=", kReportMagic, r.identity, r.applied,
      r.digest.has_value() ? absl::StrFormat("%016x", *r.digest) : std::string("none"),
      r.consumer_from);
  absl::StrAppend(&out, absl::StrJoin(r.marks, ",", [](std::string* s, const DigestPoint& p) {
    absl::StrAppendFormat(s, "%u:%016x", p.position, p.digest);
  }));
  if (r.diverged) absl::StrAppend(&out, " diverged=1");
  return out;
}

absl::StatusOr<DigestReport> ParseDigestReport(absl::string_view key, absl::string_view value) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "digest record \"%s\" is not one (%s): \"%s\"", key, what, absl::CHexEscape(value)));
  };
  if (!absl::ConsumePrefix(&value, kReportMagic) || !absl::ConsumePrefix(&value, " ")) {
    return bad("no \"cuckood-digest v1\"");
  }
  DigestReport r;
  r.key = std::string(key);
  bool applied = false, digest = false;
  for (absl::string_view field : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&field, "identity=")) {
      r.identity = std::string(field);
    } else if (absl::ConsumePrefix(&field, "applied=")) {
      if (!absl::SimpleAtoi(field, &r.applied)) return bad("applied");
      applied = true;
    } else if (absl::ConsumePrefix(&field, "digest=")) {
      if (field != "none") {
        uint64_t d = 0;
        if (!ParseHex64(field, &d)) return bad("digest");
        r.digest = d;
      }
      digest = true;
    } else if (absl::ConsumePrefix(&field, "from=")) {
      if (!absl::SimpleAtoi(field, &r.consumer_from)) return bad("from");
    } else if (absl::ConsumePrefix(&field, "marks=")) {
      for (absl::string_view m : absl::StrSplit(field, ',', absl::SkipEmpty())) {
        std::pair<absl::string_view, absl::string_view> pd = absl::StrSplit(m, ':');
        DigestPoint p;
        if (!absl::SimpleAtoi(pd.first, &p.position) || !ParseHex64(pd.second, &p.digest) ||
            (!r.marks.empty() && r.marks.back().position >= p.position)) {
          return bad("marks");
        }
        r.marks.push_back(p);
      }
      if (r.marks.size() > kDigestMarks) return bad("too many marks");
    } else if (absl::ConsumePrefix(&field, "diverged=")) {
      r.diverged = field == "1";
    }
    // Other fields: a later version's, ignored.
  }
  if (!applied || !digest || r.identity.empty()) return bad("identity, applied or digest missing");
  return r;
}

DigestHistory::DigestHistory(size_t capacity)
    : ring_(std::max<size_t>(capacity, 1)), entries_(ring_.size()) {}

void DigestHistory::Clear() {
  size_ = 0;
  last_ = 0;
}

void DigestHistory::Add(uint64_t position, uint64_t digest, uint64_t entry_hash) {
  if (size_ == 0 || position != last_ + 1) size_ = 0;
  last_ = position;
  ring_[position % ring_.size()] = digest;
  entries_[position % entries_.size()] = entry_hash;
  size_ = std::min(size_ + 1, ring_.size());
}

std::optional<uint64_t> DigestHistory::At(uint64_t position) const {
  if (size_ == 0 || position > last_ || position < first()) return std::nullopt;
  return ring_[position % ring_.size()];
}

std::optional<uint64_t> DigestHistory::EntryAt(uint64_t position) const {
  if (size_ == 0 || position > last_ || position < first()) return std::nullopt;
  const uint64_t h = entries_[position % entries_.size()];
  if (h == 0) return std::nullopt;
  return h;
}

std::vector<DigestPoint> DigestHistory::Marks() const {
  std::vector<DigestPoint> out;
  if (size_ == 0) return out;
  uint64_t p = last_ - last_ % kDigestMarkEvery;
  while (out.size() < kDigestMarks && p >= first() && p > 0) {
    out.push_back({p, ring_[p % ring_.size()]});
    if (p < kDigestMarkEvery) break;
    p -= kDigestMarkEvery;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

namespace {

DigestComparison Compared(uint64_t position, uint64_t a, uint64_t b) {
  return {a == b ? DigestRelation::kAgree : DigestRelation::kDisagree, position};
}

}  // namespace

DigestComparison CompareReports(const DigestReport& a, const DigestReport& b) {
  std::map<uint64_t, uint64_t> at;
  for (const DigestPoint& p : a.Points()) at[p.position] = p.digest;
  const std::vector<DigestPoint> points = b.Points();
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (auto it = at.find(p->position); it != at.end()) {
      return Compared(p->position, it->second, p->digest);
    }
  }
  return {};
}

DigestComparison CompareWithHistory(const DigestHistory& mine, const DigestReport& mine_report,
                                    const DigestReport& peer) {
  const std::vector<DigestPoint> points = peer.Points();
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (std::optional<uint64_t> d = mine.At(p->position); d.has_value()) {
      return Compared(p->position, *d, p->digest);
    }
  }
  return CompareReports(mine_report, peer);
}

DigestJudgement JudgeDigests(const DigestHistory& mine, const DigestReport& mine_report,
                             const std::vector<DigestReport>& peers) {
  DigestJudgement j;
  std::vector<const DigestReport*> voters;
  for (const DigestReport& p : peers) {
    if (p.digest.has_value() && !p.diverged && p.identity == mine_report.identity &&
        p.key != mine_report.key) {
      voters.push_back(&p);
    }
  }
  j.voters = voters.size() + 1;
  if (!mine_report.digest.has_value()) return j;  // Nothing to compare yet: verified 0.
  if (voters.empty()) {
    j.verified = mine_report.applied;
    return j;
  }
  const size_t need = j.voters / 2 + 1;  // A majority, this replica included.
  std::vector<DigestComparison> with_me;
  std::vector<uint64_t> agreed_at;
  std::vector<size_t> disagreeing;
  for (size_t i = 0; i < voters.size(); ++i) {
    with_me.push_back(CompareWithHistory(mine, mine_report, *voters[i]));
    if (with_me.back().relation == DigestRelation::kAgree) {
      agreed_at.push_back(with_me.back().position);
    } else if (with_me.back().relation == DigestRelation::kDisagree) {
      disagreeing.push_back(i);
    }
  }
  // A peer that agrees at p agrees at every earlier position (the digests
  // chain): a majority agrees up to the (need - 1)-th highest of them.
  std::sort(agreed_at.rbegin(), agreed_at.rend());
  if (agreed_at.size() >= need - 1)
    j.verified = need == 1 ? mine_report.applied : agreed_at[need - 2];
  if (disagreeing.empty() || agreed_at.size() + 1 >= need) return j;

  auto describe = [&](std::vector<std::string> agree, size_t d) {
    return absl::StrFormat("replicas %s disagree with %s at position %u",
                           absl::StrJoin(agree, ", "), voters[d]->key, with_me[d].position);
  };
  for (size_t d : disagreeing) {
    std::vector<std::string> group = {voters[d]->key};
    for (size_t e = 0; e < voters.size(); ++e) {
      if (e == d || with_me[e].relation == DigestRelation::kAgree) continue;
      if (CompareReports(*voters[d], *voters[e]).relation == DigestRelation::kAgree) {
        group.push_back(voters[e]->key);
      }
    }
    if (group.size() >= need) {
      j.state = DigestJudgement::State::kDiverged;
      j.at = with_me[d].position;
      j.detail = absl::StrFormat(
          "this replica's digest at position %u differs from that of %s (%u of %u replicas "
          "reporting)",
          j.at, absl::StrJoin(group, ", "), group.size(), j.voters);
      j.majority = std::move(group);
      return j;
    }
  }
  j.state = DigestJudgement::State::kNoMajority;
  j.at = with_me[disagreeing.front()].position;
  std::vector<std::string> mine_side = {mine_report.key};
  for (size_t i = 0; i < voters.size(); ++i) {
    if (with_me[i].relation == DigestRelation::kAgree) mine_side.push_back(voters[i]->key);
  }
  j.detail = absl::StrFormat("%s; no side is a majority of the %u replicas reporting",
                             describe(mine_side, disagreeing.front()), j.voters);
  return j;
}

}  // namespace cuckoo::server
