// The one place where absl::Status becomes grpc::Status. Both use the
// canonical status codes with the same numbers, so the code passes through
// unchanged; the message is the absl message as is.
#ifndef CUCKOO_SERVER_STATUS_H_
#define CUCKOO_SERVER_STATUS_H_

#include <grpcpp/support/status.h>

#include <exception>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuckoo::server {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// body()'s status, where an exception body() throws becomes a status too:
// RESOURCE_EXHAUSTED for std::bad_alloc, INTERNAL for any other. Every
// handler runs its work through this, so that a call always finishes, and
// leaves the count of calls in flight that shutdown waits for, whatever
// happens in it.
template <typename Body>
auto Guarded(Body body) -> decltype(body()) {  // absl::Status or absl::StatusOr.
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        "the server ran out of memory handling this request; retry, or send smaller batches");
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("the server failed handling this request: ", e.what()));
  } catch (...) {
    return absl::InternalError("the server failed handling this request");
  }
}

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_STATUS_H_
