#include "server/wire_format.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <initializer_list>

#include "absl/strings/str_format.h"
#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::server::wire {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
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

absl::Status Malformed(std::string_view message, const CodedInputStream& in, const char* what) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "request is not a valid cuckoo.v1.%s: %s at byte %d", message, what, in.CurrentPosition()));
}

// Reads a length-delimited field's contents as a view into `bytes`.
bool ReadView(CodedInputStream& in, std::string_view bytes, std::string_view* out) {
  uint32_t len = 0;
  if (!in.ReadVarint32(&len)) return false;
  const size_t at = static_cast<size_t>(in.CurrentPosition());
  if (len > bytes.size() - at) return false;
  *out = bytes.substr(at, len);
  return in.Skip(static_cast<int>(len));
}

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

absl::Status ParseKeysRequest(std::string_view bytes, std::string_view message, KeysRequest* out) {
  out->filter = {};
  out->keys.clear();
  out->if_absent = false;
  if (bytes.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat("cuckoo.v1.%s is too large", message));
  }
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;  // End of input, or a malformed tag (checked below).
    switch (tag) {
      case kFilterTag:
        if (!ReadView(in, bytes, &out->filter)) return Malformed(message, in, "truncated filter");
        break;
      case kKeysTag: {
        std::string_view key;
        if (!ReadView(in, bytes, &key)) return Malformed(message, in, "truncated key");
        out->keys.push_back(key);
        break;
      }
      case kIfAbsentTag: {
        uint64_t v = 0;
        if (!in.ReadVarint64(&v)) return Malformed(message, in, "truncated if_absent");
        out->if_absent = v != 0;
        break;
      }
      default:
        if (!WireFormatLite::SkipField(&in, tag)) {
          return Malformed(message, in, "truncated or malformed field");
        }
    }
  }
  if (static_cast<size_t>(in.CurrentPosition()) != bytes.size()) {
    return Malformed(message, in, "malformed field tag");
  }
  return absl::OkStatus();
}

std::string_view Flatten(const grpc::ByteBuffer& buffer, grpc::Slice* slice, std::string* storage) {
  if (buffer.TrySingleSlice(slice).ok()) {
    return {reinterpret_cast<const char*>(slice->begin()), slice->size()};
  }
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);  // Fails only for an empty buffer: no slices.
  storage->clear();
  for (const grpc::Slice& s : slices) {
    storage->append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return *storage;
}

grpc::ByteBuffer InsertResponse(absl::Span<const InsertResult> results) {
  uint64_t n[3] = {0, 0, 0};
  for (InsertResult r : results) ++n[static_cast<int>(r)];
  return PackedResponse(results, [](InsertResult r) { return static_cast<uint64_t>(r) + 1; },
                        {n[0], n[1], n[2]});
}

grpc::ByteBuffer LookupResponse(absl::Span<const bool> present) {
  uint64_t n = 0;
  for (bool p : present) n += p;
  return PackedResponse(present, [](bool p) { return uint64_t{p}; }, {n});
}

grpc::ByteBuffer DeleteResponse(absl::Span<const DeleteResult> results) {
  uint64_t deleted = 0;
  for (DeleteResult r : results) deleted += r == DeleteResult::kDeleted;
  return PackedResponse(results, [](DeleteResult r) { return static_cast<uint64_t>(r) + 1; },
                        {deleted, results.size() - deleted});
}

grpc::ByteBuffer CountResponse(absl::Span<const uint32_t> counts) {
  return PackedResponse(counts, [](uint32_t c) { return uint64_t{c}; }, {});
}

}  // namespace cuckoo::server::wire
