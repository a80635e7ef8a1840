// The test PKI against OpenSSL's own verifier: what it issues verifies
// against its CA (or fails for the reason a test wants it to), carries the
// names it was given, and comes with the matching key. The TLS tests build
// on this, so a broken certificate here must fail here, not as a handshake
// error there.
#include "tests/util/test_pki.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/util/temp_dir.h"

namespace cuckoo::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
using Cert = std::unique_ptr<X509, Free>;

Cert ParseCert(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), -1), BIO_free);
  return Cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::unique_ptr<EVP_PKEY, Free> ParseKey(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), -1), BIO_free);
  return std::unique_ptr<EVP_PKEY, Free>(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

// X509_V_OK or the verifier's error for `leaf` against `ca` alone, checked
// for `purpose` (X509_PURPOSE_SSL_SERVER / _CLIENT: the extendedKeyUsage).
int Verify(const Pem& ca, const Pem& leaf, int purpose = X509_PURPOSE_SSL_SERVER) {
  Cert ca_cert = ParseCert(ca.cert);
  Cert leaf_cert = ParseCert(leaf.cert);
  EXPECT_NE(ca_cert, nullptr);
  EXPECT_NE(leaf_cert, nullptr);
  if (ca_cert == nullptr || leaf_cert == nullptr) return -1;
  std::unique_ptr<X509_STORE, Free> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca_cert.get());
  std::unique_ptr<X509_STORE_CTX, Free> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf_cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  int error = X509_STORE_CTX_get_error(ctx.get());
  EXPECT_NE(error, X509_V_OK);
  return error;
}

struct Sans {
  std::vector<std::string> dns, ip, uri;
};

Sans GetSans(const Pem& pem) {
  Sans out;
  Cert cert = ParseCert(pem.cert);
  std::unique_ptr<GENERAL_NAMES, Free> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* gn = sk_GENERAL_NAME_value(names.get(), i);
    if (gn->type == GEN_IPADD) {
      // inet_ntop, as gRPC prints IP SANs for the peer's identity ("::1").
      const ASN1_OCTET_STRING* ip = gn->d.iPAddress;
      int family = ASN1_STRING_length(ip) == 4 ? AF_INET : AF_INET6;
      char text[INET6_ADDRSTRLEN];
      EXPECT_NE(inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text), nullptr);
      out.ip.push_back(text);
      continue;
    }
    const ASN1_IA5STRING* s = gn->type == GEN_DNS ? gn->d.dNSName : gn->d.uniformResourceIdentifier;
    std::string value(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                      static_cast<size_t>(ASN1_STRING_length(s)));
    (gn->type == GEN_DNS ? out.dns : out.uri).push_back(value);
  }
  return out;
}

std::string Subject(const Pem& pem) {
  Cert cert = ParseCert(pem.cert);
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  X509_NAME_print_ex(bio.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(TestPkiTest, IssuedCertVerifiesAgainstItsCa) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem server = IssueCert(ca, {.common_name = "cuckood", .dns_sans = {"localhost"}});
  EXPECT_EQ(Verify(ca, server), X509_V_OK);
  EXPECT_THAT(ca.cert, ::testing::StartsWith("-----BEGIN CERTIFICATE-----\n"));
  EXPECT_THAT(server.key, ::testing::StartsWith("-----BEGIN PRIVATE KEY-----\n"));
}

TEST(TestPkiTest, CaIsACa) {
  Pem ca = MakeCa("cuckoo test CA");
  Cert cert = ParseCert(ca.cert);
  ASSERT_NE(cert, nullptr);
  EXPECT_EQ(X509_check_ca(cert.get()), 1);
  // Self-signed: verifies against itself.
  EXPECT_EQ(Verify(ca, ca, X509_PURPOSE_ANY), X509_V_OK);
}

TEST(TestPkiTest, OtherCaDoesNotVerify) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem other = MakeCa("cuckoo test CA");  // same name, other key
  Pem server = IssueCert(ca, {.common_name = "cuckood"});
  EXPECT_NE(Verify(other, server), X509_V_OK);
}

TEST(TestPkiTest, ExpiredCertFailsAsExpired) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem expired = IssueCert(
      ca,
      {.common_name = "cuckood", .not_before = -absl::Hours(48), .not_after = -absl::Hours(24)});
  EXPECT_EQ(Verify(ca, expired), X509_V_ERR_CERT_HAS_EXPIRED);
}

TEST(TestPkiTest, NotYetValidCertFails) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem future = IssueCert(
      ca, {.common_name = "cuckood", .not_before = absl::Hours(24), .not_after = absl::Hours(48)});
  EXPECT_EQ(Verify(ca, future), X509_V_ERR_CERT_NOT_YET_VALID);
}

TEST(TestPkiTest, SansComeOutAsGiven) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem cert = IssueCert(ca, {.common_name = "batch",
                            .dns_sans = {"localhost", "cuckood-0.cuckood.default.svc"},
                            .ip_sans = {"127.0.0.1", "::1"},
                            .uri_sans = {"spiffe://acme/batch"}});
  Sans sans = GetSans(cert);
  EXPECT_THAT(sans.dns, ElementsAre("localhost", "cuckood-0.cuckood.default.svc"));
  EXPECT_THAT(sans.ip, ElementsAre("127.0.0.1", "::1"));
  EXPECT_THAT(sans.uri, ElementsAre("spiffe://acme/batch"));
  // And OpenSSL's host checks, which a TLS client runs, find them.
  Cert x = ParseCert(cert.cert);
  EXPECT_EQ(X509_check_host(x.get(), "localhost", 0, 0, nullptr), 1);
  EXPECT_EQ(X509_check_ip_asc(x.get(), "127.0.0.1", 0), 1);
  EXPECT_EQ(X509_check_ip_asc(x.get(), "::1", 0), 1);
  EXPECT_EQ(X509_check_host(x.get(), "example.com", 0, 0, nullptr), 0);
}

TEST(TestPkiTest, NoSansNoExtension) {
  Pem ca = MakeCa("cuckoo test CA");
  Sans sans = GetSans(IssueCert(ca, {.common_name = "cart-service", .client = true}));
  EXPECT_THAT(sans.dns, IsEmpty());
  EXPECT_THAT(sans.ip, IsEmpty());
  EXPECT_THAT(sans.uri, IsEmpty());
}

TEST(TestPkiTest, SubjectInRfc2253Form) {
  Pem ca = MakeCa("cuckoo test CA");
  // RFC 2253 lists the last RDN first: CN before O, as the access file's
  // subject: selectors are written (spec: `subject:"CN=ops,O=Acme"`).
  EXPECT_EQ(Subject(IssueCert(ca, {.common_name = "ops", .organization = "Acme"})),
            "CN=ops,O=Acme");
  EXPECT_EQ(Subject(IssueCert(ca, {.common_name = "cart-service"})), "CN=cart-service");
}

TEST(TestPkiTest, KeyMatchesCert) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem a = IssueCert(ca, {.common_name = "a"});
  Pem b = IssueCert(ca, {.common_name = "b"});
  Cert a_cert = ParseCert(a.cert);
  auto a_key = ParseKey(a.key);
  auto b_key = ParseKey(b.key);
  auto ca_key = ParseKey(ca.key);
  Cert ca_cert = ParseCert(ca.cert);
  EXPECT_EQ(X509_check_private_key(a_cert.get(), a_key.get()), 1);
  EXPECT_EQ(X509_check_private_key(ca_cert.get(), ca_key.get()), 1);
  EXPECT_EQ(X509_check_private_key(a_cert.get(), b_key.get()), 0);
  ERR_clear_error();  // the mismatch leaves an error on OpenSSL's queue
}

TEST(TestPkiTest, ExtendedKeyUsageSelectsPurpose) {
  Pem ca = MakeCa("cuckoo test CA");
  Pem server = IssueCert(ca, {.common_name = "s"});
  Pem client = IssueCert(ca, {.common_name = "c", .client = true, .server = false});
  Pem peer = IssueCert(ca, {.common_name = "p", .client = true, .server = true});
  EXPECT_EQ(Verify(ca, server, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(ca, server, X509_PURPOSE_SSL_CLIENT), X509_V_ERR_INVALID_PURPOSE);
  EXPECT_EQ(Verify(ca, client, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
  EXPECT_EQ(Verify(ca, client, X509_PURPOSE_SSL_SERVER), X509_V_ERR_INVALID_PURPOSE);
  EXPECT_EQ(Verify(ca, peer, X509_PURPOSE_SSL_SERVER), X509_V_OK);
  EXPECT_EQ(Verify(ca, peer, X509_PURPOSE_SSL_CLIENT), X509_V_OK);
}

TEST(TestPkiTest, SerialsDiffer) {
  Pem ca = MakeCa("cuckoo test CA");
  Cert a = ParseCert(IssueCert(ca, {.common_name = "x"}).cert);
  Cert b = ParseCert(IssueCert(ca, {.common_name = "x"}).cert);
  EXPECT_NE(ASN1_INTEGER_cmp(X509_get0_serialNumber(a.get()), X509_get0_serialNumber(b.get())), 0);
}

TEST(TestPkiTest, WritePemReplacesFile) {
  TempDir dir;
  std::string path = dir.path() + "/tls.crt";
  WritePem(path, "one\n");
  EXPECT_EQ(ReadFile(path), "one\n");
  struct stat before;
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  WritePem(path, "two\n");
  EXPECT_EQ(ReadFile(path), "two\n");
  // A new inode (rename, not a rewrite in place), and no temporary left.
  struct stat after;
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(TestPkiTest, WriteSecretVolumeSwapsAllFiles) {
  TempDir dir;
  std::string vol = dir.path() + "/tls";
  WriteSecretVolume(vol, {{"tls.crt", "cert 1"}, {"tls.key", "key 1"}});
  EXPECT_EQ(ReadFile(vol + "/tls.crt"), "cert 1");
  EXPECT_EQ(ReadFile(vol + "/tls.key"), "key 1");
  EXPECT_TRUE(std::filesystem::is_symlink(vol + "/tls.crt"));
  WriteSecretVolume(vol, {{"tls.crt", "cert 2"}, {"tls.key", "key 2"}});
  EXPECT_EQ(ReadFile(vol + "/tls.crt"), "cert 2");
  EXPECT_EQ(ReadFile(vol + "/tls.key"), "key 2");
  // tls.crt, tls.key, ..data and one hidden data directory: the old one is
  // gone.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(vol)) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names.size(), 4u) << ::testing::PrintToString(names);
}

}  // namespace
}  // namespace cuckoo::testing
