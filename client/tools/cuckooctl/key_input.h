// The keys of cuckooctl's key commands (insert, lookup, delete, count): read
// in chunks from the KEY arguments, a file or stdin, one key per line, so
// that any input runs in bounded memory.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_KEY_INPUT_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_KEY_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "client/tools/cuckooctl/command_line.h"

namespace cuckoo::ctl {

// A chunk of keys sent with one client call (itself split by the client into
// requests that fit the server's limits).
constexpr size_t kChunkKeys = 10'000;
constexpr size_t kChunkBytes = 4 << 20;
// A "line" longer than this is not a key file: refuse rather than buffer it.
constexpr size_t kMaxLineBytes = 64 << 20;

// A batch of keys: their bytes in one buffer, and views of them built by Seal()
// just before use (a swap or move of `bytes` may move its data).
struct Chunk {
  std::string bytes;
  std::vector<std::pair<size_t, size_t>> spans;  // Offset and size in `bytes`.
  std::vector<std::string_view> keys;
  uint64_t first = 0;  // Index in the whole input of the first key.

  size_t size() const { return spans.size(); }
  bool full() const { return spans.size() >= kChunkKeys || bytes.size() >= kChunkBytes; }
  void Clear(uint64_t first_index) {
    bytes.clear();
    spans.clear();
    keys.clear();
    first = first_index;
  }
  void Add(std::string_view key) {
    spans.emplace_back(bytes.size(), key.size());
    bytes.append(key);
  }
  void Seal() {
    keys.clear();
    keys.reserve(spans.size());
    for (auto [offset, size] : spans) keys.emplace_back(bytes.data() + offset, size);
  }
};

class KeySource {
 public:
  virtual ~KeySource() = default;
  // Replaces `chunk` with the next keys, as many as fit. With may_block, waits
  // for at least one key unless the input is at its end; without, takes only
  // what is available now (possibly none). Once it holds a key, it stops at
  // the first wait, so a slow producer's keys are answered promptly.
  virtual absl::Status Next(Chunk& chunk, bool may_block) = 0;
  // True when every key has been returned.
  virtual bool done() const = 0;
  uint64_t keys_read() const { return keys_read_; }

 protected:
  uint64_t keys_read_ = 0;
};

// The keys of the key command `cl`: its KEY arguments, else --file=PATH
// (`-`: stdin), else stdin; `from_args` says whether they are the
// arguments. A usage failure for an empty KEY argument, KEY arguments with
// --file, or a file that cannot be opened.
std::optional<Failure> OpenKeySource(const CommandLine& cl, std::unique_ptr<KeySource>& source,
                                     bool& from_args);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_KEY_INPUT_H_
