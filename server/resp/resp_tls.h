// TLS for the Redis-protocol port: the OpenSSL context its connections
// handshake with (Boost.Asio's ssl::context), made from the same files as
// the gRPC port's (--tls-cert, --tls-key, --tls-client-ca). The server
// passes a ServerOptions::tls_context that returns the context in force:
// a new one when the files were reloaded, so new connections get the new
// certificate and open ones keep theirs (as the gRPC port).
//
//   absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> c =
//       MakeTlsContext(pair_path, client_ca_path);
#ifndef CUCKOO_SERVER_RESP_RESP_TLS_H_
#define CUCKOO_SERVER_RESP_RESP_TLS_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/ssl/context.hpp"

namespace cuckoo::server::resp {

// What one TLS connection is counted to hold beyond a plaintext one's
// buffers (ServerOptions::client_memory): Asio's two 17 KiB staging
// buffers, the BIO pair between them and OpenSSL (17 KiB each way), and
// OpenSSL's session. tests/e2e/redis_tls_test.cc measures what 1000 TLS
// connections add to the process's RSS and checks that this covers it
// (about 92 KB each, where a plaintext connection adds 7 KB;
// docs/SECURITY.md).
inline constexpr size_t kTlsConnectionBytes = 96 << 10;

// A TLS 1.2+ server context with the certificate chain and key in
// `pair_path` (PEM: the key and the chain, in either order) and, unless
// `client_ca_path` is empty, client certificates required and checked
// against it (mutual TLS). INVALID_ARGUMENT naming the file and OpenSSL's
// reason when a file does not load.
absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(
    const std::string& pair_path, const std::string& client_ca_path);

}  // namespace cuckoo::server::resp

#endif  // CUCKOO_SERVER_RESP_RESP_TLS_H_
