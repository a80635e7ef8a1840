#include "tests/util/test_pki.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace cuckoo::testing {
namespace {

// Prints what failed and OpenSSL's error queue, then aborts.
[[noreturn]] void Fail(std::string_view what) {
  std::fprintf(stderr, "test_pki: %.*s failed\n", static_cast<int>(what.size()), what.data());
  ERR_print_errors_fp(stderr);
  std::abort();
}

template <typename T>
T* Check(T* p, std::string_view what) {
  if (p == nullptr) Fail(what);
  return p;
}

void Check(int ok, std::string_view what) {
  if (ok <= 0) Fail(what);
}

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;
using Bio = std::unique_ptr<BIO, Free>;

Key NewKey() { return Key(Check(EVP_EC_gen("P-256"), "EVP_EC_gen(P-256)")); }

Bio ReadBio(std::string_view pem) {
  return Bio(Check(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), "BIO_new_mem_buf"));
}

Key ParseKey(std::string_view pem) {
  Bio bio = ReadBio(pem);
  return Key(Check(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), "read CA key"));
}

Cert ParseCert(std::string_view pem) {
  Bio bio = ReadBio(pem);
  return Cert(Check(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), "read CA cert"));
}

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string CertPem(X509* cert) {
  Bio bio(Check(BIO_new(BIO_s_mem()), "BIO_new"));
  Check(PEM_write_bio_X509(bio.get(), cert), "PEM_write_bio_X509");
  return BioContents(bio.get());
}

std::string KeyPem(EVP_PKEY* key) {
  Bio bio(Check(BIO_new(BIO_s_mem()), "BIO_new"));
  Check(PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr),
        "PEM_write_bio_PrivateKey");
  return BioContents(bio.get());
}

// A certificate for `key` with a random 127-bit serial (positive, and
// distinct between the certificates of one test run: a verifier may cache
// by issuer and serial), `subject` and validity; not yet signed.
Cert NewCert(EVP_PKEY* key, X509_NAME* subject, absl::Duration not_before,
             absl::Duration not_after) {
  Cert cert(Check(X509_new(), "X509_new"));
  Check(X509_set_version(cert.get(), X509_VERSION_3), "X509_set_version");
  unsigned char serial_bytes[16];
  Check(RAND_bytes(serial_bytes, sizeof serial_bytes), "RAND_bytes");
  serial_bytes[0] &= 0x7f;
  std::unique_ptr<BIGNUM, Free> serial(
      Check(BN_bin2bn(serial_bytes, sizeof serial_bytes, nullptr), "BN_bin2bn"));
  Check(BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())), "BN_to_ASN1_INTEGER");
  Check(X509_set_subject_name(cert.get(), subject), "X509_set_subject_name");
  Check(X509_set_pubkey(cert.get(), key), "X509_set_pubkey");
  Check(X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0,
                         static_cast<long>(absl::ToInt64Seconds(not_before)), nullptr) != nullptr,
        "set notBefore");
  Check(X509_time_adj_ex(X509_getm_notAfter(cert.get()), 0,
                         static_cast<long>(absl::ToInt64Seconds(not_after)), nullptr) != nullptr,
        "set notAfter");
  return cert;
}

// Adds one extension in OpenSSL's configuration syntax ("critical,CA:TRUE"),
// with `issuer` as the issuing certificate (for authorityKeyIdentifier).
void AddExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(
      Check(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value), absl::StrCat("extension ", value)));
  Check(X509_add_ext(cert, ext.get(), -1), "X509_add_ext");
}

X509_NAME* Subject(std::string_view common_name, std::string_view organization) {
  X509_NAME* name = Check(X509_NAME_new(), "X509_NAME_new");
  if (!organization.empty()) {
    Check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                     reinterpret_cast<const unsigned char*>(organization.data()),
                                     static_cast<int>(organization.size()), -1, 0),
          "subject O");
  }
  Check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                   reinterpret_cast<const unsigned char*>(common_name.data()),
                                   static_cast<int>(common_name.size()), -1, 0),
        "subject CN");
  return name;
}

// subjectAltName built from GENERAL_NAMEs rather than the configuration
// syntax ("DNS:a,IP:b"), so a name holding a comma or a colon goes in as
// given.
void AddSans(X509* cert, const CertSpec& spec) {
  std::unique_ptr<GENERAL_NAMES, Free> names(Check(GENERAL_NAMES_new(), "GENERAL_NAMES_new"));
  auto add_string = [&](int type, const std::string& value) {
    ASN1_IA5STRING* s = Check(ASN1_IA5STRING_new(), "ASN1_IA5STRING_new");
    Check(ASN1_STRING_set(s, value.data(), static_cast<int>(value.size())), "ASN1_STRING_set");
    GENERAL_NAME* gn = Check(GENERAL_NAME_new(), "GENERAL_NAME_new");
    GENERAL_NAME_set0_value(gn, type, s);
    Check(sk_GENERAL_NAME_push(names.get(), gn), "sk_GENERAL_NAME_push");
  };
  for (const std::string& dns : spec.dns_sans) add_string(GEN_DNS, dns);
  for (const std::string& uri : spec.uri_sans) add_string(GEN_URI, uri);
  for (const std::string& ip : spec.ip_sans) {
    ASN1_OCTET_STRING* addr = Check(a2i_IPADDRESS(ip.c_str()), absl::StrCat("IP address ", ip));
    GENERAL_NAME* gn = Check(GENERAL_NAME_new(), "GENERAL_NAME_new");
    GENERAL_NAME_set0_value(gn, GEN_IPADD, addr);
    Check(sk_GENERAL_NAME_push(names.get(), gn), "sk_GENERAL_NAME_push");
  }
  if (sk_GENERAL_NAME_num(names.get()) == 0) return;
  Check(X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT),
        "subjectAltName");
}

void Sign(X509* cert, EVP_PKEY* key) { Check(X509_sign(cert, key, EVP_sha256()), "X509_sign"); }

void WriteFile(const std::string& path, std::string_view contents) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
}

void RenameOrDie(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    std::perror(absl::StrCat("rename ", from, " -> ", to).c_str());
    std::abort();
  }
}

}  // namespace

Pem MakeCa(std::string_view common_name) {
  Key key = NewKey();
  X509_NAME* subject = Subject(common_name, "");
  Cert cert = NewCert(key.get(), subject, -absl::Hours(1), absl::Hours(24 * 3650));
  // Self-signed: issuer = subject, and the certificate is its own issuer for
  // authorityKeyIdentifier (which therefore needs subjectKeyIdentifier first).
  Check(X509_set_issuer_name(cert.get(), subject), "X509_set_issuer_name");
  X509_NAME_free(subject);
  AddExtension(cert.get(), cert.get(), NID_basic_constraints, "critical,CA:TRUE");
  AddExtension(cert.get(), cert.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
  AddExtension(cert.get(), cert.get(), NID_subject_key_identifier, "hash");
  AddExtension(cert.get(), cert.get(), NID_authority_key_identifier, "keyid:always");
  Sign(cert.get(), key.get());
  return Pem{.cert = CertPem(cert.get()), .key = KeyPem(key.get())};
}

Pem IssueCert(const Pem& ca, const CertSpec& spec) {
  Key ca_key = ParseKey(ca.key);
  Cert ca_cert = ParseCert(ca.cert);
  Key key = NewKey();
  X509_NAME* subject = Subject(spec.common_name, spec.organization);
  Cert cert = NewCert(key.get(), subject, spec.not_before, spec.not_after);
  X509_NAME_free(subject);
  Check(X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())),
        "X509_set_issuer_name");
  AddExtension(cert.get(), ca_cert.get(), NID_basic_constraints, "critical,CA:FALSE");
  // digitalSignature is all an EC key does in TLS (ECDHE key exchange, the
  // key only signs the handshake).
  AddExtension(cert.get(), ca_cert.get(), NID_key_usage, "critical,digitalSignature");
  std::string eku;
  if (spec.server) eku = "serverAuth";
  if (spec.client) eku = eku.empty() ? "clientAuth" : eku + ",clientAuth";
  if (!eku.empty()) AddExtension(cert.get(), ca_cert.get(), NID_ext_key_usage, eku.c_str());
  AddExtension(cert.get(), ca_cert.get(), NID_subject_key_identifier, "hash");
  AddExtension(cert.get(), ca_cert.get(), NID_authority_key_identifier, "keyid:always");
  AddSans(cert.get(), spec);
  Sign(cert.get(), ca_key.get());
  return Pem{.cert = CertPem(cert.get()), .key = KeyPem(key.get())};
}

void WritePem(const std::string& path, std::string_view pem) {
  std::string tmp = path + ".tmp-XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) {
    std::perror(tmp.c_str());
    std::abort();
  }
  close(fd);
  WriteFile(tmp, pem);
  RenameOrDie(tmp, path);
}

void WriteSecretVolume(const std::string& dir, const std::map<std::string, std::string>& files) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  // The kubelet names the directories after the time; a fresh mkdtemp name
  // is as good and cannot collide.
  std::string data_dir = dir + "/..XXXXXX";
  if (mkdtemp(data_dir.data()) == nullptr) {
    std::perror(data_dir.c_str());
    std::abort();
  }
  for (const auto& [name, contents] : files) WriteFile(data_dir + "/" + name, contents);
  std::error_code ec;
  fs::path old_target = fs::read_symlink(dir + "/..data", ec);
  // One rename switches every file at once.
  std::string tmp_link = dir + "/..data_tmp";
  fs::remove(tmp_link, ec);
  fs::create_symlink(fs::path(data_dir).filename(), tmp_link);
  RenameOrDie(tmp_link, dir + "/..data");
  for (const auto& [name, contents] : files) {
    fs::path link = fs::path(dir) / name;
    if (!fs::is_symlink(fs::symlink_status(link))) {
      fs::remove(link, ec);
      fs::create_symlink(fs::path("..data") / name, link);
    }
  }
  if (!old_target.empty()) fs::remove_all(fs::path(dir) / old_target, ec);
}

}  // namespace cuckoo::testing
