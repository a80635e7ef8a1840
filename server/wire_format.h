// The protobuf wire format of the four data-path messages (Insert, Lookup,
// Delete and Count requests and responses), read and written by hand.
//
// Why: the generated parser copies every key into its own std::string, and
// a 16-byte key is one byte too long for the small-string buffer, so a
// 1000-key Lookup cost 1000 heap allocations and frees before any filter
// work. Here the keys are views into the received bytes, and responses are
// written straight into one gRPC slice. The bytes on the wire are exactly
// what proto/cuckoo/v1/filter_service.proto specifies: clients use their
// generated code unchanged. wire_format_test.cc checks both directions
// against the generated messages.
//
// The four requests share their field numbers:
//   string filter = 1; repeated bytes keys = 2; bool if_absent = 3 (Insert).
// As with generated code, unknown fields and fields of an unexpected wire
// type are skipped, a repeated scalar field keeps its last value, and
// anything truncated or malformed is an error.
#ifndef CUCKOO_SERVER_WIRE_FORMAT_H_
#define CUCKOO_SERVER_WIRE_FORMAT_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/cuckoo_table.h"

namespace cuckoo::server::wire {

// A parsed request. Views point into the bytes given to ParseKeysRequest.
struct KeysRequest {
  std::string_view filter;
  std::vector<std::string_view> keys;
  bool if_absent = false;
};

// Parses a serialized Insert/Lookup/Delete/CountRequest. `message` names the
// type in the error. `out` is cleared first (its capacity is kept, so a
// reused object allocates nothing once warm). INVALID_ARGUMENT if malformed.
absl::Status ParseKeysRequest(std::string_view bytes, std::string_view message, KeysRequest* out);

// The contents of `buffer` as one contiguous run of bytes: the slice itself
// when gRPC holds the message in one slice (no copy), else a copy in
// `storage`. `slice` keeps the single slice alive.
std::string_view Flatten(const grpc::ByteBuffer& buffer, grpc::Slice* slice, std::string* storage);

// Serialized responses, as generated code would write them (fields with
// default values omitted).
grpc::ByteBuffer InsertResponse(absl::Span<const InsertResult> results);
grpc::ByteBuffer LookupResponse(absl::Span<const bool> present);
grpc::ByteBuffer DeleteResponse(absl::Span<const DeleteResult> results);
grpc::ByteBuffer CountResponse(absl::Span<const uint32_t> counts);

}  // namespace cuckoo::server::wire

#endif  // CUCKOO_SERVER_WIRE_FORMAT_H_
