// cuckooctl: the operator's command-line client for cuckood.
//
//   cuckooctl create users --capacity=100M --fpr=0.001
//   cuckooctl insert users --file=ids.txt --quiet
//   cuckooctl lookup users alice bob          # present<TAB>alice ...; exit 1 if any absent
//   cuckooctl export users --file=users.cuckoo  # a backup; import NAME --file=... restores it
//   cuckooctl health --timeout=2s             # Docker HEALTHCHECK
//   cuckooctl --tls --ca=ca.pem --token-file=ops.token list
//   cuckooctl hash-token billing-reader --grant=read:billing.*  # a token and its entry
//
// Everything a user can type is documented in kUsage / kCommands below (and
// printed by --help); client/README.md repeats it with examples.
//
// Design notes:
// - Flags are parsed by hand: one table (kFlags) says which flag takes a value
//   and which commands accept it, so "--flag value" is unambiguous and a flag
//   may stand before or after the command.
// - Key commands stream: keys are read in chunks (kChunkKeys keys or
//   kChunkBytes bytes), each chunk is sent while the next one is read, and its
//   results are printed before the next is sent. Memory stays bounded for any
//   input size; a slow producer (tail -f) gets its answers without waiting for
//   a full chunk, because a chunk is cut short when no more input is ready.
// - stdout carries only results (one line or JSON object per key); the text
//   summary and progress go to stderr, so `cuckooctl lookup ... | grep absent`
//   works. With --quiet the summary is the only result and goes to stdout.
#include <errno.h>
#include <fcntl.h>
#include <grpc/grpc.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/json.h"
#include "base/units.h"
#include "client/access_token.h"
#include "client/cuckoo_client.h"
#include "cuckoo_version.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace cuckoo::ctl {
namespace {

namespace v1 = ::cuckoo::v1;
namespace health = ::grpc::health::v1;

// Exit codes; part of the interface (see kUsage).
constexpr int kExitOk = 0;
constexpr int kExitSomeKeys = 1;
constexpr int kExitUsage = 2;
constexpr int kExitServer = 3;

// A chunk of keys sent with one client call (itself split by the client into
// requests that fit the server's limits).
constexpr size_t kChunkKeys = 10'000;
constexpr size_t kChunkBytes = 4 << 20;
// A "line" longer than this is not a key file: refuse rather than buffer it.
constexpr size_t kMaxLineBytes = 64 << 20;
constexpr auto kProgressInterval = std::chrono::milliseconds(500);

constexpr char kUsage[] =
    R"txt(cuckooctl: command-line client for cuckood, a server of named cuckoo filters.

Usage: cuckooctl [GLOBAL FLAGS] COMMAND [ARGUMENTS] [FLAGS]
       cuckooctl help [COMMAND]    (or cuckooctl [COMMAND] --help)

Filters:
  create NAME --capacity=N [--fpr=RATE | --fingerprint-bits=F] [--bucket-size=B]
              [--semi-sort[=true|false]] [--shards=S] [--max-kicks=K] [--seed=N]
              [--growth-factor=G [--max-capacity=N]] [--if-not-exists]
                        create a filter; prints its info and whether it was created
  info NAME             a filter's settings and state
  list                  every filter, sorted by name
  drop NAME             remove a filter and its snapshot, and free its memory
  snapshot [NAME] [--changed-only]
                        write snapshots (of NAME, or every filter) to the
                        server's disk now; prints the files written
  export NAME [--file=PATH|-]
                        write filter NAME's snapshot file (a backup) to PATH,
                        or to stdout (the default; never to a terminal)
  import NAME [--file=PATH|-]
                        create filter NAME from a snapshot file (from export,
                        or a server's data directory) read from PATH or stdin
  server-info           the server's version, limits, memory use, mode (single or
                        cluster) and log position
  health [SERVICE]      grpc.health.v1 check; prints SERVING, NOT_SERVING, ...

Access:
  hash-token NAME [--grant=KIND:PATTERN ...] [--stdin]
                        make a new random token (or hash one read from stdin
                        with --stdin) and print it, then its line for cuckood's
                        --auth-tokens file: token NAME sha256:HEX GRANT...
                        (KIND read, write or admin; default --grant=read:*)

Keys:
  insert NAME [KEY...] [--if-absent] [--request-id=ID]
                                       add keys
  lookup NAME [KEY...]                 may the filter hold these keys?
  delete NAME [KEY...] [--request-id=ID]
                                       remove one copy of each key
  count NAME [KEY...]                  estimated number of copies of each key

  Keys come from the KEY arguments, else from --file=PATH (one key per line;
  --file=- is stdin), else from stdin. A trailing "\r" is stripped and empty
  lines are skipped: a key cannot be empty. Input of any size is streamed in
  batches of 10000 keys.
  Output, in input order, one line per key: RESULT<TAB>KEY, where RESULT is
    insert  inserted | already_present | full
    lookup  present | absent        (present may be a false positive)
    delete  deleted | not_found
    count   the estimated number of copies (never less than the truth)
  then a summary line on stderr, ending with the log position the last batch
  was applied or read at. With --quiet, only the summary, on stdout.
  With --format=json, JSON Lines: one object per key, e.g.
  {"key":"alice","result":"present"} or {"key":"alice","count":2}, then
  {"summary":{...}} as the last line (only if the command completed).
  Key flags:
    --file=PATH     read keys from PATH, one per line ("-": stdin)
    --quiet         print only the summary
    --progress      show "VERB N keys (R keys/s)" on stderr every 0.5 s
                    (default: for keys from a file or stdin when stderr is a
                    terminal and stdout is not, or --quiet is given)
    --no-progress   never show it
    --request-id=ID insert, delete: apply at most once; the same command
                    with the same keys and ID again answers with the first
                    run's results (see cuckooctl help delete)

Global flags (before or after the command):
  --target=HOST:PORT[,HOST:PORT...]
                       server address, or the replicas of a cluster, used
                       round-robin, or unix:PATH / unix:///ABSOLUTE/PATH for a
                       server's Unix socket (default: $CUCKOO_TARGET, else
                       localhost:50051)
  --timeout=DURATION   deadline of each RPC, e.g. 500ms, 2s, 1m (default 30s)
  --retry-timeout=DURATION
                       how long to retry an RPC that fails UNAVAILABLE (server
                       down, cluster electing a leader), 0: no retries (default 30s)
  --format=text|json   output format (default text)
  --token=TOKEN        access token, sent as "authorization: Bearer TOKEN" with
                       every call (default: $CUCKOO_TOKEN)
  --token-file=PATH    read the token from PATH, trailing whitespace and line
                       break removed (default: $CUCKOO_TOKEN_FILE); give one of
                       --token and --token-file
  --tls[=true|false]   connect with TLS, checking the server's certificate
                       against the system's CAs or --ca (default: $CUCKOO_TLS,
                       1 or true for TLS)
  --ca=PEM             the CA certificate(s) the server's certificate must
                       chain to; implies --tls (default: $CUCKOO_CA)
  --cert=PEM --key=PEM this client's certificate and private key, for servers
                       that ask for one (mutual TLS); imply --tls (default:
                       $CUCKOO_CERT, $CUCKOO_KEY)
  --tls-server-name=NAME
                       check the server's certificate for NAME instead of the
                       target's host, e.g. when the target is an IP address
                       (default: $CUCKOO_TLS_SERVER_NAME)
  Flags win over the environment. hash-token takes none of these.
  --help, -h           help
  --version            print the version
  Flags are written --flag=value or --flag value; "--" ends the flags (for keys
  that start with "-").

Exit codes:
  0  success. lookup, count: every key may be present; insert: no key full;
     delete: every key deleted; health: SERVING
  1  the command ran but some key had the other outcome (absent, count 0, full,
     not_found); health: any status but SERVING
  2  usage error or local problem (bad flag, unreadable file, unwritable output)
  3  the server returned an error or could not be reached; stderr says
     cuckooctl: CODE: message   e.g. cuckooctl: NOT_FOUND: filter "x" not found
)txt";

// Commands, as bits so a flag can list the commands that accept it.
enum Command : uint32_t {
  kCreate = 1 << 0,
  kInfo = 1 << 1,
  kList = 1 << 2,
  kDrop = 1 << 3,
  kServerInfo = 1 << 4,
  kHealth = 1 << 5,
  kInsert = 1 << 6,
  kLookup = 1 << 7,
  kDelete = 1 << 8,
  kCount = 1 << 9,
  kHelp = 1 << 10,
  kSnapshot = 1 << 11,
  kExport = 1 << 12,
  kImport = 1 << 13,
  kHashToken = 1 << 14,
};
constexpr uint32_t kKeyCommands = kInsert | kLookup | kDelete | kCount;
constexpr uint32_t kAllCommands = ~uint32_t{0};
// The commands that talk to a server: all but hash-token.
constexpr uint32_t kServerCommands = kAllCommands & ~uint32_t{kHashToken};

struct CommandSpec {
  const char* name;
  Command id;
  const char* help;  // Printed by `cuckooctl help NAME`.
};

constexpr char kKeyInputHelp[] = R"txt(
Keys come from the KEY arguments, else from --file=PATH (one key per line;
--file=- is stdin), else from stdin. A trailing "\r" is stripped and empty lines
are skipped: a key cannot be empty (an empty KEY argument is a usage error).
Input of any size is streamed, 10000 keys per batch; results are printed per
batch, in input order.

  --file=PATH     read keys from PATH, one per line ("-": stdin)
  --quiet         print only the summary (on stdout)
  --progress      show "VERB N keys (R keys/s)" on stderr every 0.5 s, ending
                  with a newline (default: for keys from a file or stdin when
                  stderr is a terminal and stdout is not, or --quiet is given)
  --no-progress   never show it

Text output: RESULT<TAB>KEY per key on stdout, then a summary line on stderr,
e.g. "lookup users: 3 keys: 2 present, 1 absent; log position 17" (the
server's log position the last batch was applied or read at). JSON output
(--format=json): one object per line (JSON Lines), {"key":"alice",...} per
key, then {"summary":{"command":...,"filter":...,"keys":N,...,
"log_position":P}} last; the summary is missing if the command failed part
way. A key that is not valid UTF-8 is given as "key_base64" instead of "key".
)txt";

// Printed after the help of insert and delete.
constexpr char kRequestIdHelp[] =
    R"(  --request-id=ID apply at most once. Every batch is sent with a request id,
                  and again with the same one when it is retried, so no
                  server applies it twice. Running the same command with the
                  same keys and ID again within the server's dedup window
                  (server-info) answers with the first run's results instead
                  of applying them again. ID: 1 to 100 of the characters ! to
                  ~. The batches after the first get ID/1, ID/2, ... (and
                  ID.0, ID.1, ... the parts of a batch over the server's
                  limits): give the same input in the same batches, as KEY
                  arguments or --file, not from a pipe. Default: a random ID
                  per batch.
)";

const CommandSpec kCommands[] = {
    {"create", kCreate, R"(Usage: cuckooctl create NAME --capacity=N [FLAGS]

Creates filter NAME, sized so that N keys always fit. NAME is 1 to 128 of
A-Z a-z 0-9 . _ - and starts with a letter or digit. Prints the filter's info
and whether it was created.

  --capacity=N          keys the filter must hold (required), 1 to 2^40; may
                        end in k, M, G or T, either case (x1000, x10^6,
                        x10^9, x10^12)
  --fpr=RATE            target false-positive rate in (0, 1), e.g. 0.001
                        (default 0.002: 12-bit fingerprints with 4-slot buckets,
                        semi-sorted: about 11.6 bits per key)
  --fingerprint-bits=F  fingerprint size in bits, 4 to 32, instead of --fpr
  --bucket-size=B       slots per bucket: 2, 4 (default) or 8
  --semi-sort[=true|false]
                        semi-sorted buckets: f - 1 bits per slot for the
                        false-positive rate of f-bit fingerprints; true needs
                        bucket size 4 and at least 5 fingerprint bits. Absent:
                        chosen by the server, semi-sorted when --fpr (or its
                        default) picks 5 to 16 bits with 4-slot buckets
  --shards=S            independent shards, a power of two from 1 to 4096
                        (default: chosen from the capacity)
  --max-kicks=K         longest eviction chain per insert, 1 to 10000 (default 2000)
  --seed=N              64-bit hash seed (default random); filters with the same
                        settings and seed give identical answers
  --growth-factor=G     let the filter grow past its capacity instead of
                        answering FULL: 2 to 8 (default: off, a fixed filter).
                        A shard that fills adds a table G times larger with
                        longer fingerprints, so the false-positive rate stays
                        under --fpr at any size. Off by default because growth
                        costs from the first key: every generation's rate is a
                        share of --fpr, so even the first table has longer
                        fingerprints (about 2 to 3 more bits per key than a
                        fixed filter), and each later one a bit or so more.
                        Use it when the final size is unknown. Not with
                        --fingerprint-bits (the sizes come from --fpr)
  --max-capacity=N      with --growth-factor: the most keys it may hold, a hard
                        ceiling (keys past it answer full; an insert while it
                        holds N fails with RESOURCE_EXHAUSTED), more than
                        --capacity; k/M/G/T as for --capacity (default: as
                        far as the hash bits allow).
                        Growth is charged to the server's --memory-budget; when
                        the budget is used up, inserts into growing filters
                        fail with RESOURCE_EXHAUSTED and nothing is evicted
  --if-not-exists       if NAME exists with the same settings, print it
                        (created: false) instead of failing with ALREADY_EXISTS
)"},
    {"info", kInfo, R"(Usage: cuckooctl info NAME

Prints a filter's settings (capacity, fingerprint_bits, bucket_size, semi_sort,
shards, max_kicks, seed, growth_factor, max_capacity, ...) and state (items,
load_factor, memory_bytes, bits_per_item, expected_false_positive_rate, ...).
A growing filter (create --growth-factor) also shows its rate budget
(false_positive_rate), the bound no lookup's false-positive rate passes
(false_positive_bound), the keys it can reach (reachable_capacity) and one
line per generation: fingerprint bits, shards that have it, slots, items,
memory and its share of the rate.
)"},
    {"list", kList, R"(Usage: cuckooctl list

Prints every filter, sorted by name: a table in text, {"filters":[...]} in JSON.
CAPACITY is the capacity the filter was created with; REACHABLE the keys it can
hold once grown as far as it may (its max_capacity when set; the capacity for a
fixed filter). LOAD is items over the slots of the tables it has now.
)"},
    {"drop", kDrop, R"(Usage: cuckooctl drop NAME

Removes a filter and its snapshot file and frees its memory; prints the bytes
freed.
)"},
    {"snapshot", kSnapshot, R"(Usage: cuckooctl snapshot [NAME] [--changed-only]

Writes a snapshot of filter NAME, or of every filter, to the server's data
directory now, and returns once it is on disk (fsync'ed): keys inserted before
the command survive a crash of the server. Prints one line per file written
(filter, items, bytes, path, time taken) and a total.

  --changed-only   skip filters with no change since their last snapshot

The RPC deadline is --timeout if given, else 10 minutes.
)"},
    {"export", kExport, R"(Usage: cuckooctl export NAME [--file=PATH|-]

Writes filter NAME's snapshot file, exactly as the server would keep it in its
data directory (docs/SNAPSHOT_FORMAT.md), to PATH, or to stdout with --file=-
or no --file. The server keeps serving, and NAME keeps taking writes, while it
is exported: keys acknowledged before the command started are in the file,
later ones may be. A backup, which `cuckooctl import` (on this server or
another) turns into a filter again:
  cuckooctl export users --file=users.cuckoo
  cuckooctl import users-restored --file=users.cuckoo
The file holds the filter's whole tables, empty slots included: its size
follows the capacity, not the items (a filter created for 10M keys exports about
15 MiB with 2 keys in it; the empty slots are zeros, which compress to almost
nothing: cuckooctl export users | gzip > users.cuckoo.gz, and
gunzip -c users.cuckoo.gz | cuckooctl import users-restored).
The data is streamed (memory stays small whatever the filter's size). PATH is
fsync'ed when complete, and removed if the export fails. A binary file is
never written to a terminal: redirect stdout or give --file. Prints a summary
(items, bytes, the server's log position when the export started) on stdout,
or on stderr when the file goes to stdout.

  --file=PATH     where to write ("-": stdout, the default)

The RPC deadline is --timeout if given, else 1 hour.
)"},
    {"import", kImport, R"(Usage: cuckooctl import NAME [--file=PATH|-]

Creates filter NAME from a snapshot file (written by cuckooctl export, or a
NAME.cuckoo from a server's data directory), read from PATH, or from stdin
with --file=- or no --file (never from a terminal). NAME may differ from the
exported filter's name. The server checks the whole file before it creates
anything (a damaged or truncated file fails with DATA_LOSS or
INVALID_ARGUMENT naming the problem), then makes the filter durable before it
answers. Fails with ALREADY_EXISTS if NAME exists, and FAILED_PRECONDITION on
a cluster replica (not supported yet). Prints the new filter's info.

  --file=PATH     where to read the snapshot ("-": stdin, the default)

The RPC deadline is --timeout if given, else 1 hour.
)"},
    {"server-info", kServerInfo, R"(Usage: cuckooctl server-info

Prints the server's version, mode (single: one node with its write-ahead log;
cluster: a replica of a cluster whose log is a NATS JetStream stream),
durability, limits (max_batch_keys, max_key_bytes, max_message_bytes,
max_filters, memory_budget_bytes), current use, the log position it has
applied (applied_log_position) and how long it remembers request ids
(dedup_window). In cluster mode also the replica's view of its cluster:
replica_id, nats_status, nats_server, stream, stream_replicas,
stream_first_position, stream_last_position and lag (how far the replica is
behind the stream).
)"},
    {"health", kHealth, R"(Usage: cuckooctl health [SERVICE] [--quiet]

Asks the standard grpc.health.v1.Health/Check for SERVICE ("" = the whole
server, or e.g. cuckoo.v1.FilterService) and prints the status: SERVING,
NOT_SERVING, UNKNOWN or SERVICE_UNKNOWN. Exit 0 only for SERVING, 1 for any
other status, 3 if the server cannot be reached or does not know SERVICE.
--quiet prints nothing. For a container health check:
  cuckooctl health --quiet --timeout=2s
)"},
    {"insert", kInsert, R"(Usage: cuckooctl insert NAME [KEY...] [--if-absent] [FLAGS]

Adds keys. Per key: inserted, already_present (only with --if-absent: the filter
already (probably) holds it) or full (no room; nothing changed). Exit 0 if no
key was full, 1 otherwise.

  --if-absent     insert a key only if the filter does not (probably) hold it
)"},
    {"lookup", kLookup, R"(Usage: cuckooctl lookup NAME [KEY...] [FLAGS]

Asks whether the filter may hold each key. Per key: present (it may: always
for keys inserted and not deleted, and with about the filter's false-positive
rate for others) or absent (certainly not). Exit 0 if every key is present,
1 otherwise.
)"},
    {"delete", kDelete, R"(Usage: cuckooctl delete NAME [KEY...] [FLAGS]

Removes one copy of each key. Per key: deleted or not_found. Exit 0 if every
key was deleted, 1 otherwise. Only delete keys you inserted: deleting another
key may remove a fingerprint it shares with an inserted key.

)"},
    {"count", kCount, R"(Usage: cuckooctl count NAME [KEY...] [FLAGS]

Estimates how many copies of each key the filter holds (like RedisBloom's
CF.COUNT): never less than the truth, more when other keys share the
fingerprint. Exit 0 if every count is at least 1, 1 otherwise.
)"},
    {"hash-token", kHashToken,
     R"(Usage: cuckooctl hash-token NAME [--grant=KIND:PATTERN ...] [--stdin]

Makes a new access token for cuckood's --auth-tokens file: 32 random bytes
(OpenSSL's RAND_bytes) in base64url after "ck_". Prints exactly two lines on
stdout: the token, then the file's entry for it,
  token NAME sha256:HEX GRANT...
where HEX is the SHA-256 of the token (printf %s "$TOKEN" | sha256sum). The
server keeps only the hash: hand the token to its user, add the entry to the
file (the server reloads it within seconds, or on SIGHUP). Talks to no server.

  --grant=KIND:PATTERN  what the token may do, any number of times (default
                        read:*). KIND: read (Lookup, Count, GetFilter,
                        ListFilters), write (read + Insert, Delete) or admin
                        (everything); PATTERN: filter names, * for any run
                        of characters and ? for one, e.g. write:events.*
  --stdin               hash the token read from stdin (trailing whitespace
                        and line break removed) instead of making one: for a
                        token of your own, 22 to 512 of the characters ! to ~
                        (22: 128 random bits in base64)

NAME (1 to 64 of A-Z a-z 0-9 . _ -) names the caller in the server's logs and
PERMISSION_DENIED messages. Example:
  cuckooctl hash-token billing-reader --grant=read:billing.*
  cuckooctl hash-token ops --grant='admin:*' | tail -1 >> tokens.conf
)"},
    {"help", kHelp, R"(Usage: cuckooctl help [COMMAND]

Prints the usage of cuckooctl or of COMMAND.
)"},
};

constexpr char kGlobalFlagsHelp[] = R"(
Global flags:
  --target=HOST:PORT[,HOST:PORT...]
                       server address, or the replicas of a cluster, used
                       round-robin, or unix:PATH / unix:///ABSOLUTE/PATH for a
                       server's Unix socket (default: $CUCKOO_TARGET, else
                       localhost:50051)
  --timeout=DURATION   deadline of each RPC, e.g. 500ms, 2s, 1m (default 30s)
  --retry-timeout=DURATION
                       how long to retry an RPC that fails UNAVAILABLE, with
                       backoff (default 30s; 0: no retries)
  --format=text|json   output format (default text)
  --token=TOKEN, --token-file=PATH
                       access token sent with every call (default:
                       $CUCKOO_TOKEN, $CUCKOO_TOKEN_FILE)
  --tls, --ca=PEM, --cert=PEM --key=PEM, --tls-server-name=NAME
                       TLS, the CA to check the server with, this client's
                       certificate (mutual TLS), the name to check (default:
                       $CUCKOO_TLS, $CUCKOO_CA, $CUCKOO_CERT, $CUCKOO_KEY,
                       $CUCKOO_TLS_SERVER_NAME); see cuckooctl --help

Exit codes: 0 success; 1 some key had the other outcome (or health is not
SERVING); 2 usage error or local problem; 3 server error or unreachable.
)";

struct FlagSpec {
  const char* name;
  bool takes_value;
  uint32_t commands;  // Which commands accept it.
};

constexpr FlagSpec kFlags[] = {
    {"target", true, kServerCommands},
    {"timeout", true, kServerCommands},
    {"retry-timeout", true, kServerCommands},
    {"format", true, kServerCommands},
    {"token", true, kServerCommands},
    {"token-file", true, kServerCommands},
    {"tls", false, kServerCommands},
    {"ca", true, kServerCommands},
    {"cert", true, kServerCommands},
    {"key", true, kServerCommands},
    {"tls-server-name", true, kServerCommands},
    {"help", false, kAllCommands},
    {"version", false, kAllCommands},
    {"capacity", true, kCreate},
    {"fpr", true, kCreate},
    {"fingerprint-bits", true, kCreate},
    {"bucket-size", true, kCreate},
    {"semi-sort", false, kCreate},
    {"shards", true, kCreate},
    {"max-kicks", true, kCreate},
    {"seed", true, kCreate},
    {"growth-factor", true, kCreate},
    {"max-capacity", true, kCreate},
    {"if-not-exists", false, kCreate},
    {"changed-only", false, kSnapshot},
    {"if-absent", false, kInsert},
    {"request-id", true, kInsert | kDelete},
    {"file", true, kKeyCommands | kExport | kImport},
    {"quiet", false, kKeyCommands | kHealth},
    {"progress", false, kKeyCommands},
    {"no-progress", false, kKeyCommands},
    {"grant", true, kHashToken},
    {"stdin", false, kHashToken},
};

// A problem to report on one stderr line, with the exit code it implies.
struct Failure {
  int code;
  std::string message;
};

Failure UsageError(std::string message) { return {kExitUsage, std::move(message)}; }

// `target` is added when the server could not be reached and the message
// does not say where (it does for "connection refused", not for timeouts).
Failure ServerError(const absl::Status& status, const std::string& target) {
  std::string message =
      absl::StrFormat("%s: %s", absl::StatusCodeToString(status.code()), status.message());
  if ((status.code() == absl::StatusCode::kUnavailable ||
       status.code() == absl::StatusCode::kDeadlineExceeded) &&
      message.find(target) == std::string::npos) {
    message += absl::StrFormat(" (target %s)", target);
  }
  return {kExitServer, std::move(message)};
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

const FlagSpec* FindFlag(std::string_view name) {
  for (const FlagSpec& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// Command line.

struct CommandLine {
  std::vector<std::string> positional;         // The command, then its arguments.
  std::map<std::string, std::string> flags;    // Canonical name -> value ("true" for booleans).
  std::map<std::string, std::string> spelled;  // Canonical name -> as typed, for errors.
  // Canonical name -> every value given, in order (flags, above, keeps the
  // last): for --grant, which may be repeated.
  std::map<std::string, std::vector<std::string>> all;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const {
    auto it = flags.find(name);
    if (it == flags.end()) return std::nullopt;
    return it->second;
  }
  bool Bool(const std::string& name) const {
    auto v = Get(name);
    return v && *v == "true";
  }
};

std::optional<Failure> ParseArgs(int argc, char** argv, CommandLine& cl) {
  bool only_positional = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_positional) {
      cl.positional.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "-h") {
      cl.flags["help"] = "true";
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      cl.positional.push_back(std::move(arg));
      continue;
    }
    if (arg[1] != '-') {
      return UsageError(
          absl::StrFormat("unknown flag %s (see cuckooctl --help; put keys that start with \"-\" "
                          "after \"--\")",
                          arg));
    }
    const size_t eq = arg.find('=');
    std::string typed = arg.substr(0, eq);
    std::string name = typed.substr(2);
    std::replace(name.begin(), name.end(), '_', '-');  // --max_kicks works too.
    const FlagSpec* spec = FindFlag(name);
    if (spec == nullptr) {
      return UsageError(absl::StrFormat("unknown flag %s (see cuckooctl --help)", typed));
    }
    std::string value;
    if (spec->takes_value) {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return UsageError(absl::StrFormat("flag %s needs a value: %s=VALUE", typed, typed));
      }
    } else if (eq == std::string::npos) {
      value = "true";
    } else {
      value = arg.substr(eq + 1);
      if (value == "true" || value == "1" || value == "yes") {
        value = "true";
      } else if (value == "false" || value == "0" || value == "no") {
        value = "false";
      } else {
        return UsageError(
            absl::StrFormat("%s=\"%s\": expected true or false, or no value", typed, value));
      }
    }
    cl.all[name].push_back(value);
    cl.flags[name] = std::move(value);
    cl.spelled[name] = typed;
  }
  return std::nullopt;
}

// Strict parsers: the whole text must be the number.
template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Capacities take a count's suffix (k, M, G, T: base/units.h); the rest are
// plain numbers.
std::optional<Failure> ParseUintFlag(const CommandLine& cl, const std::string& name, uint64_t max,
                                     uint64_t& out) {
  const std::string text = *cl.Get(name);
  uint64_t value = 0;
  bool ok;
  if (name == "capacity" || name == "max-capacity") {
    const absl::StatusOr<uint64_t> count = ParseCount(text);
    ok = count.ok();
    if (ok) value = *count;
  } else {
    ok = ParseNumber(std::string_view(text), value);
  }
  if (!ok || value > max) {
    return UsageError(
        absl::StrFormat("--%s=\"%s\" is not a whole number from 0 to %u", name, text, max));
  }
  out = value;
  return std::nullopt;
}

// "30s", "500ms", "1m30s" (absl's form), or a plain number of seconds;
// positive, or also zero with allow_zero.
std::optional<absl::Duration> ParseTimeout(const std::string& text, bool allow_zero = false) {
  absl::Duration d;
  double seconds = 0;
  if (ParseNumber(std::string_view(text), seconds)) {
    if (!std::isfinite(seconds)) return std::nullopt;
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return std::nullopt;
  }
  if (d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !allow_zero) ||
      d == absl::InfiniteDuration()) {
    return std::nullopt;
  }
  return d;
}

// ---------------------------------------------------------------------------
// Output.

// Buffered stdout that remembers a failed write (reported once, at the end).
class Output {
 public:
  void Write(std::string_view s) {
    if (failed_errno_ != 0 || s.empty()) return;
    if (fwrite(s.data(), 1, s.size(), stdout) != s.size()) failed_errno_ = errno ? errno : EIO;
  }
  void Flush() {
    if (failed_errno_ == 0 && fflush(stdout) != 0) failed_errno_ = errno ? errno : EIO;
  }
  std::optional<Failure> Check() {
    Flush();
    if (failed_errno_ == 0) return std::nullopt;
    return Failure{kExitUsage,
                   absl::StrFormat("cannot write to stdout: %s", strerror(failed_errno_))};
  }

 private:
  int failed_errno_ = 0;
};

std::string Shortest(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : "0";
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    int extra;
    uint32_t cp;
    if (c < 0x80) {
      ++p;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= extra) return false;
    for (int i = 1; i <= extra; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    p += extra + 1;
  }
  return true;
}

// A compact JSON object, built field by field.
class JsonObject {
 public:
  JsonObject& String(std::string_view key, std::string_view value) {
    Key(key);
    out_ += JsonString(value);
    return *this;
  }
  JsonObject& Uint(std::string_view key, uint64_t value) {
    Key(key);
    out_ += absl::StrFormat("%u", value);
    return *this;
  }
  JsonObject& Double(std::string_view key, double value) {
    Key(key);
    out_ += std::isfinite(value) ? Shortest(value) : "null";
    return *this;
  }
  JsonObject& Bool(std::string_view key, bool value) {
    Key(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  JsonObject& Raw(std::string_view key, std::string_view json) {
    Key(key);
    out_ += json;
    return *this;
  }
  // "key":"..." for UTF-8 keys, else "key_base64":"...", so any bytes survive.
  JsonObject& Bytes(std::string_view field_prefix, std::string_view bytes) {
    if (IsValidUtf8(bytes)) return String(field_prefix, bytes);
    return String(std::string(field_prefix) + "_base64",
                  absl::Base64Escape(absl::string_view(bytes.data(), bytes.size())));
  }
  std::string Done() const { return out_ + "}"; }

 private:
  void Key(std::string_view key) {
    if (out_.size() > 1) out_.push_back(',');
    out_ += JsonString(key);
    out_.push_back(':');
  }
  std::string out_ = "{";
};

// Text: "field:   value" lines, aligned.
class TextFields {
 public:
  TextFields& Add(std::string_view field, std::string value) {
    rows_.emplace_back(std::string(field) + ":", std::move(value));
    return *this;
  }
  std::string Done() const {
    size_t width = 0;
    for (const auto& [f, v] : rows_) width = std::max(width, f.size());
    std::string out;
    for (const auto& [f, v] : rows_) {
      out += f;
      out.append(width + 1 - f.size(), ' ');
      out += v;
      out.push_back('\n');
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

double DurationSeconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() / 1e9;
}

// "2m", "1.5s": absl's form.
std::string FormatDuration(const google::protobuf::Duration& d) {
  return absl::FormatDuration(absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos()));
}

// RFC 3339 in UTC, e.g. 2026-11-23T10:15:00.123456Z.
std::string FormatTimestamp(const google::protobuf::Timestamp& t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ",
                          absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos()),
                          absl::UTCTimeZone());
}

std::string FilterInfoJson(const v1::FilterInfo& f) {
  std::string generations = "[";
  for (const v1::FilterInfo::Generation& g : f.generations()) {
    if (generations.size() > 1) generations.push_back(',');
    generations += JsonObject()
                       .Uint("fingerprint_bits", g.fingerprint_bits())
                       .Uint("shards", g.shards())
                       .Uint("slots", g.slots())
                       .Uint("items", g.items())
                       .Uint("memory_bytes", g.memory_bytes())
                       .Double("false_positive_bound", g.false_positive_bound())
                       .Done();
  }
  return JsonObject()
      .String("name", f.name())
      .Uint("capacity", f.capacity())
      .Uint("fingerprint_bits", f.fingerprint_bits())
      .Uint("bucket_size", f.bucket_size())
      .Bool("semi_sort", f.semi_sort())
      .Uint("shards", f.shards())
      .Uint("max_kicks", f.max_kicks())
      // A string: JSON readers that parse numbers as doubles would round a
      // 64-bit seed, and the seed must be exact to recreate the filter.
      .String("seed", absl::StrFormat("%u", f.seed()))
      .Uint("hash_id", f.hash_id())
      .Uint("buckets_per_shard", f.buckets_per_shard())
      .Uint("slots", f.slots())
      .Uint("items", f.items())
      .Double("load_factor", f.load_factor())
      .Uint("memory_bytes", f.memory_bytes())
      .Double("bits_per_item", f.bits_per_item())
      .Double("expected_false_positive_rate", f.expected_false_positive_rate())
      .Double("false_positive_rate_at_capacity", f.false_positive_rate_at_capacity())
      .Raw("last_snapshot_time", f.has_last_snapshot_time()
                                     ? JsonString(FormatTimestamp(f.last_snapshot_time()))
                                     : "null")
      .Uint("last_snapshot_bytes", f.last_snapshot_bytes())
      .Uint("unsnapshotted_changes", f.unsnapshotted_changes())
      .Bool("has_unsnapshotted_changes", f.has_unsnapshotted_changes())
      .Uint("growth_factor", f.growth_factor())
      .Uint("max_capacity", f.max_capacity())
      .Double("false_positive_rate", f.false_positive_rate())
      .Double("false_positive_bound", f.false_positive_bound())
      .Uint("reachable_capacity", f.reachable_capacity())
      .Uint("max_generations", f.max_generations())
      .Raw("generations", generations + "]")
      .Done();
}

// Memory per item, for people: the tables are allocated for the capacity up
// front, so a filter that holds few keys costs many bits each (15 MiB over 2
// keys is 6.3e7 bits per item). Fixed-point, never an exponent; below half
// full with what it costs at capacity beside it.
std::string BitsPerItemText(const v1::FilterInfo& f) {
  if (f.items() == 0) return "n/a (no items)";
  std::string text = absl::StrFormat("%.1f", f.bits_per_item());
  if (f.load_factor() >= 0.5) return text;
  if (f.growth_factor() == 0 && f.capacity() > 0) {
    return absl::StrCat(
        text, absl::StrFormat(" (%u items in tables allocated up front for %u: %.1f at capacity)",
                              f.items(), f.capacity(), 8.0 * f.memory_bytes() / f.capacity()));
  }
  return absl::StrCat(text, absl::StrFormat(" (%u items in tables allocated up front: %.0f%% full)",
                                            f.items(), 100 * f.load_factor()));
}

void AddFilterInfoText(TextFields& t, const v1::FilterInfo& f) {
  t.Add("name", f.name())
      .Add("capacity", absl::StrFormat("%u", f.capacity()))
      .Add("fingerprint_bits", absl::StrFormat("%u", f.fingerprint_bits()))
      .Add("bucket_size", absl::StrFormat("%u", f.bucket_size()))
      .Add("semi_sort", f.semi_sort() ? "true (semi-sorted buckets, f - 1 bits per slot)" : "false")
      .Add("shards", absl::StrFormat("%u", f.shards()))
      .Add("max_kicks", absl::StrFormat("%u", f.max_kicks()))
      .Add("seed", absl::StrFormat("%u", f.seed()))
      .Add("hash_id", absl::StrFormat("%u", f.hash_id()))
      .Add("buckets_per_shard", absl::StrFormat("%u", f.buckets_per_shard()))
      .Add("slots", absl::StrFormat("%u", f.slots()))
      .Add("items", absl::StrFormat("%u", f.items()))
      .Add("load_factor", absl::StrFormat("%.6g", f.load_factor()))
      .Add("memory_bytes",
           absl::StrFormat("%u (%s)", f.memory_bytes(), FormatByteSize(f.memory_bytes())))
      .Add("bits_per_item", BitsPerItemText(f))
      .Add("expected_false_positive_rate",
           absl::StrFormat("%.6g", f.expected_false_positive_rate()))
      .Add("false_positive_rate_at_capacity",
           absl::StrFormat("%.6g", f.false_positive_rate_at_capacity()))
      .Add("last_snapshot_time",
           f.has_last_snapshot_time() ? FormatTimestamp(f.last_snapshot_time()) : "never")
      .Add("last_snapshot_bytes", absl::StrFormat("%u (%s)", f.last_snapshot_bytes(),
                                                  FormatByteSize(f.last_snapshot_bytes())))
      .Add("unsnapshotted_changes",
           absl::StrFormat("%u%s", f.unsnapshotted_changes(),
                           f.has_unsnapshotted_changes()
                               ? " (only in the write-ahead log: a restart replays them)"
                               : ""));
  if (f.growth_factor() == 0) {
    t.Add("growth_factor", "0 (fixed size: inserts past the capacity answer FULL)");
    return;
  }
  t.Add("growth_factor", absl::StrFormat("%u", f.growth_factor()))
      .Add("max_capacity", f.max_capacity() != 0 ? absl::StrFormat("%u", f.max_capacity())
                                                 : std::string("0 (as far as it can grow)"))
      .Add("false_positive_rate",
           absl::StrFormat("%.6g (shared by every generation)", f.false_positive_rate()))
      .Add("false_positive_bound", absl::StrFormat("%.6g (no lookup's rate is higher, at any load)",
                                                   f.false_positive_bound()))
      .Add("reachable_capacity", absl::StrFormat("%u", f.reachable_capacity()))
      .Add("generations",
           absl::StrFormat("%u of at most %u", f.generations_size(), f.max_generations()));
  for (int i = 0; i < f.generations_size(); ++i) {
    const v1::FilterInfo::Generation& g = f.generations(i);
    t.Add(absl::StrFormat("generation %d", i),
          absl::StrFormat("%u-bit fingerprints, %u shards, %u slots, %u items, %s, bound %.3g",
                          g.fingerprint_bits(), g.shards(), g.slots(), g.items(),
                          FormatByteSize(g.memory_bytes()), g.false_positive_bound()));
  }
}

// ---------------------------------------------------------------------------
// Key input.

// A batch of keys: their bytes in one buffer, and views of them built by Seal()
// just before use (a swap or move of `bytes` may move its data).
struct Chunk {
  std::string bytes;
  std::vector<std::pair<size_t, size_t>> spans;  // Offset and size in `bytes`.
  std::vector<std::string_view> keys;
  uint64_t first = 0;  // Index in the whole input of the first key.

  size_t size() const { return spans.size(); }
  bool full() const { return spans.size() >= kChunkKeys || bytes.size() >= kChunkBytes; }
  void Clear(uint64_t first_index) {
    bytes.clear();
    spans.clear();
    keys.clear();
    first = first_index;
  }
  void Add(std::string_view key) {
    spans.emplace_back(bytes.size(), key.size());
    bytes.append(key);
  }
  void Seal() {
    keys.clear();
    keys.reserve(spans.size());
    for (auto [offset, size] : spans) keys.emplace_back(bytes.data() + offset, size);
  }
};

class KeySource {
 public:
  virtual ~KeySource() = default;
  // Replaces `chunk` with the next keys, as many as fit. With may_block, waits
  // for at least one key unless the input is at its end; without, takes only
  // what is available now (possibly none). Once it holds a key, it stops at
  // the first wait, so a slow producer's keys are answered promptly.
  virtual absl::Status Next(Chunk& chunk, bool may_block) = 0;
  // True when every key has been returned.
  virtual bool done() const = 0;
  uint64_t keys_read() const { return keys_read_; }

 protected:
  uint64_t keys_read_ = 0;
};

class ArgsSource : public KeySource {
 public:
  explicit ArgsSource(std::vector<std::string> keys) : keys_(std::move(keys)) {}
  absl::Status Next(Chunk& chunk, bool) override {
    chunk.Clear(keys_read_);
    while (next_ < keys_.size() && !chunk.full()) chunk.Add(keys_[next_++]);
    keys_read_ += chunk.size();
    return absl::OkStatus();
  }
  bool done() const override { return next_ == keys_.size(); }

 private:
  std::vector<std::string> keys_;
  size_t next_ = 0;
};

// Lines of a file descriptor, read with a buffer that holds at least the
// longest line (up to kMaxLineBytes) and never the whole input.
class FdSource : public KeySource {
 public:
  FdSource(int fd, std::string name, bool owned) : fd_(fd), name_(std::move(name)), owned_(owned) {
    buf_.resize(1 << 20);
  }
  ~FdSource() override {
    if (owned_) close(fd_);
  }

  absl::Status Next(Chunk& chunk, bool may_block) override {
    chunk.Clear(keys_read_);
    while (!chunk.full()) {
      const char* data = buf_.data();
      if (const void* nl = memchr(data + begin_, '\n', end_ - begin_); nl != nullptr) {
        const size_t len = static_cast<const char*>(nl) - (data + begin_);
        AddLine(chunk, std::string_view(data + begin_, len));
        begin_ += len + 1;
        continue;
      }
      if (eof_) {
        if (begin_ < end_) AddLine(chunk, std::string_view(data + begin_, end_ - begin_));
        begin_ = end_;
        break;
      }
      if ((!may_block || chunk.size() > 0) && !Readable()) break;
      if (absl::Status s = Fill(); !s.ok()) return s;
    }
    keys_read_ += chunk.size();
    return absl::OkStatus();
  }

  bool done() const override { return eof_ && begin_ == end_; }

 private:
  void AddLine(Chunk& chunk, std::string_view line) {
    ++lines_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) chunk.Add(line);
  }

  bool Readable() const {
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1, 0);
    } while (r < 0 && errno == EINTR);
    // An error or hang-up is "readable": read() reports it.
    return r != 0;
  }

  // Reads more input after the partial line at begin_.
  absl::Status Fill() {
    if (begin_ > 0) {
      memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buf_.size()) {
      if (buf_.size() >= kMaxLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: line %u is longer than %s; expected one key per line", name_,
                            lines_ + 1, FormatByteSize(kMaxLineBytes)));
      }
      buf_.resize(buf_.size() * 2);
    }
    while (true) {
      const ssize_t n = read(fd_, buf_.data() + end_, buf_.size() - end_);
      if (n > 0) {
        end_ += static_cast<size_t>(n);
        return absl::OkStatus();
      }
      if (n == 0) {
        eof_ = true;
        return absl::OkStatus();
      }
      if (errno != EINTR) {
        return absl::InvalidArgumentError(
            absl::StrFormat("cannot read %s: %s", name_, strerror(errno)));
      }
    }
  }

  int fd_;
  std::string name_;
  bool owned_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;  // Unconsumed bytes.
  bool eof_ = false;
  uint64_t lines_ = 0;
};

// ---------------------------------------------------------------------------
// Key commands.

// What one key command does and how its per-key outcomes are named.
struct KeyOp {
  const char* command;
  const char* progress_verb;
  // Outcome names; index = outcome code. count has none: its code is the count.
  std::vector<const char*> outcomes;
  // Outcomes that make the exit code 1 (count: a count of 0).
  std::vector<bool> bad;
};

// Sends one chunk, writes with `request_id` (empty: the client's random one);
// returns an outcome code per key.
using SendFn = std::function<absl::StatusOr<std::vector<uint32_t>>(
    absl::Span<const std::string_view>, const std::string& request_id)>;

class Progress {
 public:
  Progress(bool enabled, bool forced, const char* verb)
      : enabled_(enabled), forced_(forced), tty_(isatty(STDERR_FILENO)), verb_(verb) {
    start_ = last_ = std::chrono::steady_clock::now();
  }
  void Update(uint64_t keys) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < kProgressInterval) return;
    last_ = now;
    Print(keys, now);
    printed_ = true;
  }
  void Finish(uint64_t keys) {
    if (!enabled_ || !(printed_ || forced_)) return;
    Print(keys, std::chrono::steady_clock::now());
    fputc('\n', stderr);
    fflush(stderr);
  }

 private:
  void Print(uint64_t keys, std::chrono::steady_clock::time_point now) {
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(keys) / seconds : 0;
    absl::FPrintF(stderr, "\r%s %u keys (%.0f keys/s)%s", verb_, keys, rate, tty_ ? "\x1b[K" : "");
    fflush(stderr);
  }

  bool enabled_, forced_, tty_;
  const char* verb_;
  bool printed_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

struct GlobalOptions {
  std::string target;
  absl::Duration timeout;
  bool json = false;
  // For --target (one server or a list), with --timeout and --retry-timeout.
  std::unique_ptr<client::Client> client;
};

int Fail(const Failure& f) {
  absl::FPrintF(stderr, "cuckooctl: %s\n", f.message);
  return f.code;
}

// Adds where an error happened when keys before it were already processed.
absl::Status InBatch(const absl::Status& s, const Chunk& chunk) {
  if (chunk.first == 0) return s;
  const std::string where = chunk.size() == 1 ? absl::StrFormat("input key %u", chunk.first + 1)
                                              : absl::StrFormat("input keys %u-%u", chunk.first + 1,
                                                                chunk.first + chunk.size());
  const std::string before =
      chunk.first == 1 ? std::string("the key before was processed")
                       : absl::StrFormat("the %u keys before were processed", chunk.first);
  return absl::Status(s.code(), absl::StrFormat("%s (in %s; %s)", s.message(), where, before));
}

int RunKeyCommand(const GlobalOptions& g, const CommandLine& cl, Command cmd) {
  // Arguments and input first: local problems are found before the server is asked.
  if (cl.positional.size() < 2) {
    return Fail(UsageError(absl::StrFormat("%s needs a filter NAME (see cuckooctl %s --help)",
                                           cl.positional[0], cl.positional[0])));
  }
  const std::string name = cl.positional[1];
  std::vector<std::string> arg_keys(cl.positional.begin() + 2, cl.positional.end());
  for (size_t i = 0; i < arg_keys.size(); ++i) {
    if (arg_keys[i].empty()) {
      return Fail(
          UsageError(absl::StrFormat("KEY argument %u is empty; a key cannot be empty", i + 1)));
    }
  }
  std::unique_ptr<KeySource> source;
  bool from_args = false;
  if (std::optional<std::string> file = cl.Get("file")) {
    if (!arg_keys.empty()) {
      return Fail(UsageError(absl::StrFormat(
          "give keys as arguments or with --file, not both (first KEY argument: \"%s\")",
          arg_keys[0])));
    }
    if (*file == "-") {
      source = std::make_unique<FdSource>(STDIN_FILENO, "stdin", false);
    } else {
      const int fd = open(file->c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        return Fail(
            UsageError(absl::StrFormat("cannot open --file=%s: %s", *file, strerror(errno))));
      }
      source = std::make_unique<FdSource>(fd, *file, true);
    }
  } else if (!arg_keys.empty()) {
    source = std::make_unique<ArgsSource>(std::move(arg_keys));
    from_args = true;
  } else {
    if (isatty(STDIN_FILENO)) {
      absl::FPrintF(stderr, "cuckooctl: reading keys from stdin, one per line (Ctrl-D ends)\n");
    }
    source = std::make_unique<FdSource>(STDIN_FILENO, "stdin", false);
  }
  const bool quiet = cl.Bool("quiet");
  const bool if_absent = cl.Bool("if-absent");
  const std::string request_id = cl.Get("request-id").value_or("");
  if (cl.Has("request-id")) {
    // Room for the suffixes of later batches and of split ones (see --help).
    constexpr size_t kMaxRequestId = 100;
    const bool printable = std::all_of(request_id.begin(), request_id.end(),
                                       [](char c) { return c >= '!' && c <= '~'; });
    if (request_id.empty() || request_id.size() > kMaxRequestId || !printable) {
      return Fail(UsageError(
          absl::StrFormat("--request-id=\"%s\" must be 1 to %u characters from ! to ~ (no spaces)",
                          absl::CHexEscape(request_id), kMaxRequestId)));
    }
  }

  client::Client* client = g.client.get();
  // Fails fast on an unknown filter or bad name, even with no keys or a slow stdin.
  if (absl::StatusOr<v1::FilterInfo> info = client->GetFilter(name); !info.ok()) {
    return Fail(ServerError(info.status(), g.target));
  }

  KeyOp op;
  SendFn send;
  switch (cmd) {
    case kInsert:
      op = {"insert", "inserted", {"inserted", "already_present", "full"}, {false, false, true}};
      send = [&](absl::Span<const std::string_view> keys,
                 const std::string& id) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Insert(name, keys, if_absent, id);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) {
          switch ((*r)[i]) {
            case v1::INSERT_RESULT_INSERTED:
              out[i] = 0;
              break;
            case v1::INSERT_RESULT_ALREADY_PRESENT:
              out[i] = 1;
              break;
            case v1::INSERT_RESULT_FULL:
              out[i] = 2;
              break;
            default:
              return absl::InternalError(absl::StrFormat("the server returned insert result %d",
                                                         static_cast<int>((*r)[i])));
          }
        }
        return out;
      };
      break;
    case kLookup:
      op = {"lookup", "looked up", {"present", "absent"}, {false, true}};
      send = [&](absl::Span<const std::string_view> keys,
                 const std::string&) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Lookup(name, keys);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) out[i] = (*r)[i] ? 0 : 1;
        return out;
      };
      break;
    case kDelete:
      op = {"delete", "deleted", {"deleted", "not_found"}, {false, true}};
      send = [&](absl::Span<const std::string_view> keys,
                 const std::string& id) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Delete(name, keys, id);
        if (!r.ok()) return r.status();
        std::vector<uint32_t> out(r->size());
        for (size_t i = 0; i < r->size(); ++i) {
          switch ((*r)[i]) {
            case v1::DELETE_RESULT_DELETED:
              out[i] = 0;
              break;
            case v1::DELETE_RESULT_NOT_FOUND:
              out[i] = 1;
              break;
            default:
              return absl::InternalError(absl::StrFormat("the server returned delete result %d",
                                                         static_cast<int>((*r)[i])));
          }
        }
        return out;
      };
      break;
    default:  // kCount
      op = {"count", "counted", {}, {}};
      send = [&](absl::Span<const std::string_view> keys,
                 const std::string&) -> absl::StatusOr<std::vector<uint32_t>> {
        auto r = client->Count(name, keys);
        if (!r.ok()) return r.status();
        return *std::move(r);
      };
      break;
  }
  const bool is_count = op.outcomes.empty();

  const bool progress_forced = cl.Bool("progress");
  const bool progress_auto = !cl.Has("progress") && !cl.Bool("no-progress") && !from_args &&
                             isatty(STDERR_FILENO) && (quiet || !isatty(STDOUT_FILENO));
  Progress progress(progress_forced || progress_auto, progress_forced, op.progress_verb);

  Output out;
  // Per outcome code (count: [0] = present, [1] = absent).
  std::vector<uint64_t> tally(is_count ? 2 : op.outcomes.size(), 0);
  uint64_t total_copies = 0;
  uint64_t done_keys = 0;
  uint64_t chunks = 0;
  std::string text;

  Chunk current, next;
  if (absl::Status s = source->Next(current, /*may_block=*/true); !s.ok()) {
    return Fail(UsageError(std::string(s.message())));
  }
  while (current.size() > 0) {
    current.Seal();  // Here, not when filled: swapping moved the bytes (small strings inline).
    // Send this chunk while the next one is read.
    // --request-id for the first chunk, ID/k for the k-th after it.
    const std::string chunk_id = request_id.empty() || chunks == 0
                                     ? request_id
                                     : absl::StrFormat("%s/%u", request_id, chunks);
    ++chunks;
    std::future<absl::StatusOr<std::vector<uint32_t>>> pending =
        std::async(std::launch::async, [&] { return send(current.keys, chunk_id); });
    absl::Status read_status = source->Next(next, /*may_block=*/false);
    absl::StatusOr<std::vector<uint32_t>> results = pending.get();
    if (!results.ok()) {
      out.Flush();
      progress.Finish(done_keys);
      return Fail(ServerError(InBatch(results.status(), current), g.target));
    }
    text.clear();
    for (size_t i = 0; i < current.size(); ++i) {
      const uint32_t code = (*results)[i];
      const std::string_view key = current.keys[i];
      if (is_count) {
        ++tally[code == 0 ? 1 : 0];
        total_copies += code;
      } else {
        ++tally[code];
      }
      if (quiet) continue;
      if (g.json) {
        JsonObject o;
        o.Bytes("key", key);
        if (is_count) {
          o.Uint("count", code);
        } else {
          o.String("result", op.outcomes[code]);
        }
        text += o.Done();
      } else {
        text += is_count ? absl::StrFormat("%u", code) : op.outcomes[code];
        text.push_back('\t');
        text += key;
      }
      text.push_back('\n');
    }
    out.Write(text);
    out.Flush();  // A consumer of a slow stream sees each batch as it is answered.
    done_keys += current.size();
    progress.Update(done_keys);
    if (!read_status.ok()) {
      progress.Finish(done_keys);
      return Fail(UsageError(std::string(read_status.message())));
    }
    if (next.size() == 0 && !source->done()) {
      if (absl::Status s = source->Next(next, /*may_block=*/true); !s.ok()) {
        progress.Finish(done_keys);
        return Fail(UsageError(std::string(s.message())));
      }
    }
    std::swap(current, next);
  }
  progress.Finish(done_keys);

  bool any_bad = false;
  if (is_count) {
    any_bad = tally[1] > 0;
  } else {
    for (size_t i = 0; i < tally.size(); ++i) any_bad |= op.bad[i] && tally[i] > 0;
  }
  if (g.json) {
    JsonObject summary;
    summary.String("command", op.command).String("filter", name).Uint("keys", done_keys);
    if (is_count) {
      summary.Uint("present", tally[0]).Uint("absent", tally[1]).Uint("total_count", total_copies);
    } else {
      for (size_t i = 0; i < tally.size(); ++i) summary.Uint(op.outcomes[i], tally[i]);
    }
    summary.Uint("log_position", client->last_log_position());
    out.Write(JsonObject().Raw("summary", summary.Done()).Done() + "\n");
  } else {
    std::string line = absl::StrFormat("%s %s: %u %s:", op.command, name, done_keys,
                                       done_keys == 1 ? "key" : "keys");
    if (is_count) {
      line += absl::StrFormat(" %u present, %u absent, total count %u", tally[0], tally[1],
                              total_copies);
    } else {
      for (size_t i = 0; i < tally.size(); ++i) {
        line += absl::StrFormat("%s %u %s", i == 0 ? "" : ",", tally[i], op.outcomes[i]);
      }
    }
    line += absl::StrFormat("; log position %u\n", client->last_log_position());
    if (quiet) {
      out.Write(line);
    } else {
      out.Flush();
      fputs(line.c_str(), stderr);
    }
  }
  if (std::optional<Failure> f = out.Check()) return Fail(*f);
  return any_bad ? kExitSomeKeys : kExitOk;
}

// ---------------------------------------------------------------------------
// Filter and server commands.

std::optional<Failure> ExpectArgs(const CommandLine& cl, size_t min, size_t max, const char* what) {
  const std::string& cmd = cl.positional[0];
  const size_t n = cl.positional.size() - 1;
  if (n < min) {
    return UsageError(absl::StrFormat("%s needs %s (see cuckooctl %s --help)", cmd, what, cmd));
  }
  if (n > max) {
    return UsageError(absl::StrFormat("unexpected argument \"%s\" (see cuckooctl %s --help)",
                                      cl.positional[max + 1], cmd));
  }
  return std::nullopt;
}

int Emit(const std::string& s) {
  Output out;
  out.Write(s);
  if (std::optional<Failure> f = out.Check()) return Fail(*f);
  return kExitOk;
}

int RunCreate(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  if (!cl.Has("capacity")) {
    return Fail(UsageError("create needs --capacity=N, the number of keys the filter must hold"));
  }
  if (cl.Has("fpr") && cl.Has("fingerprint-bits")) {
    return Fail(UsageError("give --fpr or --fingerprint-bits, not both"));
  }
  v1::CreateFilterRequest req;
  req.set_name(cl.positional[1]);
  uint64_t v = 0;
  if (auto f = ParseUintFlag(cl, "capacity", UINT64_MAX, v)) return Fail(*f);
  req.set_capacity(v);
  if (cl.Has("fpr")) {
    double rate = 0;
    if (!ParseNumber(std::string_view(*cl.Get("fpr")), rate) || !std::isfinite(rate)) {
      return Fail(UsageError(
          absl::StrFormat("--fpr=\"%s\" is not a rate such as 0.001 or 1e-4", *cl.Get("fpr"))));
    }
    req.set_false_positive_rate(rate);
  }
  struct U32Flag {
    const char* name;
    void (v1::CreateFilterRequest::*set)(uint32_t);
  };
  static constexpr U32Flag kU32Flags[] = {
      {"fingerprint-bits", &v1::CreateFilterRequest::set_fingerprint_bits},
      {"bucket-size", &v1::CreateFilterRequest::set_bucket_size},
      {"shards", &v1::CreateFilterRequest::set_shards},
      {"max-kicks", &v1::CreateFilterRequest::set_max_kicks},
      {"growth-factor", &v1::CreateFilterRequest::set_growth_factor},
  };
  for (const U32Flag& flag : kU32Flags) {
    if (!cl.Has(flag.name)) continue;
    if (auto f = ParseUintFlag(cl, flag.name, UINT32_MAX, v)) return Fail(*f);
    (req.*flag.set)(static_cast<uint32_t>(v));
  }
  if (cl.Has("seed")) {
    if (auto f = ParseUintFlag(cl, "seed", UINT64_MAX, v)) return Fail(*f);
    req.set_seed(v);
  }
  if (cl.Has("max-capacity")) {
    if (!cl.Has("growth-factor")) {
      return Fail(UsageError(
          "--max-capacity needs --growth-factor: a fixed filter's capacity is its maximum"));
    }
    if (auto f = ParseUintFlag(cl, "max-capacity", UINT64_MAX, v)) return Fail(*f);
    req.set_max_capacity(v);
  }
  if (cl.Has("semi-sort")) req.set_semi_sort(cl.Bool("semi-sort"));
  req.set_if_not_exists(cl.Bool("if-not-exists"));

  absl::StatusOr<v1::CreateFilterResponse> resp = g.client->CreateFilter(req);
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    return Emit(JsonObject()
                    .Bool("created", resp->created())
                    .Raw("filter", FilterInfoJson(resp->filter()))
                    .Done() +
                "\n");
  }
  TextFields t;
  t.Add("created", resp->created() ? "true" : "false (it existed with the same settings)");
  AddFilterInfoText(t, resp->filter());
  return Emit(t.Done());
}

int RunInfo(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  absl::StatusOr<v1::FilterInfo> info = g.client->GetFilter(cl.positional[1]);
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  if (g.json) return Emit(JsonObject().Raw("filter", FilterInfoJson(*info)).Done() + "\n");
  TextFields t;
  AddFilterInfoText(t, *info);
  return Emit(t.Done());
}

int RunList(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 0, "")) return Fail(*f);
  absl::StatusOr<std::vector<v1::FilterInfo>> filters = g.client->ListFilters();
  if (!filters.ok()) return Fail(ServerError(filters.status(), g.target));
  if (g.json) {
    std::string array = "[";
    for (size_t i = 0; i < filters->size(); ++i) {
      if (i > 0) array.push_back(',');
      array += FilterInfoJson((*filters)[i]);
    }
    array.push_back(']');
    return Emit(JsonObject().Raw("filters", array).Done() + "\n");
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "ITEMS", "CAPACITY", "REACHABLE", "LOAD",
                                                 "MEMORY", "F", "B", "TABLE", "SHARDS", "FPR"}};
  for (const v1::FilterInfo& f : *filters) {
    // REACHABLE: the keys the filter can hold once grown as far as it may
    // (max_capacity when set); a fixed filter's capacity.
    rows.push_back({f.name(), absl::StrFormat("%u", f.items()), absl::StrFormat("%u", f.capacity()),
                    absl::StrFormat("%u", f.reachable_capacity()),
                    absl::StrFormat("%.2f%%", 100 * f.load_factor()),
                    FormatByteSize(f.memory_bytes()), absl::StrFormat("%u", f.fingerprint_bits()),
                    absl::StrFormat("%u", f.bucket_size()),
                    f.semi_sort() ? "semi_sorted" : "packed", absl::StrFormat("%u", f.shards()),
                    absl::StrFormat("%.3g", f.expected_false_positive_rate())});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string text;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      text += row[c];
      if (c + 1 < row.size()) text.append(width[c] + 2 - row[c].size(), ' ');
    }
    text.push_back('\n');
  }
  return Emit(text);
}

int RunDrop(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  absl::StatusOr<uint64_t> freed = g.client->DropFilter(name);
  if (!freed.ok()) return Fail(ServerError(freed.status(), g.target));
  if (g.json) {
    return Emit(JsonObject().String("name", name).Uint("freed_bytes", *freed).Done() + "\n");
  }
  return Emit(
      absl::StrFormat("dropped %s: freed %u bytes (%s)\n", name, *freed, FormatByteSize(*freed)));
}

int RunServerInfo(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 0, "")) return Fail(*f);
  absl::StatusOr<v1::GetServerInfoResponse> info = g.client->ServerInfo();
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  const bool cluster = info->mode() == "cluster";
  const v1::ClusterInfo& c = info->cluster();
  if (g.json) {
    std::string cluster_json = "null";
    if (cluster) {
      cluster_json = JsonObject()
                         .String("replica_id", c.replica_id())
                         .String("nats_status", c.nats_status())
                         .String("nats_server", c.nats_server())
                         .String("stream", c.stream())
                         .Uint("stream_replicas", c.stream_replicas())
                         .Uint("stream_first_position", c.stream_first_position())
                         .Uint("stream_last_position", c.stream_last_position())
                         .Uint("lag", c.lag())
                         .Done();
    }
    return Emit(JsonObject()
                    .String("target", g.target)
                    .String("version", info->version())
                    .String("mode", info->mode())
                    .String("durability", info->durability())
                    .Double("wal_sync_interval_seconds", DurationSeconds(info->wal_sync_interval()))
                    .Uint("max_batch_keys", info->max_batch_keys())
                    .Uint("max_key_bytes", info->max_key_bytes())
                    .Uint("max_message_bytes", info->max_message_bytes())
                    .Uint("max_filters", info->max_filters())
                    .Uint("memory_budget_bytes", info->memory_budget_bytes())
                    .Uint("memory_used_bytes", info->memory_used_bytes())
                    .Uint("filters", info->filters())
                    .String("data_dir", info->data_dir())
                    .Double("snapshot_interval_seconds", DurationSeconds(info->snapshot_interval()))
                    .Uint("applied_log_position", info->applied_log_position())
                    .Double("dedup_window_seconds", DurationSeconds(info->dedup_window()))
                    .Raw("cluster", cluster_json)
                    .Done() +
                "\n");
  }
  auto bytes = [](uint64_t b) { return absl::StrFormat("%u (%s)", b, FormatByteSize(b)); };
  auto number = [](uint64_t n) { return absl::StrFormat("%u", n); };
  const bool no_snapshots =
      info->snapshot_interval().seconds() == 0 && info->snapshot_interval().nanos() == 0;
  TextFields t;
  t.Add("target", g.target)
      .Add("version", info->version())
      .Add("mode", info->mode())
      .Add("durability", info->durability() == "interval"
                             ? absl::StrFormat("interval (fdatasync every %s)",
                                               FormatDuration(info->wal_sync_interval()))
                             : info->durability())
      .Add("max_batch_keys", number(info->max_batch_keys()))
      .Add("max_key_bytes", number(info->max_key_bytes()))
      .Add("max_message_bytes", bytes(info->max_message_bytes()))
      .Add("max_filters", number(info->max_filters()))
      .Add("memory_budget_bytes", bytes(info->memory_budget_bytes()))
      .Add("memory_used_bytes", bytes(info->memory_used_bytes()))
      .Add("filters", number(info->filters()))
      .Add("data_dir", info->data_dir())
      .Add("snapshot_interval", no_snapshots ? "off (only on snapshot and at shutdown)"
                                             : FormatDuration(info->snapshot_interval()))
      .Add("applied_log_position", number(info->applied_log_position()))
      .Add("dedup_window", FormatDuration(info->dedup_window()));
  if (cluster) {
    t.Add("replica_id", c.replica_id())
        .Add("nats_status", c.nats_status())
        .Add("nats_server", c.nats_server())
        .Add("stream", c.stream())
        .Add("stream_replicas", number(c.stream_replicas()))
        .Add("stream_first_position", number(c.stream_first_position()))
        .Add("stream_last_position", number(c.stream_last_position()))
        .Add("lag", number(c.lag()));
  }
  return Emit(t.Done());
}

int RunSnapshot(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 1, "")) return Fail(*f);
  const std::string name = cl.positional.size() > 1 ? cl.positional[1] : "";
  absl::StatusOr<v1::SnapshotResponse> resp = g.client->Snapshot(
      name, cl.Bool("changed-only"), cl.Has("timeout") ? g.timeout : absl::Minutes(10));
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    std::string files = "[";
    for (const v1::SnapshotFile& f : resp->files()) {
      if (files.size() > 1) files.push_back(',');
      files += JsonObject()
                   .String("filter", f.filter())
                   .String("path", f.path())
                   .Uint("bytes", f.bytes())
                   .Uint("items", f.items())
                   .String("time", FormatTimestamp(f.time()))
                   .Double("seconds", DurationSeconds(f.duration()))
                   .Done();
    }
    files.push_back(']');
    std::string unchanged = "[";
    for (const std::string& u : resp->unchanged()) {
      if (unchanged.size() > 1) unchanged.push_back(',');
      unchanged += JsonString(u);
    }
    unchanged.push_back(']');
    return Emit(JsonObject()
                    .Raw("files", files)
                    .Raw("unchanged", unchanged)
                    .Uint("bytes", resp->bytes())
                    .Double("seconds", DurationSeconds(resp->duration()))
                    .Done() +
                "\n");
  }
  std::string text;
  for (const v1::SnapshotFile& f : resp->files()) {
    const double secs = DurationSeconds(f.duration());
    text += absl::StrFormat("%s: %u items, %s to %s in %.3fs (%.2f GB/s)\n", f.filter(), f.items(),
                            FormatByteSize(f.bytes()), f.path(), secs,
                            f.bytes() / 1e9 / std::max(secs, 1e-9));
  }
  for (const std::string& u : resp->unchanged()) {
    text += absl::StrFormat("%s: unchanged since its last snapshot\n", u);
  }
  text += absl::StrFormat("snapshot: %d files, %s in %.3fs\n", resp->files_size(),
                          FormatByteSize(resp->bytes()), DurationSeconds(resp->duration()));
  return Emit(text);
}

// The deadline of an export or import: --timeout if given (a transfer is
// one RPC), else an hour.
absl::Duration TransferTimeout(const GlobalOptions& g, const CommandLine& cl) {
  return cl.Has("timeout") ? g.timeout : absl::Hours(1);
}

int RunExport(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  const std::string file = cl.Get("file").value_or("-");
  const bool to_stdout = file == "-";
  int fd = STDOUT_FILENO;
  if (to_stdout) {
    if (isatty(STDOUT_FILENO)) {
      return Fail(UsageError(
          "refusing to write a binary snapshot to a terminal: redirect stdout (cuckooctl export "
          "NAME > FILE) or give --file=PATH"));
    }
  } else {
    fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return Fail(
          UsageError(absl::StrFormat("cannot create --file=%s: %s", file, strerror(errno))));
    }
  }
  const std::string where = to_stdout ? "stdout" : file;
  int write_errno = 0;
  client::Client::ExportSink sink = [&](std::string_view bytes) -> absl::Status {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        write_errno = errno;
        return absl::AbortedError("local write failed");
      }
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  };
  absl::StatusOr<client::Client::ExportInfo> info =
      g.client->ExportFilter(name, sink, TransferTimeout(g, cl));
  if (!to_stdout) {
    // A backup is complete only once it is on disk.
    if (info.ok() && write_errno == 0 && fsync(fd) != 0) write_errno = errno;
    if (close(fd) != 0 && info.ok() && write_errno == 0) write_errno = errno;
    if (!info.ok() || write_errno != 0) unlink(file.c_str());  // Never a partial backup.
  }
  if (write_errno != 0) {
    return Fail(
        UsageError(absl::StrFormat("cannot write to %s: %s", where, strerror(write_errno))));
  }
  if (!info.ok()) return Fail(ServerError(info.status(), g.target));
  std::string summary;
  if (g.json) {
    summary = JsonObject()
                  .String("name", name)
                  .String("file", where)
                  .Uint("bytes", info->total_bytes)
                  .Uint("items", info->items)
                  .Uint("log_position", info->log_position)
                  .Uint("filter_id", info->filter_id)
                  .Raw("filter", FilterInfoJson(info->filter))
                  .Done() +
              "\n";
  } else {
    // The size says why it is what it is: a snapshot holds every table
    // slot, empty or not, so a filter created for 10M keys exports ~15 MiB
    // with 2 keys in it (zeros, which compress to almost nothing:
    // docs/SNAPSHOT_FORMAT.md).
    summary = absl::StrFormat(
        "exported %s: %u items, %u bytes (%s: the filter's whole tables, %u slots, empty ones "
        "included) to %s; log position %u\n",
        name, info->items, info->total_bytes, FormatByteSize(info->total_bytes),
        info->filter.slots(), where, info->log_position);
  }
  if (to_stdout) {
    fputs(summary.c_str(), stderr);
    return kExitOk;
  }
  return Emit(summary);
}

int RunImport(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 1, 1, "a filter NAME")) return Fail(*f);
  const std::string& name = cl.positional[1];
  const std::string file = cl.Get("file").value_or("-");
  const bool from_stdin = file == "-";
  int fd = STDIN_FILENO;
  if (from_stdin) {
    if (isatty(STDIN_FILENO)) {
      return Fail(UsageError(
          "refusing to read a binary snapshot from a terminal: redirect stdin (cuckooctl import "
          "NAME < FILE) or give --file=PATH"));
    }
  } else {
    fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Fail(UsageError(absl::StrFormat("cannot open --file=%s: %s", file, strerror(errno))));
    }
  }
  const std::string where = from_stdin ? "stdin" : file;
  // A regular file's size goes with the upload: the server then never takes
  // a part of it for the whole.
  uint64_t total = 0;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) total = static_cast<uint64_t>(st.st_size);
  int read_errno = 0;
  client::Client::ImportSource source = [&](absl::Span<char> buffer) -> absl::StatusOr<size_t> {
    while (true) {
      const ssize_t n = read(fd, buffer.data(), buffer.size());
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      read_errno = errno;
      return absl::AbortedError("local read failed");
    }
  };
  absl::StatusOr<v1::ImportFilterResponse> resp =
      g.client->ImportFilter(name, source, total, TransferTimeout(g, cl));
  if (!from_stdin) close(fd);
  if (read_errno != 0) {
    return Fail(UsageError(absl::StrFormat("cannot read %s: %s", where, strerror(read_errno))));
  }
  if (!resp.ok()) return Fail(ServerError(resp.status(), g.target));
  if (g.json) {
    return Emit(JsonObject()
                    .String("name", name)
                    .String("source_name", resp->source_name())
                    .Uint("bytes", resp->bytes())
                    .Uint("log_position", resp->log_position())
                    .Raw("filter", FilterInfoJson(resp->filter()))
                    .Done() +
                "\n");
  }
  TextFields t;
  t.Add("imported", absl::StrFormat("%u bytes (%s) from %s, a snapshot of filter %s", resp->bytes(),
                                    FormatByteSize(resp->bytes()), where, resp->source_name()))
      .Add("log_position", absl::StrFormat("%u", resp->log_position()));
  AddFilterInfoText(t, resp->filter());
  return Emit(t.Done());
}

int RunHealth(const GlobalOptions& g, const CommandLine& cl) {
  if (auto f = ExpectArgs(cl, 0, 1, "")) return Fail(*f);
  const std::string service = cl.positional.size() > 1 ? cl.positional[1] : "";
  // Through the client's channel (so a --target list works), but not retried:
  // a health check answers at once.
  std::unique_ptr<health::Health::Stub> stub = health::Health::NewStub(g.client->channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + g.timeout));
  // The server answers health checks without a token; one does no harm.
  g.client->AddCallMetadata(ctx);
  health::HealthCheckRequest req;
  req.set_service(service);
  health::HealthCheckResponse resp;
  if (grpc::Status s = stub->Check(&ctx, req, &resp); !s.ok()) {
    return Fail(ServerError(client::FromGrpcStatus(s), g.target));
  }
  const std::string status = health::HealthCheckResponse::ServingStatus_Name(resp.status());
  const int code = resp.status() == health::HealthCheckResponse::SERVING ? kExitOk : kExitSomeKeys;
  if (cl.Bool("quiet")) return code;
  const int emitted =
      Emit(g.json ? JsonObject().String("service", service).String("status", status).Done() + "\n"
                  : status + "\n");
  return emitted != kExitOk ? emitted : code;
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

// ---------------------------------------------------------------------------
// Security: the token and TLS, each from its flag, else its environment variable.

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

// Sets options.token and options.tls from the flags and the environment.
std::optional<Failure> ParseSecurity(const CommandLine& cl, client::ClientOptions& options) {
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

// ---------------------------------------------------------------------------

int PrintHelp(const CommandSpec* command) {
  if (command == nullptr || command->id == kHelp) {
    fputs(kUsage, stdout);
  } else {
    fputs(command->help, stdout);
    if (command->id & (kInsert | kDelete)) fputs(kRequestIdHelp, stdout);
    if (command->id & kKeyCommands) fputs(kKeyInputHelp, stdout);
    // hash-token talks to no server and refuses the global flags, so its
    // help lists only its own.
    if (command->id & kServerCommands) fputs(kGlobalFlagsHelp, stdout);
  }
  return fflush(stdout) == 0 ? kExitOk : kExitUsage;
}

int Main(int argc, char** argv) {
  CommandLine cl;
  if (std::optional<Failure> f = ParseArgs(argc, argv, cl)) return Fail(*f);

  const CommandSpec* command = nullptr;
  if (!cl.positional.empty()) {
    command = FindCommand(cl.positional[0]);
    if (command == nullptr) {
      return Fail(UsageError(
          absl::StrFormat("unknown command \"%s\" (see cuckooctl --help)", cl.positional[0])));
    }
  }
  if (cl.Bool("help")) return PrintHelp(command);
  if (cl.Bool("version")) {
    absl::PrintF("cuckooctl %s\n", kVersion);
    return fflush(stdout) == 0 ? kExitOk : kExitUsage;
  }
  if (command == nullptr) {
    fputs(kUsage, stderr);
    return kExitUsage;
  }
  if (command->id == kHelp) {
    if (cl.positional.size() > 2) {
      return Fail(
          UsageError(absl::StrFormat("unexpected argument \"%s\" (usage: cuckooctl help "
                                     "[COMMAND])",
                                     cl.positional[2])));
    }
    if (cl.positional.size() == 2) {
      const CommandSpec* about = FindCommand(cl.positional[1]);
      if (about == nullptr) {
        return Fail(UsageError(
            absl::StrFormat("unknown command \"%s\" (see cuckooctl --help)", cl.positional[1])));
      }
      return PrintHelp(about);
    }
    return PrintHelp(nullptr);
  }
  for (const auto& [name, value] : cl.flags) {
    if ((FindFlag(name)->commands & command->id) == 0) {
      return Fail(
          UsageError(absl::StrFormat("flag %s does not apply to %s (see cuckooctl %s --help)",
                                     cl.spelled[name], command->name, command->name)));
    }
  }

  // Local: no server, so none of the server settings (or their variables).
  if (command->id == kHashToken) return RunHashToken(cl);

  GlobalOptions g;
  if (std::optional<std::string> target = cl.Get("target")) {
    g.target = *target;
  } else if (const char* env = getenv("CUCKOO_TARGET"); env != nullptr && *env != '\0') {
    g.target = env;
  } else {
    g.target = "localhost:50051";
  }
  if (g.target.empty())
    return Fail(UsageError("--target must not be empty: give HOST:PORT or unix:PATH"));
  g.timeout = absl::Seconds(30);
  if (std::optional<std::string> timeout = cl.Get("timeout")) {
    std::optional<absl::Duration> d = ParseTimeout(*timeout);
    if (!d) {
      return Fail(UsageError(absl::StrFormat(
          "--timeout=\"%s\" is not a positive duration such as 500ms, 2s or 1m", *timeout)));
    }
    g.timeout = *d;
  }
  client::ClientOptions options;
  options.timeout = g.timeout;
  if (std::optional<std::string> retry = cl.Get("retry-timeout")) {
    std::optional<absl::Duration> d = ParseTimeout(*retry, /*allow_zero=*/true);
    if (!d) {
      return Fail(UsageError(absl::StrFormat(
          "--retry-timeout=\"%s\" is not a duration such as 0, 10s or 1m", *retry)));
    }
    options.retry_timeout = *d;
  }
  const std::string format = cl.Get("format").value_or("text");
  if (format != "text" && format != "json") {
    return Fail(UsageError(absl::StrFormat("--format=\"%s\" must be text or json", format)));
  }
  g.json = format == "json";
  if (std::optional<Failure> f = ParseSecurity(cl, options)) return Fail(*f);
  g.client = client::Client::Connect(g.target, options);
  if (const absl::Status& s = g.client->connect_status(); !s.ok()) {
    // A list that is not HOST:PORT,...: the user's; no name resolves: the network's.
    return Fail(s.code() == absl::StatusCode::kInvalidArgument
                    ? UsageError(absl::StrFormat("--target: %s", s.message()))
                    : ServerError(s, g.target));
  }

  switch (command->id) {
    case kCreate:
      return RunCreate(g, cl);
    case kInfo:
      return RunInfo(g, cl);
    case kList:
      return RunList(g, cl);
    case kDrop:
      return RunDrop(g, cl);
    case kServerInfo:
      return RunServerInfo(g, cl);
    case kHealth:
      return RunHealth(g, cl);
    case kSnapshot:
      return RunSnapshot(g, cl);
    case kExport:
      return RunExport(g, cl);
    case kImport:
      return RunImport(g, cl);
    default:
      return RunKeyCommand(g, cl, command->id);
  }
}

}  // namespace
}  // namespace cuckoo::ctl

int main(int argc, char** argv) {
  // Before anything starts OpenSSL (gRPC's TLS, RAND_bytes): no OpenSSL
  // cleanup at exit. That cleanup deletes OpenSSL's thread-local keys, so a
  // gRPC thread still finishing its exit at that moment lost its error queue
  // (OpenSSL 3's 904-byte ERR_STATE) without the destructor that frees it,
  // and LeakSanitizer failed the run (seen twice in CI, after quick
  // PERMISSION_DENIED and UNAUTHENTICATED exits over TLS). The process ends
  // anyway; with the keys kept, every exiting thread frees its own state.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  grpc_init();
  const int code = cuckoo::ctl::Main(argc, argv);
  // Every channel is gone by now, but gRPC lets go of what it held (its
  // subchannels, its threads) on its own threads: wait for that, so that
  // the process ends with as little as possible still running.
  grpc_shutdown_blocking();
  return code;
}
