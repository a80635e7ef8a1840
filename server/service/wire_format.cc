#include "server/service/wire_format.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "absl/strings/str_format.h"
#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::server::wire {

absl::Status TooManyKeys(const KeysRequestLimits& limits) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "batch has more than %u keys; the server's limit (--max-batch-keys) is %u: split the batch",
      limits.max_keys, limits.max_keys));
}

absl::Status CheckKeyLength(size_t index, size_t len, const KeysRequestLimits& limits) {
  if (len < limits.min_key_bytes) {
    return absl::InvalidArgumentError(
        len == 0 ? absl::StrFormat("keys[%u] is empty; keys must be %u to %u bytes", index,
                                   limits.min_key_bytes, limits.max_key_bytes)
                 : absl::StrFormat("keys[%u] is %u bytes; keys must be %u to %u bytes", index, len,
                                   limits.min_key_bytes, limits.max_key_bytes));
  }
  if (len > limits.max_key_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keys[%u] is %u bytes; the server's limit (--max-key-bytes) is %u", index,
                        len, limits.max_key_bytes));
  }
  return absl::OkStatus();
}

absl::Status CheckFilterLength(size_t len, const KeysRequestLimits& limits) {
  if (len <= limits.max_filter_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "filter name is %u bytes; at most %u are allowed", len, limits.max_filter_bytes));
}

absl::Status CheckKeysRequest(std::string_view filter, absl::Span<const std::string_view> keys,
                              const KeysRequestLimits& limits) {
  if (absl::Status f = CheckFilterLength(filter.size(), limits); !f.ok()) return f;
  if (keys.size() > limits.max_keys) return TooManyKeys(limits);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (absl::Status k = CheckKeyLength(i, keys[i].size(), limits); !k.ok()) return k;
  }
  return absl::OkStatus();
}

namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

// Core per-key results map one-to-one onto the proto enums, offset by the
// proto's UNSPECIFIED = 0.
static_assert(static_cast<int>(InsertResult::kInserted) + 1 == v1::INSERT_RESULT_INSERTED);
static_assert(static_cast<int>(InsertResult::kAlreadyPresent) + 1 ==
              v1::INSERT_RESULT_ALREADY_PRESENT);
static_assert(static_cast<int>(InsertResult::kFull) + 1 == v1::INSERT_RESULT_FULL);
static_assert(static_cast<int>(DeleteResult::kDeleted) + 1 == v1::DELETE_RESULT_DELETED);
static_assert(static_cast<int>(DeleteResult::kNotFound) + 1 == v1::DELETE_RESULT_NOT_FOUND);

constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}
constexpr uint32_t kFilterTag = Tag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kKeysTag = Tag(2, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kIfAbsentTag = Tag(3, WireFormatLite::WIRETYPE_VARINT);
constexpr uint32_t kRequestIdTag = Tag(4, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kMinLogPositionTag = Tag(5, WireFormatLite::WIRETYPE_VARINT);

// Protobuf 3.21's limits (parse_context.h and .cc, checked by
// wire_format_test): a tag is a varint of at most 5 bytes whose bits past
// the 32nd are dropped; other varints take at most 10 bytes, bits past the
// 64th dropped; a length prefix takes at most 5 bytes and must be at most
// INT_MAX - 16 (ReadSizeFallback); groups nest at most 100 deep
// (CodedInputStream's default recursion limit).
constexpr int kMaxTagBytes = 5;
constexpr int kMaxVarintBytes = 10;
constexpr int kMaxLengthBytes = 5;
constexpr uint64_t kMaxLength = INT32_MAX - 16;
constexpr int kMaxGroupDepth = 100;

enum class Read { kOk, kTruncated, kInvalid };

// A cursor over the message's chunks. Invariant: the cursor is at the end of
// its chunk only when no bytes are left in the message.
class Reader {
 public:
  explicit Reader(absl::Span<const std::string_view> chunks) : chunks_(chunks) {
    for (std::string_view c : chunks) total_ += c.size();
    Settle();
  }

  size_t total() const { return total_; }
  size_t offset() const { return offset_; }
  size_t remaining() const { return total_ - offset_; }
  bool AtEnd() const { return offset_ == total_; }

  // Reads a varint of at most `max_bytes` bytes as protobuf does: the 7-bit
  // groups summed into T, bits past T's width dropped.
  template <typename T>
  Read Varint(int max_bytes, T* out) {
    if (end_ - p_ >= max_bytes) {
      const int n = Decode(reinterpret_cast<const uint8_t*>(p_), max_bytes, out);
      if (n == 0) return Read::kInvalid;
      Advance(static_cast<size_t>(n));
      return Read::kOk;
    }
    // Near the end of a chunk: gather the bytes the varint may span.
    uint8_t buf[kMaxVarintBytes];
    const size_t have = Peek(buf, std::min(static_cast<size_t>(max_bytes), remaining()));
    const int n = Decode(buf, static_cast<int>(have), out);
    if (n == 0) return have < static_cast<size_t>(max_bytes) ? Read::kTruncated : Read::kInvalid;
    Advance(static_cast<size_t>(n));
    return Read::kOk;
  }

  // A length prefix, as protobuf's ReadSize reads it, that must also fit in
  // the rest of the message.
  Read Length(size_t* out) {
    uint64_t len = 0;
    if (Read r = Varint(kMaxLengthBytes, &len); r != Read::kOk) return r;
    if (len > kMaxLength) return Read::kInvalid;
    if (len > remaining()) return Read::kTruncated;
    *out = static_cast<size_t>(len);
    return Read::kOk;
  }

  // The next `n` bytes (n <= remaining()): a view into the chunk when they
  // lie in one, else a copy in `arena`.
  std::string_view Take(size_t n, StraddleArena* arena) {
    if (n <= static_cast<size_t>(end_ - p_)) {
      const std::string_view v(p_, n);
      Advance(n);
      return v;
    }
    char* const dst = arena->Allocate(n);
    for (size_t done = 0; done < n;) {
      const size_t step = std::min(n - done, static_cast<size_t>(end_ - p_));
      std::memcpy(dst + done, p_, step);
      done += step;
      Advance(step);
    }
    return {dst, n};
  }

  // Skips `n` bytes (n <= remaining()).
  void Advance(size_t n) {
    offset_ += n;
    while (n > static_cast<size_t>(end_ - p_)) {
      n -= static_cast<size_t>(end_ - p_);
      p_ = end_;
      Settle();
    }
    p_ += n;
    Settle();
  }

 private:
  // Returns the varint's length in bytes, or 0 if none of the first `n`
  // bytes ends it.
  template <typename T>
  static int Decode(const uint8_t* b, int n, T* out) {
    T v = 0;
    for (int i = 0; i < n; ++i) {
      v |= static_cast<T>(static_cast<T>(b[i] & 0x7f) << (7 * i));
      if (b[i] < 0x80) {
        *out = v;
        return i + 1;
      }
    }
    return 0;
  }

  // Copies the next `n` bytes (n <= remaining()) into `buf` without
  // consuming them.
  size_t Peek(uint8_t* buf, size_t n) const {
    const char* p = p_;
    const char* end = end_;
    size_t next = next_;
    for (size_t i = 0; i < n; ++i) {
      while (p == end) {
        p = chunks_[next].data();
        end = p + chunks_[next].size();
        ++next;
      }
      buf[i] = static_cast<uint8_t>(*p++);
    }
    return n;
  }

  // Moves past exhausted (and empty) chunks.
  void Settle() {
    while (p_ == end_ && next_ < chunks_.size()) {
      p_ = chunks_[next_].data();
      end_ = p_ + chunks_[next_].size();
      ++next_;
    }
  }

  absl::Span<const std::string_view> chunks_;
  size_t next_ = 0;  // The chunk after the current one.
  const char* p_ = nullptr;
  const char* end_ = nullptr;
  size_t offset_ = 0;  // Of p_ in the message.
  size_t total_ = 0;
};

class Parser {
 public:
  Parser(Reader& in, std::string_view message) : in_(in), message_(message) {}

  absl::Status Malformed(size_t at, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("request is not a valid cuckoo.v1.%s: %s at byte %u", message_, what, at));
  }

  // A malformed-input error for a failed read of `what` at `at`.
  absl::Status Failed(Read r, size_t at, std::string_view what, std::string_view invalid) const {
    return Malformed(at, r == Read::kTruncated ? absl::StrFormat("truncated %s", what)
                                               : absl::StrFormat("%s %s", what, invalid));
  }

  // Skips an unknown field whose tag was just read (at `at`), and for a
  // start-group tag everything up to its matching end-group tag, as
  // protobuf's UnknownFieldParse does.
  absl::Status SkipUnknown(uint32_t tag, size_t at) {
    uint32_t groups[kMaxGroupDepth];
    int depth = 0;
    while (true) {
      const uint32_t field = tag >> 3;
      const uint32_t type = tag & 7;
      if (type == WireFormatLite::WIRETYPE_END_GROUP) {
        if (depth == 0) return Malformed(at, "end-group tag outside a group");
        if (field != groups[depth - 1]) {
          return Malformed(at, absl::StrFormat("end-group tag of field %u in a group of field %u",
                                               field, groups[depth - 1]));
        }
        --depth;
      } else if (field == 0) {
        return Malformed(at, "field number 0");
      } else {
        const std::string what = absl::StrFormat("field %u", field);
        switch (type) {
          case WireFormatLite::WIRETYPE_VARINT: {
            uint64_t v;
            if (Read r = in_.Varint(kMaxVarintBytes, &v); r != Read::kOk) {
              return Failed(r, at, what, "has a varint over 10 bytes");
            }
            break;
          }
          case WireFormatLite::WIRETYPE_FIXED64:
          case WireFormatLite::WIRETYPE_FIXED32: {
            const size_t n = type == WireFormatLite::WIRETYPE_FIXED64 ? 8 : 4;
            if (in_.remaining() < n) return Failed(Read::kTruncated, at, what, "");
            in_.Advance(n);
            break;
          }
          case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
            size_t len;
            if (Read r = in_.Length(&len); r != Read::kOk) {
              return Failed(r, at, what, "has an invalid length");
            }
            in_.Advance(len);
            break;
          }
          case WireFormatLite::WIRETYPE_START_GROUP:
            if (depth == kMaxGroupDepth) {
              return Malformed(at, absl::StrFormat("groups nested over %d deep", kMaxGroupDepth));
            }
            groups[depth++] = field;
            break;
          default:
            return Malformed(at, absl::StrFormat("wire type %u", type));
        }
      }
      if (depth == 0) return absl::OkStatus();
      at = in_.offset();
      if (Read r = in_.Varint(kMaxTagBytes, &tag); r != Read::kOk) {
        return Failed(r, at, "field tag", "over 5 bytes");
      }
    }
  }

  absl::Status Parse(const KeysRequestLimits& limits, KeysRequest* out) {
    while (!in_.AtEnd()) {
      const size_t at = in_.offset();
      uint32_t tag;
      if (Read r = in_.Varint(kMaxTagBytes, &tag); r != Read::kOk) {
        return Failed(r, at, "field tag", "over 5 bytes");
      }
      switch (tag) {
        case kFilterTag: {
          size_t len;
          if (Read r = in_.Length(&len); r != Read::kOk) {
            return Failed(r, at, "filter", "length over 2 GiB");
          }
          if (absl::Status f = CheckFilterLength(len, limits); !f.ok()) return f;
          const std::string_view filter = in_.Take(len, &out->arena);
          // proto3 strings are checked on every occurrence, with this check.
          if (!google::protobuf::internal::IsStructurallyValidUTF8(
                  filter.data(), static_cast<int>(filter.size()))) {
            return Malformed(at, "filter is not valid UTF-8");
          }
          out->filter = filter;
          break;
        }
        case kKeysTag: {
          const size_t index = out->keys.size();
          if (index >= limits.max_keys) return TooManyKeys(limits);
          size_t len;
          if (Read r = in_.Length(&len); r != Read::kOk) {
            return Failed(r, at, "key", "length over 2 GiB");
          }
          if (absl::Status k = CheckKeyLength(index, len, limits); !k.ok()) return k;
          out->keys.push_back(in_.Take(len, &out->arena));
          break;
        }
        case kIfAbsentTag: {
          uint64_t v;
          if (Read r = in_.Varint(kMaxVarintBytes, &v); r != Read::kOk) {
            return Failed(r, at, "if_absent", "varint over 10 bytes");
          }
          out->if_absent = v != 0;
          break;
        }
        case kRequestIdTag: {
          size_t len;
          if (Read r = in_.Length(&len); r != Read::kOk) {
            return Failed(r, at, "request_id", "length over 2 GiB");
          }
          if (len > limits.max_request_id_bytes) {
            return absl::InvalidArgumentError(
                absl::StrFormat("request_id is %u bytes; at most %u are allowed", len,
                                limits.max_request_id_bytes));
          }
          const std::string_view id = in_.Take(len, &out->arena);
          if (!google::protobuf::internal::IsStructurallyValidUTF8(id.data(),
                                                                   static_cast<int>(id.size()))) {
            return Malformed(at, "request_id is not valid UTF-8");
          }
          out->request_id = id;
          break;
        }
        case kMinLogPositionTag: {
          uint64_t v;
          if (Read r = in_.Varint(kMaxVarintBytes, &v); r != Read::kOk) {
            return Failed(r, at, "min_log_position", "varint over 10 bytes");
          }
          out->min_log_position = v;
          break;
        }
        default:
          // Unknown fields, and known ones with another wire type.
          if (absl::Status s = SkipUnknown(tag, at); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  Reader& in_;
  const std::string_view message_;
};

// A response of one packed varint field 1 holding encode(v) for each value,
// followed by varint fields 2, 3, ... holding `counts`. Fields at their
// default (empty, 0) are left out, as generated code does.
template <typename T, typename Encode>
grpc::ByteBuffer PackedResponse(absl::Span<const T> values, Encode encode,
                                std::initializer_list<uint64_t> counts) {
  size_t payload = 0;
  for (const T& v : values) payload += CodedOutputStream::VarintSize64(encode(v));
  size_t size = values.empty() ? 0 : 1 + CodedOutputStream::VarintSize64(payload) + payload;
  for (uint64_t c : counts) {
    if (c != 0) size += 1 + CodedOutputStream::VarintSize64(c);
  }
  grpc::Slice slice(size);
  uint8_t* p = const_cast<uint8_t*>(slice.begin());
  if (!values.empty()) {
    *p++ = static_cast<uint8_t>(Tag(1, WireFormatLite::WIRETYPE_LENGTH_DELIMITED));
    p = CodedOutputStream::WriteVarint64ToArray(payload, p);
    for (const T& v : values) p = CodedOutputStream::WriteVarint64ToArray(encode(v), p);
  }
  int field = 2;
  for (uint64_t c : counts) {
    if (c != 0) {
      *p++ = static_cast<uint8_t>(Tag(field, WireFormatLite::WIRETYPE_VARINT));
      p = CodedOutputStream::WriteVarint64ToArray(c, p);
    }
    ++field;
  }
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace

char* StraddleArena::Allocate(size_t n) {
  for (; block_ < blocks_.size(); ++block_, pos_ = 0) {
    Block& b = blocks_[block_];
    if (b.size - pos_ >= n) {
      char* const p = b.data.get() + pos_;
      pos_ += n;
      used_ += n;
      return p;
    }
  }
  const size_t size = std::max(n, kBlockBytes);
  blocks_.push_back({std::make_unique_for_overwrite<char[]>(size), size});
  held_ += size;
  block_ = blocks_.size() - 1;
  pos_ = n;
  used_ += n;
  return blocks_.back().data.get();
}

bool StraddleArena::Owns(std::string_view v) const {
  for (const Block& b : blocks_) {
    if (v.data() >= b.data.get() && v.data() + v.size() <= b.data.get() + b.size) return true;
  }
  return false;
}

void StraddleArena::Reset() {
  size_t keep = 0;
  held_ = 0;
  while (keep < blocks_.size() && held_ + blocks_[keep].size <= kKeepBytes) {
    held_ += blocks_[keep++].size;
  }
  blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(keep), blocks_.end());
  block_ = 0;
  pos_ = 0;
  used_ = 0;
}

namespace {

// Empties `v`, and gives its memory back when it grew past `keep` entries.
template <typename T>
void ClearKeeping(std::vector<T>* v, size_t keep) {
  if (v->capacity() > keep) {
    std::vector<T>().swap(*v);
  } else {
    v->clear();
  }
}

}  // namespace

void KeysRequest::Release() {
  filter = {};
  if_absent = false;
  request_id = {};
  min_log_position = 0;
  ClearKeeping(&keys, kKeepKeys);
  arena.Reset();
}

absl::Status ParseKeysRequest(absl::Span<const std::string_view> chunks, std::string_view message,
                              const KeysRequestLimits& limits, KeysRequest* out) {
  out->Release();
  Reader in(chunks);
  // The generated parser takes at most INT_MAX bytes.
  if (in.total() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat("cuckoo.v1.%s is too large", message));
  }
  absl::Status s = Parser(in, message).Parse(limits, out);
  if (!s.ok()) {
    // Leave nothing that points into a request that was refused.
    out->filter = {};
    out->keys.clear();
    out->if_absent = false;
    out->request_id = {};
    out->min_log_position = 0;
  }
  return s;
}

absl::Status ParseKeysRequest(std::string_view bytes, std::string_view message,
                              const KeysRequestLimits& limits, KeysRequest* out) {
  return ParseKeysRequest(absl::MakeConstSpan(&bytes, bytes.empty() ? 0 : 1), message, limits, out);
}

absl::Status Slices(const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices,
                    std::vector<std::string_view>* views) {
  slices->clear();
  views->clear();
  if (!buffer.Valid()) return absl::OkStatus();  // An empty message.
  // Dump takes a reference to each slice; it copies no bytes.
  if (grpc::Status s = buffer.Dump(slices); !s.ok()) {
    return absl::InternalError(absl::StrFormat("cannot read the request: %s", s.error_message()));
  }
  // Only now that `slices` is complete: a small slice's bytes live inside
  // its grpc::Slice, which a growing vector would move.
  views->reserve(slices->size());
  for (const grpc::Slice& s : *slices) {
    views->emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return absl::OkStatus();
}

void ReleaseSlices(std::vector<grpc::Slice>* slices, std::vector<std::string_view>* views) {
  ClearKeeping(slices, kKeepSlices);
  ClearKeeping(views, kKeepSlices);
}

grpc::ByteBuffer InsertResponse(absl::Span<const InsertResult> results, uint64_t log_position) {
  uint64_t n[3] = {0, 0, 0};
  for (InsertResult r : results) ++n[static_cast<int>(r)];
  return PackedResponse(results, [](InsertResult r) { return static_cast<uint64_t>(r) + 1; },
                        {n[0], n[1], n[2], log_position});
}

grpc::ByteBuffer LookupResponse(absl::Span<const bool> present, uint64_t log_position) {
  uint64_t n = 0;
  for (bool p : present) n += p;
  return PackedResponse(present, [](bool p) { return uint64_t{p}; }, {n, log_position});
}

grpc::ByteBuffer DeleteResponse(absl::Span<const DeleteResult> results, uint64_t log_position) {
  uint64_t deleted = 0;
  for (DeleteResult r : results) deleted += r == DeleteResult::kDeleted;
  return PackedResponse(results, [](DeleteResult r) { return static_cast<uint64_t>(r) + 1; },
                        {deleted, results.size() - deleted, log_position});
}

grpc::ByteBuffer CountResponse(absl::Span<const uint32_t> counts, uint64_t log_position) {
  return PackedResponse(counts, [](uint32_t c) { return uint64_t{c}; }, {log_position});
}

}  // namespace cuckoo::server::wire
