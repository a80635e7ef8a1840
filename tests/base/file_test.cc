// Whole files and file identities (base/file.h).
#include "base/file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {
namespace {

using ::testing::MatchesRegex;
using testing::TempDir;

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

TEST(FileTest, ReadsAWholeFileEmptyOrLargerThanOneBuffer) {
  TempDir dir;
  const std::string path = dir.path() + "/f";
  Write(path, "");
  EXPECT_EQ(*ReadFileToString(path), "");
  std::string big(100'000, 'x');
  big[0] = '\0';  // Bytes, not text.
  big.back() = 'y';
  Write(path, big);
  EXPECT_EQ(*ReadFileToString(path), big);
}

TEST(FileTest, ReadsAtMostMaxBytes) {
  TempDir dir;
  const std::string path = dir.path() + "/f";
  Write(path, "abcdef");
  EXPECT_EQ(*ReadFileToString(path, 4), "abcd");
  EXPECT_EQ(*ReadFileToString(path, 6), "abcdef");
  EXPECT_EQ(*ReadFileToString(path, 0), "");
  // What never ends is read no further.
  EXPECT_EQ(ReadFileToString("/dev/zero", 4096)->size(), 4096u);
}

TEST(FileTest, FailuresCarryErrnosCodeAndTextOnly) {
  TempDir dir;
  const absl::StatusOr<std::string> missing = ReadFileToString(dir.path() + "/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "No such file or directory");
  const absl::StatusOr<std::string> directory = ReadFileToString(dir.path());
  EXPECT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(), "Is a directory");
}

TEST(FileTest, IdentityChangesWithTheFileAndIsDashWithoutOne) {
  TempDir dir;
  const std::string path = dir.path() + "/f";
  EXPECT_EQ(FileIdentity(path), "-");
  Write(path, "one");
  const std::string first = FileIdentity(path);
  EXPECT_THAT(first, MatchesRegex("[0-9]+/[0-9]+/3/[0-9]+\\.[0-9]+"));
  EXPECT_EQ(FileIdentity(path), first);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(FileIdentity(st), first);
  // A new file renamed over it, as a Secret update swaps its link: another
  // inode, whatever the size and time.
  Write(path + ".new", "two");
  ASSERT_EQ(::rename((path + ".new").c_str(), path.c_str()), 0);
  EXPECT_NE(FileIdentity(path), first);
}

}  // namespace
}  // namespace cuckoo
