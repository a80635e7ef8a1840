// A fresh, empty directory for one test, removed with everything in it.
#ifndef CUCKOO_TESTS_UTIL_TEMP_DIR_H_
#define CUCKOO_TESTS_UTIL_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace cuckoo::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cuckoo-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    // CUCKOO_KEEP_TEST_DIR set: kept for a post-mortem (the caller removes it).
    if (std::getenv("CUCKOO_KEEP_TEST_DIR") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_TEMP_DIR_H_
