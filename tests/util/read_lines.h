// ReadLines: a text file of the source tree, line by line, for the tests
// that check the repository's files (docs drift, the include graph). A file
// that cannot be read fails the calling test, naming it.
#ifndef CUCKOO_TESTS_UTIL_READ_LINES_H_
#define CUCKOO_TESTS_UTIL_READ_LINES_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cuckoo {

inline std::vector<std::string> ReadLines(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace cuckoo

#endif  // CUCKOO_TESTS_UTIL_READ_LINES_H_
