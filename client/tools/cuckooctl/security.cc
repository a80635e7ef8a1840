// The token and TLS, each from its flag, else its environment variable; and
// hash-token, which makes a token and its entry for the server's file.
#include "client/tools/cuckooctl/security.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "client/access_token.h"
#include "client/tools/cuckooctl/commands.h"
#include "client/tools/cuckooctl/output.h"

namespace cuckoo::ctl {
namespace {

// A value and where it came from ("--ca" or "$CUCKOO_CA"), for errors.
struct Setting {
  std::string value;
  std::string source;
};

std::optional<Setting> FromFlag(const CommandLine& cl, const std::string& flag) {
  if (std::optional<std::string> v = cl.Get(flag)) return Setting{*v, "--" + flag};
  return std::nullopt;
}

// Unset and empty are the same, as for $CUCKOO_TARGET.
std::optional<Setting> FromEnv(const char* name) {
  if (const char* v = getenv(name); v != nullptr && *v != '\0') {
    return Setting{v, absl::StrCat("$", name)};
  }
  return std::nullopt;
}

std::optional<Setting> FlagOrEnv(const CommandLine& cl, const std::string& flag, const char* env) {
  if (std::optional<Setting> s = FromFlag(cl, flag)) return s;
  return FromEnv(env);
}

// Sets options.token from --token or --token-file, else $CUCKOO_TOKEN or
// $CUCKOO_TOKEN_FILE.
std::optional<Failure> ParseToken(const CommandLine& cl, client::ClientOptions& options) {
  // A flag replaces both variables: --token wins over $CUCKOO_TOKEN_FILE too.
  const bool token_flags = cl.Has("token") || cl.Has("token-file");
  const std::optional<Setting> token =
      token_flags ? FromFlag(cl, "token") : FromEnv("CUCKOO_TOKEN");
  const std::optional<Setting> token_file =
      token_flags ? FromFlag(cl, "token-file") : FromEnv("CUCKOO_TOKEN_FILE");
  if (token && token_file) {
    return UsageError(
        absl::StrFormat("give %s or %s, not both", token->source, token_file->source));
  }
  if (token_file) {
    // More than a token can be is refused by ValidateToken below.
    absl::StatusOr<std::string> read = ReadFileToString(token_file->value, 4096);
    if (!read.ok()) {
      return UsageError(absl::StrFormat("cannot read %s=%s: %s", token_file->source,
                                        token_file->value, read.status().message()));
    }
    std::string contents = *std::move(read);
    absl::StripTrailingAsciiWhitespace(&contents);
    options.token = std::move(contents);
    if (options.token.empty()) {
      return UsageError(
          absl::StrFormat("%s=%s holds no token", token_file->source, token_file->value));
    }
  } else if (token) {
    options.token = token->value;
  }
  if (token || token_file) {
    if (absl::Status s = client::ValidateToken(options.token); !s.ok()) {
      return UsageError(
          absl::StrFormat("%s: %s", (token ? token : token_file)->source, s.message()));
    }
  }
  return std::nullopt;
}

// Sets options.tls from --tls, --ca, --cert, --key and --tls-server-name,
// else their variables; --tls=false turns TLS off whatever they say.
std::optional<Failure> ParseTls(const CommandLine& cl, client::ClientOptions& options) {
  std::optional<Setting> tls = FlagOrEnv(cl, "tls", "CUCKOO_TLS");
  bool tls_on = false;
  if (tls) {
    // The flag's value is already true or false (ParseArgs).
    const std::string v = absl::AsciiStrToLower(tls->value);
    if (v == "1" || v == "true" || v == "yes") {
      tls_on = true;
    } else if (v != "0" && v != "false" && v != "no") {
      return UsageError(
          absl::StrFormat("%s=\"%s\": expected 1 or 0 (true or false)", tls->source, tls->value));
    }
  }
  const bool tls_off_by_flag = cl.Has("tls") && !tls_on;
  std::optional<Setting> files[3];
  const char* names[3] = {"ca", "cert", "key"};
  const char* envs[3] = {"CUCKOO_CA", "CUCKOO_CERT", "CUCKOO_KEY"};
  for (int i = 0; i < 3; ++i) {
    files[i] = FromFlag(cl, names[i]);
    if (files[i] && tls_off_by_flag) {
      return UsageError(absl::StrFormat("--%s needs TLS, which --tls=false turns off", names[i]));
    }
    // --tls=false: no TLS, whatever the environment says.
    if (!files[i] && !tls_off_by_flag) files[i] = FromEnv(envs[i]);
    if (files[i] && files[i]->value.empty()) {
      return UsageError(absl::StrFormat("%s must not be empty: give a PEM file", files[i]->source));
    }
    tls_on |= files[i].has_value();
  }
  const std::optional<Setting>& ca = files[0];
  const std::optional<Setting>& cert = files[1];
  const std::optional<Setting>& key = files[2];
  std::optional<Setting> server_name = FromFlag(cl, "tls-server-name");
  if (server_name && !tls_on) {
    return UsageError("--tls-server-name needs TLS: give --tls, or --ca");
  }
  if (!tls_on) return std::nullopt;
  if (!server_name) server_name = FromEnv("CUCKOO_TLS_SERVER_NAME");
  if (cert.has_value() != key.has_value()) {
    return UsageError(
        cert ? absl::StrFormat("%s needs its private key: give --key too", cert->source)
             : absl::StrFormat("%s needs its certificate: give --cert too", key->source));
  }
  // One file at a time, so that an error names the flag it came from.
  for (const std::optional<Setting>* file : {&ca, &cert, &key}) {
    if (!*file) continue;
    const bool is_ca = file == &ca;
    absl::StatusOr<client::TlsOptions> loaded =
        is_ca ? client::LoadTlsFiles((*file)->value, "", "")
              : client::LoadTlsFiles("", cert->value, key->value);
    if (!loaded.ok()) {
      const bool key_failed =
          !is_ca && absl::StrContains(loaded.status().message(), "private key file");
      return UsageError(absl::StrFormat("%s: %s", key_failed ? key->source : (*file)->source,
                                        loaded.status().message()));
    }
    if (is_ca) {
      options.tls.root_certs_pem = loaded->root_certs_pem;
    } else {
      options.tls.cert_chain_pem = loaded->cert_chain_pem;
      options.tls.private_key_pem = loaded->private_key_pem;
      break;  // The key was loaded with the certificate.
    }
  }
  options.tls.enabled = true;
  if (server_name) {
    if (server_name->value.empty()) {
      return UsageError(absl::StrFormat("%s must not be empty", server_name->source));
    }
    options.tls.server_name = server_name->value;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Failure> ParseSecurity(const CommandLine& cl, client::ClientOptions& options) {
  if (std::optional<Failure> f = ParseToken(cl, options)) return f;
  return ParseTls(cl, options);
}

// 128 bits in base64: the shortest token of your own hash-token accepts.
constexpr size_t kMinOwnTokenChars = 22;

int RunHashToken(const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a NAME for the token")) return Fail(*f);
  std::vector<std::string> grants = {"read:*"};
  if (auto it = cl.all.find("grant"); it != cl.all.end()) grants = it->second;
  std::string token;
  if (cl.Bool("stdin")) {
    // Bounded: a token is at most 512 characters; more is refused below.
    char buffer[4096];
    const size_t n = fread(buffer, 1, sizeof buffer, stdin);
    if (ferror(stdin)) {
      return Fail(
          UsageError(absl::StrFormat("cannot read the token from stdin: %s", strerror(errno))));
    }
    token.assign(buffer, n);
    absl::StripTrailingAsciiWhitespace(&token);
    if (token.empty()) return Fail(UsageError("--stdin: stdin holds no token"));
  } else {
    absl::StatusOr<std::string> made = client::NewAccessToken();
    if (!made.ok()) return Fail(UsageError(std::string(made.status().message())));
    token = *std::move(made);
  }
  absl::StatusOr<std::string> entry = client::TokenEntry(cl.positional[1], token, grants);
  if (!entry.ok()) {
    // The token is checked last, so a bad token is the one from stdin.
    return Fail(UsageError(
        absl::StrFormat("%s%s", cl.Bool("stdin") ? "--stdin: " : "", entry.status().message())));
  }
  // A token is the only secret between a caller and the server (the Redis
  // port's AUTH can be tried fast): a guessable one is refused. Its
  // randomness cannot be measured; its length bounds it.
  if (token.size() < kMinOwnTokenChars) {
    return Fail(UsageError(absl::StrFormat(
        "--stdin: a token of %d characters cannot hold 128 bits of randomness; use at least %d "
        "random characters (128 random bits in base64), or run hash-token without --stdin to "
        "make one (256 bits)",
        token.size(), kMinOwnTokenChars)));
  }
  return Emit(absl::StrCat(token, "\n", *entry, "\n"));
}

}  // namespace cuckoo::ctl
