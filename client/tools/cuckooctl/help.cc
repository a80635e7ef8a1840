// Everything a user can type is documented here (and printed by --help);
// client/README.md repeats it with examples.
#include "client/tools/cuckooctl/help.h"

#include <stdio.h>

namespace cuckoo::ctl {

const char kUsage[] =
    R"txt(cuckooctl: command-line client for cuckood, a server of named cuckoo filters.

Usage: cuckooctl [GLOBAL FLAGS] COMMAND [ARGUMENTS] [FLAGS]
       cuckooctl help [COMMAND]    (or cuckooctl [COMMAND] --help)

Filters:
  create NAME --capacity=N [--fpr=RATE | --fingerprint-bits=F] [--bucket-size=B]
              [--semi-sort[=true|false]] [--shards=S] [--max-kicks=K] [--seed=N]
              [--growth-factor=G [--max-capacity=N] [--grow-on-repeats]]
              [--if-not-exists] [--ttl=DURATION | --expire-at=TIME]
                        create a filter; prints its info and whether it was created
  info NAME             a filter's settings and state
  list                  every filter, sorted by name
  drop NAME             remove a filter and its snapshot, and free its memory
  expire NAME (--ttl=DURATION | --at=TIME | --persist)
                        set or clear the time the server drops the filter
  rename NAME NEW_NAME [--replace]
                        rename a filter (--replace: dropping a filter named NEW_NAME)
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
                       down, cluster electing a leader) or RESOURCE_EXHAUSTED
                       from gRPC's transport ("Received RST_STREAM"), 0: no
                       retries (default 30s)
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

namespace {

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
                  per batch, which makes cuckooctl's own retries safe, but
                  not running the command again: a command that failed
                  UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED may
                  have been applied, so run it again only with the same
                  --request-id.
)";

const CommandSpec kCommands[] = {
    {"create", kCreate, R"(Usage: cuckooctl create NAME --capacity=N [FLAGS]

Creates filter NAME, sized so that N keys always fit. NAME is a Redis key:
1 to 512 bytes of UTF-8 without NUL ("users:seen", "my filter"). Prints the
filter's info and whether it was created.

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
  --grow-on-repeats     with --growth-factor: a key inserted so many times that
                        its copies fill its slots grows the filter too (as
                        RedisBloom's filters, and those made over the Redis
                        port, do), so its count keeps counting; bounded by the
                        growth schedule, --max-capacity and the memory budget
                        (default: off, such a key answers FULL)
  --if-not-exists       if NAME exists with the same settings, print it
                        (created: false) instead of failing with ALREADY_EXISTS
                        (its expiry unchanged)
  --ttl=DURATION        the server drops the filter this long from now (48h,
                        90m, 3600 = seconds); see cuckooctl expire
  --expire-at=TIME      the same at an RFC 3339 time (2026-12-01T00:00:00Z),
                        which must be in the future
)"},
    {"info", kInfo, R"(Usage: cuckooctl info NAME

Prints a filter's settings (capacity, fingerprint_bits, bucket_size, semi_sort,
shards, max_kicks, seed, growth_factor, max_capacity, ...) and state (items,
load_factor, memory_bytes, bits_per_item, expected_false_positive_rate,
expire_at, ...).
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
    {"expire", kExpire, R"(Usage: cuckooctl expire NAME (--ttl=DURATION | --at=TIME | --persist)

Sets or clears filter NAME's expiry (the SetFilterExpiry RPC; Redis's EXPIRE,
PEXPIREAT, PERSIST). At that time the server drops the filter with a logged
drop, as cuckooctl drop would; from then on it answers as a missing filter.
The change is logged and durable when answered. A time not in the future drops
the filter now. Needs the admin grant. Prints the new expiry.

  --ttl=DURATION   from now: 48h, 90m, 3600 (seconds)
  --at=TIME        an RFC 3339 time, e.g. 2026-12-01T00:00:00Z
  --persist        clear it: the filter stays until dropped
)"},
    {"rename", kRename, R"(Usage: cuckooctl rename NAME NEW_NAME [--replace]

Renames filter NAME to NEW_NAME in one step (Redis's RENAME and RENAMENX): the
filter keeps its settings and keys, and no call sees both names or neither.
Fails with ALREADY_EXISTS when NEW_NAME is taken, unless --replace, which drops
that filter with the rename (printing the bytes it frees). Needs the admin
grant on both names.

  --replace   drop a filter named NEW_NAME with the rename (RENAME); without
              it the rename is RENAMENX's
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
                       how long to retry an RPC that fails UNAVAILABLE (or
                       RESOURCE_EXHAUSTED from gRPC's transport), with
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

}  // namespace

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

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

}  // namespace cuckoo::ctl
