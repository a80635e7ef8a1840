// The one place where absl::Status becomes grpc::Status. Both use the
// canonical status codes with the same numbers, so the code passes through
// unchanged; the message is the absl message as is.
#ifndef CUCKOO_SERVER_SERVICE_STATUS_H_
#define CUCKOO_SERVER_SERVICE_STATUS_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace cuckoo::server {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_STATUS_H_
