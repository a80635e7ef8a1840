// The folders' dependencies: every `#include "..."` of base/, core/, server/
// and client/ against the table in server/README.md ("Which folder may use
// which"), and the table itself free of cycles; a folder's internal/
// headers are its own. A folder is a CMake library,
// so an include the table does not allow is a dependency nobody decided,
// and a cycle is two libraries that cannot be built or understood apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/util/read_lines.h"

namespace cuckoo {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = CUCKOO_SOURCE_DIR;
// The top-level folders whose code the table governs.
const char* const kGoverned[] = {"base", "core", "server", "client"};

using Graph = std::map<std::string, std::set<std::string>>;

// The rows of the table under "### Which folder may use which": "| `a` |
// `b` `c` |" -> a: {b, c}.
Graph ReadAllowed(const std::vector<std::string>& lines) {
  Graph graph;
  bool in_section = false;
  for (const std::string& line : lines) {
    if (absl::StartsWith(line, "#")) {
      in_section = absl::StrContains(line, "Which folder may use which");
      continue;
    }
    if (!in_section || !absl::StartsWith(line, "| `")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 3) continue;
    std::vector<std::string> names;
    for (absl::string_view part : absl::StrSplit(cells[1], '`', absl::SkipWhitespace())) {
      names.emplace_back(part);
    }
    if (names.size() != 1) continue;
    std::set<std::string>& uses = graph[names[0]];
    for (absl::string_view part : absl::StrSplit(cells[2], '`', absl::SkipWhitespace())) {
      uses.emplace(part);
    }
  }
  return graph;
}

// The folder a file's folder belongs to: itself, or for an `internal/`
// folder the folder that holds it ("core/internal" -> "core"), which is
// one library with it.
std::string Owner(std::string folder) {
  if (absl::EndsWith(folder, "/internal")) folder.resize(folder.size() - strlen("/internal"));
  return folder;
}

// The project folder a quoted include names ("server/wal/wal.h" ->
// "server/wal"), or "" for a header from elsewhere (generated code,
// third-party libraries).
std::string FolderOf(absl::string_view include) {
  bool governed = false;
  for (const char* top : kGoverned) {
    if (absl::StartsWith(include, absl::StrCat(top, "/"))) governed = true;
  }
  if (!governed) return "";
  return fs::path(std::string(include)).parent_path().string();
}

// Every include of `text` (a file in `folder`) that `allowed` does not
// allow, as "file:line: includes X, from folder F, which F may not use".
// A header in a folder's `internal/` folder is for that folder's own code
// (and the tests and benchmarks) only.
std::vector<std::string> Violations(const Graph& allowed, const std::string& file_folder,
                                    const std::string& file, const std::vector<std::string>& text) {
  const std::string folder = Owner(file_folder);
  std::vector<std::string> out;
  auto it = allowed.find(folder);
  if (it == allowed.end()) {
    out.push_back(absl::StrCat(file, ": folder ", folder,
                               " has no row in server/README.md's dependency table"));
    return out;
  }
  for (size_t i = 0; i < text.size(); ++i) {
    absl::string_view line = absl::StripLeadingAsciiWhitespace(text[i]);
    if (!absl::ConsumePrefix(&line, "#include \"")) continue;
    const size_t end = line.find('"');
    if (end == absl::string_view::npos) continue;
    const absl::string_view include = line.substr(0, end);
    const std::string to_folder = FolderOf(include);
    const std::string to = Owner(to_folder);
    if (to_folder != to && to != folder) {
      out.push_back(absl::StrCat(file, ":", i + 1, ": includes ", include,
                                 ", an internal header of ", to, ", which only ", to,
                                 " itself may use"));
      continue;
    }
    if (to.empty() || to == folder || it->second.contains(to)) continue;
    out.push_back(absl::StrCat(file, ":", i + 1, ": includes ", include, " (", to, "), which ",
                               folder,
                               " may not use; it may use: ", absl::StrJoin(it->second, " ")));
  }
  return out;
}

// A cycle of `graph` as "a -> b -> a", or "" if it has none.
std::string FindCycle(const Graph& graph) {
  std::map<std::string, int> state;  // 0 new, 1 on the path, 2 done.
  std::vector<std::string> path;
  std::string cycle;
  std::function<bool(const std::string&)> visit = [&](const std::string& node) {
    state[node] = 1;
    path.push_back(node);
    auto it = graph.find(node);
    if (it != graph.end()) {
      for (const std::string& next : it->second) {
        if (state[next] == 1) {
          auto from = std::find(path.begin(), path.end(), next);
          std::vector<std::string> loop(from, path.end());
          loop.push_back(next);
          cycle = absl::StrJoin(loop, " -> ");
          return true;
        }
        if (state[next] == 0 && visit(next)) return true;
      }
    }
    path.pop_back();
    state[node] = 2;
    return false;
  };
  for (const auto& [node, uses] : graph) {
    if (state[node] == 0 && visit(node)) return cycle;
  }
  return "";
}

TEST(IncludeGraphTest, EveryIncludeIsOneTheFoldersTableAllows) {
  const Graph allowed = ReadAllowed(ReadLines(kSourceDir / "server/README.md"));
  ASSERT_GE(allowed.size(), 10u) << "server/README.md's dependency table was not found";
  std::vector<std::string> violations;
  size_t files = 0;
  for (const char* top : kGoverned) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(kSourceDir / top)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cc")) continue;
      const fs::path relative = e.path().lexically_relative(kSourceDir);
      ++files;
      for (std::string& v : Violations(allowed, relative.parent_path().string(), relative.string(),
                                       ReadLines(e.path()))) {
        violations.push_back(std::move(v));
      }
    }
  }
  EXPECT_GT(files, 80u);
  EXPECT_THAT(violations, ::testing::IsEmpty()) << absl::StrJoin(violations, "\n");
}

TEST(IncludeGraphTest, TheTableHasNoCycleAndNamesOnlyItsFolders) {
  const Graph allowed = ReadAllowed(ReadLines(kSourceDir / "server/README.md"));
  EXPECT_EQ(FindCycle(allowed), "");
  for (const auto& [folder, uses] : allowed) {
    EXPECT_TRUE(fs::is_directory(kSourceDir / folder)) << folder << " is not a folder";
    EXPECT_TRUE(fs::exists(kSourceDir / folder / "README.md"))
        << folder << " has no README saying what lives there and what it may use";
    for (const std::string& used : uses) {
      EXPECT_TRUE(allowed.contains(used)) << folder << " uses " << used << ", which has no row";
    }
  }
}

// The checker itself: it must see a forbidden include, another folder's
// internal header and a cycle.
TEST(IncludeGraphTest, TheCheckFindsAForbiddenIncludeAnInternalHeaderAndACycle) {
  const Graph allowed =
      ReadAllowed({"### Which folder may use which", "| folder | may use |", "|---|---|",
                   "| `base` | |", "| `core` | `base` |", "| `server/wal` | `base` `core` |"});
  ASSERT_EQ(allowed.size(), 3u);
  EXPECT_THAT(Violations(allowed, "server/wal", "server/wal/wal.cc",
                         {"#include \"server/wal/wal.h\"", "#include \"core/hash.h\"",
                          "#include \"cuckoo/v1/filter_service.pb.h\"", "#include <vector>"}),
              ::testing::IsEmpty());
  EXPECT_THAT(
      Violations(allowed, "core", "core/a.cc", {"", "#include \"server/wal/wal.h\""}),
      ::testing::ElementsAre(::testing::HasSubstr("core/a.cc:2: includes server/wal/wal.h")));
  EXPECT_THAT(Violations(allowed, "core/internal", "core/internal/t.h",
                         {"#include \"core/internal/u.h\"", "#include \"core/hash.h\""}),
              ::testing::IsEmpty());
  EXPECT_THAT(Violations(allowed, "server/wal", "server/wal/wal.cc",
                         {"#include \"core/internal/cuckoo_table.h\""}),
              ::testing::ElementsAre(::testing::HasSubstr(
                  "includes core/internal/cuckoo_table.h, an internal header of core")));
  EXPECT_THAT(Violations(allowed, "client", "client/a.cc", {}),
              ::testing::ElementsAre(::testing::HasSubstr("has no row")));
  EXPECT_EQ(FindCycle(allowed), "");
  Graph cyclic = allowed;
  cyclic["base"].insert("server/wal");
  EXPECT_THAT(FindCycle(cyclic), ::testing::HasSubstr("-> base"));
}

}  // namespace
}  // namespace cuckoo
