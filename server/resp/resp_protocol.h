// The Redis protocol (RESP) on the server side: an incremental parser of
// client commands and a writer of replies, with no I/O of their own.
//
// Why: cuckood speaks RESP so that Redis clients (redis-cli, redis-py, ...)
// can use the RedisBloom CF.* commands against it. The parser follows what
// Redis itself accepts (networking.c: processMultibulkBuffer and
// processInlineBuffer, sds.c: sdssplitargs) and answers with Redis's own
// error wordings, so clients see what they would see from Redis; where the
// server's limits refuse a command, the error names the limit and the value.
// It never asks the connection to buffer more than the limits allow: a
// declared length over a limit is refused from its header, before the bytes
// arrive, and nothing is allocated per declared argument before it is read.
//
// Differences from Redis, all stricter and all errors (a connection closes
// after one): the CR of a length line must be followed by LF, and bulk data
// by CRLF (Redis skips those two bytes unread); a length line or an inline
// line is refused as soon as it is longer than max_inline_bytes, however it
// was split into reads (Redis looks only when no line end has arrived yet);
// empty commands skipped before a command count towards that command's
// max_command_bytes.
//
// Example, on a connection's read buffer `buf`:
//   resp::Parser parser(limits);
//   size_t consumed;
//   std::vector<std::string_view> args;
//   std::string error;
//   for (;;) {
//     switch (parser.Parse(buf.view(), &consumed, &args, &error)) {
//       case resp::Parser::Result::kCommand: run(args); buf.drop(consumed); continue;
//       case resp::Parser::Result::kNeedMore: read more into buf; continue;
//       case resp::Parser::Result::kError: reply "-" + error, then close;
//     }
//   }
//   (With commands in flight, keep their bytes: drop only after they finished,
//   and call parser.ReleaseArgs() at the same time.)
#ifndef CUCKOO_SERVER_RESP_RESP_PROTOCOL_H_
#define CUCKOO_SERVER_RESP_RESP_PROTOCOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuckoo::server::resp {

// What one client command may take. A command past one is a protocol error.
struct ParserLimits {
  size_t max_bulk_bytes = 64 << 20;      // one argument ("proto-max-bulk-len")
  size_t max_args = 100'016;             // arguments in one command (multibulk length)
  size_t max_inline_bytes = 64 << 10;    // an inline command's line; also a length line
  size_t max_command_bytes = 128 << 20;  // all bytes of one command, headers included
  // Added to the errors of these limits (e.g. why they are so small).
  const char* note = "";
};

// An incremental parser of client commands: RESP arrays of bulk strings
// ("*<n>\r\n$<len>\r\n<bytes>\r\n..."), and Redis's inline commands (a line
// ending in LF or CRLF, split on spaces/tabs with "double" (C escapes \n \r
// \t \b \a \\ \" \xHH) and 'single' (\' only) quotes as sdssplitargs does;
// like sdssplitargs, a NUL byte ends an inline line's arguments).
// Empty commands consume their bytes and give no command, as in Redis: an
// empty or blank inline line, and "*<n>\r\n" with n <= 0 ("*0", "*-1", and
// also "*-10", which Redis's own protocol tests expect to be skipped).
// Resumable: Parse() is given the connection's unconsumed bytes (the same
// bytes again plus more on the next call, starting at the same command
// boundary) and keeps its progress, so total work is linear in the input.
// Not thread-safe; one per connection.
class Parser {
 public:
  explicit Parser(const ParserLimits& limits);

  enum class Result { kCommand, kNeedMore, kError };

  // data: the bytes not yet consumed, starting at a command boundary (the
  // caller drops consumed bytes itself; data may have moved in memory
  // between calls, so the parser keeps offsets, not pointers).
  // kCommand: *consumed = bytes of this command (including any empty
  //   commands skipped before it); *args = its arguments (at least one),
  //   views into `data`, except inline arguments that had to be unescaped
  //   or joined (`a\x41`, `a"b c"`): those are views into the parser's own
  //   storage, valid until ReleaseArgs(). The parser then starts afresh at
  //   data.substr(*consumed).
  // kNeedMore: nothing consumed (*consumed = 0), *args cleared; call again
  //   with the same bytes and more. Never asks the caller to hold more than
  //   the limits allow: a declared length over a limit is an error at once.
  //   (Before a length line's CRLF arrives, up to max_inline_bytes + 1 more
  //   bytes than max_command_bytes may be pending.)
  // kError: *error = the Redis-style message without "-" or CRLF, e.g.
  //   "ERR Protocol error: invalid bulk length". The connection should reply
  //   with it and close, as Redis does; the parser stays in error until Reset().
  Result Parse(std::string_view data, size_t* consumed, std::vector<std::string_view>* args,
               std::string* error);

  // Forgets the progress of a partial command (after kCommand the parser
  // resets itself). Does not release argument storage.
  void Reset();

  // Frees the storage of unescaped inline arguments of every command returned
  // so far. Call it when none of those commands' args are used any more,
  // e.g. whenever the connection drops consumed bytes from its buffer.
  void ReleaseArgs();
  // Heap bytes the parser holds (argument offsets, unescaped inline
  // arguments, an error message): part of a connection's memory.
  size_t MemoryBytes() const {
    return arg_spans_.capacity() * sizeof(arg_spans_[0]) + storage_bytes_ + error_.capacity();
  }
  // The limits from the next Parse on (the RESP server tightens them for
  // connections that have not authenticated yet).
  void set_limits(const ParserLimits& limits) { limits_ = limits; }
  const ParserLimits& limits() const { return limits_; }

  // Bytes from the start of `data` that the current partial command needs at
  // least (for buffer sizing): known while a bulk's data is awaited,
  // otherwise 0.
  size_t pending_hint() const;

 private:
  enum class State { kStart, kMultibulkCount, kBulkHeader, kBulkData, kInline, kError };

  Result ParseMultibulk(std::string_view data, size_t* consumed,
                        std::vector<std::string_view>* args, std::string* error);
  Result ParseInline(std::string_view data, size_t* consumed, std::vector<std::string_view>* args,
                     std::string* error);
  // Finds the CRLF ending the length line starting at pos_ (scanning on from
  // scan_), sets *line_end to the CR's offset. kNeedMore or kError otherwise.
  Result FindLengthLine(std::string_view data, const char* too_big, size_t* line_end,
                        std::string* error);
  Result Fail(std::string message, std::string* error);

  ParserLimits limits_;
  State state_ = State::kStart;
  std::string error_;  // kError's message, repeated until Reset()
  size_t start_ = 0;   // offset of the current command (after skipped empty ones)
  size_t pos_ = 0;     // offset of the next unparsed byte
  size_t scan_ = 0;    // offset up to which a line has been searched for its end
  int64_t expected_args_ = 0;
  int64_t bulk_len_ = 0;
  std::vector<std::pair<size_t, size_t>> arg_spans_;  // offset, length in data
  std::deque<std::string> storage_;                   // unescaped inline arguments
  size_t storage_bytes_ = 0;                          // their capacities
};

// Appends replies in RESP to *out. protocol 3 (after HELLO 3) writes the RESP3
// types; anything else is RESP2, where they are downgraded as Redis does:
// Map -> array of 2n, Set -> array, Double -> bulk string, Boolean ->
// integer 1/0, Null -> "$-1", NullArray -> "*-1", Verbatim -> bulk string,
// Push -> array.
class Writer {
 public:
  Writer(std::string* out, int protocol);

  // 3 for RESP3, 2 otherwise.
  int protocol() const { return protocol_; }

  // "+s"; any CR or LF in s becomes a space, keeping the reply one line.
  void SimpleString(std::string_view s);
  // "-message"; message starts with the code ("ERR ...", "WRONGTYPE ...");
  // any CR or LF in it becomes a space (Redis does that too).
  void Error(std::string_view message);
  // ":v".
  void Integer(int64_t v);
  // n integers from -9 to 9, value(i) each: what n calls of Integer write,
  // in one resize of the output (a 1000-key CF.MEXISTS or CF.INSERT replies
  // with 1000; appending each costs more than the lookup).
  template <typename F>
  void SmallIntegers(size_t n, F value) {
    const size_t at = out_->size();
    out_->resize(at + 5 * n);
    char* p = out_->data() + at;
    for (size_t i = 0; i < n; ++i) {
      const int v = value(i);
      *p = ':';
      p[1] = '-';
      p += v < 0 ? 2 : 1;
      *p++ = static_cast<char>('0' + (v < 0 ? -v : v));
      *p++ = '\r';
      *p++ = '\n';
    }
    out_->resize(static_cast<size_t>(p - out_->data()));
  }
  // As SmallIntegers for RESP2; RESP3 writes 1 and 0 as the booleans "#t"
  // and "#f" (RedisBloom's RESP3 replies of CF.EXISTS, CF.ADD, ...) and
  // -1 as the integer it is (CF.INSERT's "full").
  template <typename F>
  void SmallBooleans(size_t n, F value) {
    if (protocol_ != 3) {
      SmallIntegers(n, value);
      return;
    }
    const size_t at = out_->size();
    out_->resize(at + 5 * n);
    char* p = out_->data() + at;
    for (size_t i = 0; i < n; ++i) {
      const int v = value(i);
      if (v < 0) {
        *p++ = ':';
        *p++ = '-';
        *p++ = static_cast<char>('0' - v);
      } else {
        *p++ = '#';
        *p++ = v != 0 ? 't' : 'f';
      }
      *p++ = '\r';
      *p++ = '\n';
    }
    out_->resize(static_cast<size_t>(p - out_->data()));
  }
  // "$len" and the bytes, binary-safe.
  void Bulk(std::string_view s);
  // RESP3 "_"; RESP2 "$-1".
  void Null();
  // RESP3 "_"; RESP2 "*-1".
  void NullArray();
  // "*n"; then n replies follow.
  void Array(size_t n);
  // RESP3 "%n"; RESP2 "*2n"; then n key, value pairs follow.
  void Map(size_t n);
  // RESP3 "~n"; RESP2 "*n"; then n replies follow.
  void Set(size_t n);
  // RESP3 ",d"; RESP2 a bulk string of the same text: the shortest text that
  // reads back as d, in "%.17g"'s layout (1.5, 100000, 1e+21, 1e-05), and
  // "inf", "-inf", "nan".
  void Double(double d);
  // RESP3 "#t" / "#f"; RESP2 ":1" / ":0".
  void Boolean(bool b);
  // RESP3 "=len" and "fmt:text", fmt three bytes ("txt", "mkd"; anything else
  // is written as "txt"); RESP2 a bulk string of text alone.
  void Verbatim(std::string_view format, std::string_view text);
  // RESP3 ">n" (an out-of-band push); RESP2 "*n"; then n replies follow.
  void Push(size_t n);
  // Replies already encoded (by a Writer of the same protocol), as they are.
  void Raw(std::string_view replies) { out_->append(replies); }

 private:
  void Header(char type, uint64_t n);
  void Line(char type, std::string_view s);

  std::string* out_;
  int protocol_;
};

// The text Writer::Double writes for d (without type or CRLF).
std::string FormatDouble(double d);

}  // namespace cuckoo::server::resp

#endif  // CUCKOO_SERVER_RESP_RESP_PROTOCOL_H_
