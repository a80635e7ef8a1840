// A main() for fuzz targets built without libFuzzer (g++): runs
// LLVMFuzzerTestOneInput once over every file named on the command line, and
// over every regular file under each directory named (recursively, in sorted
// order). Exits 0 after the last input, 1 when an argument cannot be read or
// no input was found at all (an empty corpus must not pass silently); a bug
// found in an input aborts (trap or sanitizer report) with that input's path
// printed first.
//
//   snapshot_fuzz_replay corpus_dir [more files or dirs...]
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    return false;
  }
  std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // Exactly size bytes on the heap (none for an empty file), so ASan catches
  // a read past the end of the input.
  std::vector<uint8_t> data(bytes.begin(), bytes.end());
  std::fprintf(stderr, "replaying %s (%zu bytes)\n", path.c_str(), data.size());
  LLVMFuzzerTestOneInput(data.data(), data.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s file_or_dir...\n", argv[0]);
    return 2;
  }
  size_t inputs = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::recursive_directory_iterator(arg, ec)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      if (ec) {
        std::fprintf(stderr, "cannot list %s: %s\n", arg.c_str(), ec.message().c_str());
        ok = false;
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) {
        ok = RunFile(f) && ok;
        ++inputs;
      }
    } else {
      ok = RunFile(arg) && ok;
      ++inputs;
    }
  }
  if (inputs == 0) {
    std::fprintf(stderr, "no inputs found\n");
    return 1;
  }
  std::printf("replayed %zu inputs%s\n", inputs, ok ? "" : " (some could not be read)");
  return ok ? 0 : 1;
}
