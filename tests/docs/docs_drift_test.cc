// Drift between the folder READMEs and the code: every metric family
// /metrics serves, every cuckood flag and every header of a folder with a
// file table must be in its README, and every metric and flag the README
// lists must exist. A failure names what is missing and the README to fix.
#include <fnmatch.h>
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/env.h"
#include "core/registry.h"
#include "server/cluster/cluster.h"
#include "server/config/config.h"
#include "server/metrics_collectors.h"
#include "server/observability/metrics.h"
#include "server/resp/commands/command_names.h"
#include "server/wal/wal.h"
#include "server/wal/wal_format.h"
#include "tests/util/read_lines.h"
#include "tests/util/temp_dir.h"

namespace cuckoo::server {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = CUCKOO_SOURCE_DIR;

// The first cell of a Markdown table row ("| `a`, `b` | ..." -> "`a`, `b`").
std::string FirstCell(const std::string& row) {
  const size_t end = row.find('|', 1);
  return row.substr(1, end == std::string::npos ? std::string::npos : end - 1);
}

// Every `backticked` token of `text`.
std::vector<std::string> Backticked(const std::string& text) {
  // Hand-split: std::regex trips g++ 12's -Wmaybe-uninitialized under ASan.
  std::vector<std::string> out;
  for (size_t open = text.find('`'); open != std::string::npos;) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    if (close > open + 1) out.push_back(text.substr(open + 1, close - open - 1));
    open = text.find('`', close + 1);
  }
  return out;
}

std::string Missing(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::vector<std::string> out;
  for (const std::string& x : a) {
    if (!b.contains(x)) out.push_back(x);
  }
  return absl::StrJoin(out, ", ");
}

// The metric families in server/README.md's metrics table: rows whose first
// cell is a backticked cuckood_* or process_* name.
std::set<std::string> DocumentedMetrics() {
  std::set<std::string> out;
  for (const std::string& line : ReadLines(kSourceDir / "server/README.md")) {
    if (line.rfind("| `", 0) != 0) continue;
    const std::vector<std::string> cell = Backticked(FirstCell(line));
    if (cell.size() == 1 &&
        (cell[0].rfind("cuckood_", 0) == 0 || cell[0].rfind("process_", 0) == 0)) {
      out.insert(cell[0]);
    }
  }
  return out;
}

// The families Metrics::Render serves with every optional part on: a filter,
// the Redis port, the write-ahead log, cluster mode and TLS, each part's
// collector registered as server.cc registers it.
std::set<std::string> ServedMetrics() {
  cuckoo::testing::TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  absl::StatusOr<WalScan> scan =
      ScanWal(PosixEnv(), wal_dir, [](const WalRecord&) { return absl::OkStatus(); });
  EXPECT_TRUE(scan.ok()) << scan.status();
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open({.dir = wal_dir}, *scan, 0);
  EXPECT_TRUE(wal.ok()) << wal.status();

  FilterRegistry registry;
  FilterOptions options;
  options.capacity = 1000;
  EXPECT_TRUE(registry.Create("f", options).ok());
  ClusterStatus cluster;
  cluster.nats_status = "connected";

  Metrics metrics;
  metrics.SetRedisCommands(kRedisCommandNames, kRedisCfCommands);
  metrics.RecordRedisConnection();
  metrics.AddCollector(MetricsSection::kCalls, [](MetricFamilies* out) {
    AppendCallsInFlight(0, out);
    AppendReadiness(true, out);
  });
  metrics.AddCollector(MetricsSection::kRedis,
                       [](MetricFamilies* out) { AppendRedisPortMetrics({}, out); });
  metrics.AddCollector(MetricsSection::kState, [&](MetricFamilies* out) {
    AppendFilterMetrics(registry, nullptr, out);
    AppendWalMetrics(**wal, out);
    AppendClusterMetrics(cluster, out);
  });
  metrics.AddCollector(MetricsSection::kSecurity,
                       [](MetricFamilies* out) { AppendTlsMetrics(1, out); });
  const std::string text = metrics.Render();
  std::set<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    out.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  EXPECT_GT(out.size(), 10u) << text;
  return out;
}

TEST(DocsDriftTest, EveryServedMetricIsInServerReadme) {
  const std::set<std::string> served = ServedMetrics();
  const std::set<std::string> documented = DocumentedMetrics();
  EXPECT_EQ(Missing(served, documented), "")
      << "metric families /metrics serves that server/README.md's metrics table does not list";
  EXPECT_EQ(Missing(documented, served), "")
      << "metric families server/README.md lists that /metrics does not serve";
}

// The flags cuckood defines (in server/ files), spelled with dashes.
std::set<std::string> ServerFlags() {
  std::set<std::string> out;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    const std::string file = flag->Filename();
    if (file.find("server/") == std::string::npos) continue;
    out.insert("--" + absl::StrReplaceAll(name, {{"_", "-"}}));
  }
  return out;
}

// The options `cuckood --help` lists (HelpText(): lines "  --name..."), which
// include those cuckood's own parser handles beside the flags (--flagfile,
// --help, --version).
std::set<std::string> HelpFlags() {
  std::set<std::string> out;
  std::istringstream in(cuckoo::server::HelpText());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  --", 0) != 0) continue;
    size_t end = line.find_first_of(" =[", 2);
    out.insert(line.substr(2, end == std::string::npos ? std::string::npos : end - 2));
  }
  return out;
}

// The flags in server/README.md's configuration table: rows whose first
// cell holds backticked `--flag`s.
std::set<std::string> DocumentedFlags() {
  std::set<std::string> out;
  for (const std::string& line : ReadLines(kSourceDir / "server/README.md")) {
    if (line.rfind("| `--", 0) != 0) continue;
    for (const std::string& token : Backticked(FirstCell(line))) {
      out.insert(absl::StrReplaceAll(token, {{"_", "-"}}));
    }
  }
  return out;
}

TEST(DocsDriftTest, EveryServerFlagIsInServerReadme) {
  std::set<std::string> flags = ServerFlags();
  ASSERT_GT(flags.size(), 10u) << "cuckood's flags were not found in the flag registry";
  const std::set<std::string> help = HelpFlags();
  EXPECT_EQ(Missing(flags, help), "") << "cuckood flags that `cuckood --help` does not list";
  flags.insert(help.begin(), help.end());
  const std::set<std::string> documented = DocumentedFlags();
  EXPECT_EQ(Missing(flags, documented), "")
      << "cuckood flags that server/README.md's configuration table does not list";
  EXPECT_EQ(Missing(documented, flags), "")
      << "flags server/README.md's configuration table lists that cuckood does not have";
}

// The options cuckoo-bench's --help text (kHelp in client/tools/cuckoo_bench/options.cc)
// lists: every --name in the option column of lines "  --...".
std::set<std::string> BenchHelpFlags() {
  std::set<std::string> out;
  bool in_help = false;
  for (const std::string& line : ReadLines(kSourceDir / "client/tools/cuckoo_bench/options.cc")) {
    if (line.find("kHelp[] = R\"(") != std::string::npos) in_help = true;
    if (!in_help) continue;
    if (line.rfind(")\";", 0) == 0) break;
    if (line.rfind("  --", 0) != 0) continue;
    const std::string column = line.substr(2, line.find("  ", 2) - 2);
    for (size_t at = column.find("--"); at != std::string::npos; at = column.find("--", at + 2)) {
      size_t end = at + 2;
      while (end < column.size() &&
             (std::isalnum(static_cast<unsigned char>(column[end])) || column[end] == '-')) {
        ++end;
      }
      out.insert(column.substr(at, end - at));
    }
  }
  return out;
}

TEST(DocsDriftTest, EveryLoadGeneratorFlagIsInLoadgenTable) {
  std::set<std::string> help = BenchHelpFlags();
  ASSERT_GT(help.size(), 20u) << "cuckoo-bench's help text was not found";
  help.erase("--help");
  std::set<std::string> documented;
  for (const std::string& line : ReadLines(kSourceDir / "bench/LOADGEN.md")) {
    if (line.rfind("| `--", 0) != 0) continue;
    for (const std::string& token : Backticked(FirstCell(line))) documented.insert(token);
  }
  EXPECT_EQ(Missing(help, documented), "")
      << "cuckoo-bench flags that bench/LOADGEN.md's flag table does not list";
  EXPECT_EQ(Missing(documented, help), "")
      << "flags bench/LOADGEN.md's flag table lists that cuckoo-bench --help does not";
}

// Folders whose README has a table of their files, and that README: every
// header of the folder must be named in one of its table rows, as `name.h`,
// `sub/name.h` (a subfolder's header in its parent's README) or a glob
// (`*_commands.h`).
struct FolderReadme {
  std::string folder;
  std::string readme;
};
const FolderReadme kFolders[] = {
    {"base", "base/README.md"},
    {"core", "core/README.md"},
    {"core/internal", "core/README.md"},
    {"server", "server/README.md"},
    {"server/config", "server/config/README.md"},
    {"server/wal", "server/wal/README.md"},
    {"server/storage", "server/storage/README.md"},
    {"server/cluster", "server/cluster/README.md"},
    {"server/security", "server/security/README.md"},
    {"server/observability", "server/observability/README.md"},
    {"server/service", "server/service/README.md"},
    {"server/resp", "server/resp/README.md"},
    {"server/resp/commands", "server/resp/commands/README.md"},
    {"client", "client/README.md"},
    {"client/tools/cuckooctl", "client/tools/cuckooctl/README.md"},
    {"client/tools/cuckoo_bench", "client/tools/cuckoo_bench/README.md"},
};

TEST(DocsDriftTest, EveryHeaderIsInItsFolderReadmeTable) {
  for (const FolderReadme& f : kFolders) {
    std::vector<std::string> tokens;
    for (const std::string& line : ReadLines(kSourceDir / f.readme)) {
      if (line.rfind('|', 0) != 0) continue;
      for (std::string& t : Backticked(line)) tokens.push_back(std::move(t));
    }
    const std::string prefix =
        fs::path(f.folder).lexically_relative(fs::path(f.readme).parent_path()).string();
    std::vector<std::string> missing;
    for (const fs::directory_entry& e : fs::directory_iterator(kSourceDir / f.folder)) {
      if (e.path().extension() != ".h") continue;
      const std::string name = e.path().filename().string();
      const std::string relative = prefix == "." ? name : prefix + "/" + name;
      bool found = false;
      for (const std::string& t : tokens) {
        if (fnmatch(t.c_str(), name.c_str(), 0) == 0 ||
            fnmatch(t.c_str(), relative.c_str(), 0) == 0) {
          found = true;
          break;
        }
      }
      if (!found) missing.push_back(f.folder + "/" + name);
    }
    std::sort(missing.begin(), missing.end());
    EXPECT_EQ(absl::StrJoin(missing, ", "), "")
        << "headers that no table row of " << f.readme << " names";
  }
}

}  // namespace
}  // namespace cuckoo::server
