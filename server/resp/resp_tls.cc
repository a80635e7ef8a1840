#include "server/resp/resp_tls.h"

#include <openssl/ssl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuckoo::server::resp {

namespace ssl = boost::asio::ssl;

absl::StatusOr<std::shared_ptr<ssl::context>> MakeTlsContext(const std::string& pair_path,
                                                             const std::string& client_ca_path) {
  auto c = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  auto failed = [&](absl::string_view what, const std::string& path) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Redis port's TLS ", what, " from ", path, ": ", ec.message()));
  };
  // TLS 1.2 and 1.3 only, as the gRPC port; no renegotiation (a client
  // could make the server redo handshakes at will).
  c->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                     ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                     ssl::context::single_dh_use,
                 ec);
  if (ec) return failed("options", "(none)");
  SSL_CTX_set_options(c->native_handle(), SSL_OP_NO_RENEGOTIATION);
  // Idle connections give their record buffers back (thousands may be
  // open): what is counted per connection is then mostly Asio's.
  SSL_CTX_set_mode(c->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  if (c->use_certificate_chain_file(pair_path, ec); ec) return failed("certificate", pair_path);
  if (c->use_private_key_file(pair_path, ssl::context::pem, ec); ec) {
    return failed("key", pair_path);
  }
  if (!client_ca_path.empty()) {
    if (c->load_verify_file(client_ca_path, ec); ec) return failed("client CA", client_ca_path);
    c->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
    if (ec) return failed("verify mode", client_ca_path);
  }
  return c;
}

}  // namespace cuckoo::server::resp
