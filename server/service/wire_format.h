// The protobuf wire format of the four data-path messages (Insert, Lookup,
// Delete and Count requests and responses), read and written by hand.
//
// Why: the generated parser copies every key into its own std::string, and
// a 16-byte key is one byte too long for the small-string buffer, so a
// 1000-key Lookup cost 1000 heap allocations and frees before any filter
// work. Here the keys are views into the bytes gRPC received, and responses
// are written straight into one gRPC slice. The bytes on the wire are
// exactly what proto/cuckoo/v1/filter_service.proto specifies: clients use
// their generated code unchanged.
//
// The four requests share their field numbers:
//   string filter = 1; repeated bytes keys = 2; bool if_absent = 3 (Insert);
//   string request_id = 4 (Insert, Delete); uint64 min_log_position = 5.
// (A Lookup or Count carrying field 4 or 5 is read the same way; the
// service ignores what its method does not use.)
// ParseKeysRequest accepts exactly the bytes that the generated parser of
// protobuf 3.21 (InsertRequest::ParseFromArray) accepts and reads the same
// values from them: unknown fields (groups included) and fields of an
// unexpected wire type are skipped, a repeated scalar keeps its last value,
// `filter` must be valid UTF-8 in every occurrence, and anything truncated or
// malformed is an error. wire_format_test.cc and tests/fuzz/wire_fuzz.cc
// check that differentially against the generated code.
//
// Example, in a raw callback handler:
//   std::vector<grpc::Slice> slices;
//   std::vector<std::string_view> chunks;
//   thread_local wire::KeysRequest req;
//   absl::Status s = wire::Slices(request, &slices, &chunks);
//   if (s.ok()) s = wire::ParseKeysRequest(chunks, "LookupRequest", limits, &req);
//   ... use req.keys while `slices` is alive and unchanged ...
#ifndef CUCKOO_SERVER_SERVICE_WIRE_FORMAT_H_
#define CUCKOO_SERVER_SERVICE_WIRE_FORMAT_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/results.h"

namespace cuckoo::server::wire {

// The server's limits on a request, enforced while parsing: the parse stops
// at the first field past a limit, so the memory a request can pin is bounded
// by these, not by the size of the message.
struct KeysRequestLimits {
  uint32_t max_keys;          // --max-batch-keys
  uint32_t min_key_bytes;     // 1 on the server; 0 for pure protobuf semantics
  uint32_t max_key_bytes;     // --max-key-bytes
  uint32_t max_filter_bytes;  // 128 on the server (longer names are invalid anyway)
  uint32_t max_request_id_bytes = UINT32_MAX;  // 128 on the server
};

// No limits: ParseKeysRequest then accepts exactly what protobuf accepts.
inline constexpr KeysRequestLimits kNoLimits = {UINT32_MAX, 0, UINT32_MAX, UINT32_MAX, UINT32_MAX};

// Holds the bytes of fields that straddle chunk boundaries. Blocks never
// move once allocated, so a view into one stays valid until Reset().
class StraddleArena {
 public:
  // Room for `n` bytes, valid until Reset().
  char* Allocate(size_t n);
  // Forgets every allocation. Keeps up to kKeepBytes of blocks for reuse and
  // frees the rest, so one large request does not pin memory.
  void Reset();
  // Whether `v` lies in this arena (for tests).
  bool Owns(std::string_view v) const;
  size_t bytes_used() const { return used_; }
  size_t bytes_held() const { return held_; }

  static constexpr size_t kBlockBytes = 16 << 10;
  static constexpr size_t kKeepBytes = 64 << 10;

 private:
  struct Block {
    std::unique_ptr<char[]> data;
    size_t size;
  };
  std::vector<Block> blocks_;
  size_t block_ = 0;  // The block being filled.
  size_t pos_ = 0;    // Bytes used in blocks_[block_].
  size_t used_ = 0;
  size_t held_ = 0;
};

// A parsed request. The views point into the chunks given to
// ParseKeysRequest, or, for a field that straddles two or more chunks, into
// this object's arena (one copy of that field only). They are valid until the
// next ParseKeysRequest or Release() on this object and while the chunks'
// bytes are alive.
//
// Meant to be reused (e.g. thread_local): a warm object parses a typical
// request with no allocation. Its memory is bounded by the limits, not by the
// message: `keys` grows to at most 2 * max_keys views (vector growth), and
// the arena holds only fields that straddle chunks, at most (#chunks - 1) of
// them, each at most max(max_key_bytes, max_filter_bytes), in blocks of
// StraddleArena::kBlockBytes (a larger field gets a block of its own size).
// The next parse, or Release(), gives back whatever is above kKeepKeys views
// and StraddleArena::kKeepBytes, so one huge request does not pin memory for
// the life of a thread.
struct KeysRequest {
  std::string_view filter;
  std::vector<std::string_view> keys;
  bool if_absent = false;
  std::string_view request_id;
  uint64_t min_log_position = 0;

  // Clears the request and frees buffers above the thresholds (keys capacity
  // over kKeepKeys, arena over StraddleArena::kKeepBytes).
  void Release();

  static constexpr size_t kKeepKeys = 16 << 10;
  StraddleArena arena;
};

// Parses a serialized Insert/Lookup/Delete/CountRequest held in `chunks`, in
// order (gRPC's slices; empty chunks are allowed, and no chunks at all is the
// empty message). `message` names the type in errors. `out` is released
// first (see KeysRequest::Release).
//
// Errors, all INVALID_ARGUMENT, for the first problem in wire order:
//   "request is not a valid cuckoo.v1.<message>: <what> at byte <offset>"
//     for input the generated parser rejects (offset into the whole message);
//   "batch has more than N keys; the server's limit (--max-batch-keys) is N:
//     split the batch" at the (max_keys + 1)-th key;
//   "keys[i] is empty; keys must be m to M bytes" (or "keys[i] is L bytes;
//     keys must be m to M bytes" for a short key when min_key_bytes > 1);
//   "keys[i] is L bytes; the server's limit (--max-key-bytes) is M";
//   "filter name is L bytes; at most M are allowed", for any occurrence of
//     the filter field (and "request_id is L bytes; ..." likewise);
//   "cuckoo.v1.<message> is too large" past INT_MAX bytes (which the
//     generated parser cannot take either).
// A field too long for a limit is refused from its length prefix (once that
// is known to fit in the message), before any of it is copied.
absl::Status ParseKeysRequest(absl::Span<const std::string_view> chunks, std::string_view message,
                              const KeysRequestLimits& limits, KeysRequest* out);

// The same for one contiguous buffer.
absl::Status ParseKeysRequest(std::string_view bytes, std::string_view message,
                              const KeysRequestLimits& limits, KeysRequest* out);

// The limits ParseKeysRequest enforces, with its errors, for a request that
// came another way (the Redis port's writes): the filter name's length, the
// batch's size, and each key's length (`index`: its place in the batch).
absl::Status CheckKeysRequest(std::string_view filter, absl::Span<const std::string_view> keys,
                              const KeysRequestLimits& limits);
absl::Status CheckFilterLength(size_t len, const KeysRequestLimits& limits);
absl::Status TooManyKeys(const KeysRequestLimits& limits);
absl::Status CheckKeyLength(size_t index, size_t len, const KeysRequestLimits& limits);

// The slices of `buffer`, without copying bytes: `slices` takes a reference
// to each of gRPC's slices and `views` their bytes, in order. An empty or
// uninitialized buffer gives no slices. The views are valid while `slices` is
// alive and unchanged (a small slice keeps its bytes inside the grpc::Slice
// object itself, so do not add to or move the vector's elements); clear
// `slices` when done so gRPC can free the message.
absl::Status Slices(const grpc::ByteBuffer& buffer, std::vector<grpc::Slice>* slices,
                    std::vector<std::string_view>* views);

// Empties what Slices filled, giving back the vectors' memory when they grew
// past kKeepSlices entries: a client decides how many slices a message
// arrives in (one per HTTP/2 DATA frame or read), and reused per-thread
// vectors must not keep one request's worth for good.
inline constexpr size_t kKeepSlices = 1024;
void ReleaseSlices(std::vector<grpc::Slice>* slices, std::vector<std::string_view>* views);

// Serialized responses, as generated code would write them (fields with
// default values omitted); `log_position` is the response's log_position.
grpc::ByteBuffer InsertResponse(absl::Span<const InsertResult> results, uint64_t log_position = 0);
grpc::ByteBuffer LookupResponse(absl::Span<const bool> present, uint64_t log_position = 0);
grpc::ByteBuffer DeleteResponse(absl::Span<const DeleteResult> results, uint64_t log_position = 0);
grpc::ByteBuffer CountResponse(absl::Span<const uint32_t> counts, uint64_t log_position = 0);

}  // namespace cuckoo::server::wire

#endif  // CUCKOO_SERVER_SERVICE_WIRE_FORMAT_H_
