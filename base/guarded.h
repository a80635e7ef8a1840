// Guarded: runs a body that returns absl::Status or absl::StatusOr<T> and
// turns an exception it throws into a status too, so that work on a server
// thread always ends with a status its caller can answer with.
//
//   absl::Status s = Guarded([&] { return DropNow(name); });
#ifndef CUCKOO_BASE_GUARDED_H_
#define CUCKOO_BASE_GUARDED_H_

#include <exception>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuckoo {

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

}  // namespace cuckoo

#endif  // CUCKOO_BASE_GUARDED_H_
