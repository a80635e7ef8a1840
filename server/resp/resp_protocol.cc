#include "server/resp/resp_protocol.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <system_error>

namespace cuckoo::server::resp {
namespace {

// Redis's string2ll: an optional '-', then digits without leading zeros
// ("0" alone is fine, "-0", "+1", "01", " 1" and "" are not), no overflow.
bool ParseLength(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  if (s == "0") {
    *out = 0;
    return true;
  }
  bool negative = false;
  if (s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
    if (s.empty()) return false;
  }
  if (s[0] < '1' || s[0] > '9') return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > static_cast<uint64_t>(INT64_MAX) + 1) return false;
    *out = v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(v);
  } else {
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

// C's isspace in the C locale, as sdssplitargs uses it.
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// One inline argument while it is read: the bytes, and whether they are one
// untransformed run of the line (then the argument is a view of the line).
struct InlineArg {
  bool in_storage = false;
  size_t offset = 0;  // in the line's data when !in_storage, else in the storage string
  size_t length = 0;
};

// Splits an inline line as sdssplitargs does. Arguments that are a plain run
// of `data` (offsets [begin, end)) are returned as such; the others are
// appended to *unescaped. False for unbalanced quotes.
bool SplitInline(std::string_view data, size_t begin, size_t end, std::vector<InlineArg>* args,
                 std::string* unescaped) {
  // The line as a C string: past its end, and at a NUL, there is NUL.
  auto at = [&](size_t i) -> char { return i < end ? data[i] : '\0'; };
  std::string cur;
  size_t i = begin;
  for (;;) {
    while (at(i) != '\0' && IsSpace(at(i))) ++i;
    if (at(i) == '\0') return true;
    bool in_double = false, in_single = false, done = false;
    bool contiguous = true;
    size_t run_begin = 0, run_end = 0;
    cur.clear();
    auto raw = [&](size_t idx) {
      if (cur.empty()) {
        run_begin = idx;
        run_end = idx + 1;
      } else if (contiguous && idx == run_end) {
        ++run_end;
      } else {
        contiguous = false;
      }
      cur.push_back(data[idx]);
    };
    auto escaped = [&](char c) {
      contiguous = false;
      cur.push_back(c);
    };
    while (!done) {
      const char c = at(i);
      if (in_double) {
        if (c == '\\' && at(i + 1) == 'x' && HexValue(at(i + 2)) >= 0 && HexValue(at(i + 3)) >= 0) {
          escaped(static_cast<char>(HexValue(at(i + 2)) * 16 + HexValue(at(i + 3))));
          i += 3;
        } else if (c == '\\' && at(i + 1) != '\0') {
          ++i;
          switch (at(i)) {
            case 'n':
              escaped('\n');
              break;
            case 'r':
              escaped('\r');
              break;
            case 't':
              escaped('\t');
              break;
            case 'b':
              escaped('\b');
              break;
            case 'a':
              escaped('\a');
              break;
            default:
              escaped(at(i));
              break;
          }
        } else if (c == '"') {
          // The closing quote must be followed by a space or the end.
          if (at(i + 1) != '\0' && !IsSpace(at(i + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;  // unterminated quotes
        } else {
          raw(i);
        }
      } else if (in_single) {
        if (c == '\\' && at(i + 1) == '\'') {
          ++i;
          escaped('\'');
        } else if (c == '\'') {
          if (at(i + 1) != '\0' && !IsSpace(at(i + 1))) return false;
          done = true;
        } else if (c == '\0') {
          return false;
        } else {
          raw(i);
        }
      } else {
        switch (c) {
          case ' ':
          case '\n':
          case '\r':
          case '\t':
          case '\0':
            done = true;
            break;
          case '"':
            in_double = true;
            contiguous = contiguous && cur.empty();
            break;
          case '\'':
            in_single = true;
            contiguous = contiguous && cur.empty();
            break;
          default:
            raw(i);
            break;
        }
      }
      if (at(i) != '\0') ++i;
    }
    InlineArg arg;
    if (cur.empty()) {
      arg.offset = begin;  // an empty argument ("" or ''): an empty view
    } else if (contiguous) {
      arg.offset = run_begin;
      arg.length = run_end - run_begin;
    } else {
      arg.in_storage = true;
      arg.offset = unescaped->size();
      arg.length = cur.size();
      unescaped->append(cur);
    }
    args->push_back(arg);
  }
}

std::string Num(uint64_t v) { return std::to_string(v); }

// Argument offsets kept from one command to the next (64 KiB).
constexpr size_t kKeepSpans = 4096;

}  // namespace

Parser::Parser(const ParserLimits& limits) : limits_(limits) {}

void Parser::Reset() {
  state_ = State::kStart;
  error_.clear();
  start_ = pos_ = scan_ = 0;
  expected_args_ = bulk_len_ = 0;
  arg_spans_.clear();
  // A command of many arguments does not pin its offsets' memory (16 bytes
  // an argument) for the connection's life.
  if (arg_spans_.capacity() > kKeepSpans) decltype(arg_spans_)().swap(arg_spans_);
}

void Parser::ReleaseArgs() {
  storage_.clear();
  storage_bytes_ = 0;
}

size_t Parser::pending_hint() const {
  if (state_ != State::kBulkData) return 0;
  return pos_ + static_cast<size_t>(bulk_len_) + 2;
}

Parser::Result Parser::Fail(std::string message, std::string* error) {
  state_ = State::kError;
  if (limits_.note != nullptr && *limits_.note != '\0' &&
      message.find(" over the limit of ") != std::string::npos) {
    message += limits_.note;
  }
  error_ = std::move(message);
  *error = error_;
  return Result::kError;
}

Parser::Result Parser::Parse(std::string_view data, size_t* consumed,
                             std::vector<std::string_view>* args, std::string* error) {
  *consumed = 0;
  args->clear();
  if (state_ == State::kError) {
    *error = error_;
    return Result::kError;
  }
  // Fewer bytes than already parsed: not the same bytes again. Start over
  // rather than read past the end.
  if (data.size() < pos_ || data.size() < scan_) Reset();
  for (;;) {
    switch (state_) {
      case State::kStart:
        if (pos_ >= data.size()) return Result::kNeedMore;
        start_ = pos_;
        if (data[pos_] == '*') {
          state_ = State::kMultibulkCount;
          scan_ = pos_ + 1;
        } else {
          state_ = State::kInline;
          scan_ = pos_;
        }
        break;
      case State::kMultibulkCount:
      case State::kBulkHeader:
      case State::kBulkData: {
        const Result r = ParseMultibulk(data, consumed, args, error);
        if (r != Result::kCommand || !args->empty()) return r;
        break;  // an empty command was skipped
      }
      case State::kInline: {
        const Result r = ParseInline(data, consumed, args, error);
        if (r != Result::kCommand || !args->empty()) return r;
        break;  // an empty line was skipped
      }
      case State::kError:
        *error = error_;
        return Result::kError;
    }
  }
}

Parser::Result Parser::FindLengthLine(std::string_view data, const char* too_big, size_t* line_end,
                                      std::string* error) {
  // The line, from its '*' or '$' to its CR, may be max_inline_bytes long.
  const size_t limit = std::min(data.size(), pos_ + limits_.max_inline_bytes + 1);
  const size_t from = std::max(scan_, pos_ + 1);
  size_t cr = std::string_view::npos;
  if (from < limit) {
    const void* p = std::memchr(data.data() + from, '\r', limit - from);
    if (p != nullptr) cr = static_cast<size_t>(static_cast<const char*>(p) - data.data());
  }
  if (cr == std::string_view::npos) {
    if (data.size() > pos_ + limits_.max_inline_bytes) {
      return Fail(std::string("ERR Protocol error: ") + too_big, error);
    }
    scan_ = std::max(from, limit);
    return Result::kNeedMore;
  }
  scan_ = cr;
  if (cr + 1 >= data.size()) return Result::kNeedMore;
  if (data[cr + 1] != '\n') {
    return Fail("ERR Protocol error: a length line's CR is not followed by LF", error);
  }
  *line_end = cr;
  return Result::kCommand;
}

Parser::Result Parser::ParseMultibulk(std::string_view data, size_t* consumed,
                                      std::vector<std::string_view>* args, std::string* error) {
  for (;;) {
    if (state_ == State::kMultibulkCount) {
      size_t cr = 0;
      const Result r = FindLengthLine(data, "too big mbulk count string", &cr, error);
      if (r != Result::kCommand) return r;
      int64_t n = 0;
      if (!ParseLength(data.substr(pos_ + 1, cr - pos_ - 1), &n) || n > INT_MAX) {
        return Fail("ERR Protocol error: invalid multibulk length", error);
      }
      if (cr + 2 > limits_.max_command_bytes) {
        return Fail("ERR Protocol error: command of " + Num(cr + 2) +
                        " bytes or more is over the limit of " + Num(limits_.max_command_bytes) +
                        " bytes",
                    error);
      }
      pos_ = scan_ = cr + 2;
      if (n <= 0) {  // an empty command: skipped, as Redis does
        state_ = State::kStart;
        return Result::kCommand;
      }
      if (static_cast<uint64_t>(n) > limits_.max_args) {
        return Fail("ERR Protocol error: " + Num(static_cast<uint64_t>(n)) +
                        " arguments is over the limit of " + Num(limits_.max_args),
                    error);
      }
      expected_args_ = n;
      arg_spans_.clear();
      // Grown as arguments arrive: a header alone allocates little.
      arg_spans_.reserve(static_cast<size_t>(std::min<int64_t>(n, 1024)));
      state_ = State::kBulkHeader;
    }
    if (state_ == State::kBulkHeader) {
      if (pos_ >= data.size()) return Result::kNeedMore;
      if (data[pos_] != '$') {
        return Fail(std::string("ERR Protocol error: expected '$', got '") + data[pos_] + "'",
                    error);
      }
      // The common header, "$" and 1-9 digits without a leading zero and
      // CRLF, all here, under the limits: read without the general path's
      // search (a 1000-key command has 1000 of them).
      if (size_t digits = 0, v = 0; data.size() >= pos_ + 12) {
        const char* h = data.data() + pos_ + 1;
        while (digits < 9 && h[digits] >= '0' && h[digits] <= '9') {
          v = v * 10 + static_cast<size_t>(h[digits] - '0');
          ++digits;
        }
        if (digits > 0 && (h[0] != '0' || digits == 1) && h[digits] == '\r' &&
            h[digits + 1] == '\n' && digits + 1 <= limits_.max_inline_bytes &&
            v <= limits_.max_bulk_bytes && pos_ + digits + 3 + v + 2 <= limits_.max_command_bytes) {
          pos_ += digits + 3;
          bulk_len_ = static_cast<int64_t>(v);
          state_ = State::kBulkData;
        }
      }
    }
    if (state_ == State::kBulkHeader) {
      size_t cr = 0;
      const Result r = FindLengthLine(data, "too big bulk count string", &cr, error);
      if (r != Result::kCommand) return r;
      int64_t len = 0;
      if (!ParseLength(data.substr(pos_ + 1, cr - pos_ - 1), &len) || len < 0) {
        return Fail("ERR Protocol error: invalid bulk length", error);
      }
      if (static_cast<uint64_t>(len) > limits_.max_bulk_bytes) {
        return Fail("ERR Protocol error: bulk length " + Num(static_cast<uint64_t>(len)) +
                        " is over the limit of " + Num(limits_.max_bulk_bytes) + " bytes",
                    error);
      }
      const uint64_t end = cr + 2 + static_cast<uint64_t>(len) + 2;
      if (end > limits_.max_command_bytes) {
        return Fail("ERR Protocol error: command of " + Num(end) +
                        " bytes or more is over the limit of " + Num(limits_.max_command_bytes) +
                        " bytes",
                    error);
      }
      pos_ = cr + 2;
      bulk_len_ = len;
      state_ = State::kBulkData;
    }
    // kBulkData
    const size_t len = static_cast<size_t>(bulk_len_);
    const size_t data_end = pos_ + len;
    if (data.size() > data_end && data[data_end] != '\r') {
      return Fail("ERR Protocol error: bulk data not followed by CRLF", error);
    }
    if (data.size() > data_end + 1 && data[data_end + 1] != '\n') {
      return Fail("ERR Protocol error: bulk data not followed by CRLF", error);
    }
    if (data.size() < data_end + 2) return Result::kNeedMore;
    arg_spans_.emplace_back(pos_, len);
    pos_ = scan_ = data_end + 2;
    if (arg_spans_.size() < static_cast<size_t>(expected_args_)) {
      state_ = State::kBulkHeader;
      continue;
    }
    args->reserve(arg_spans_.size());
    for (const auto& [offset, length] : arg_spans_) args->push_back(data.substr(offset, length));
    *consumed = pos_;
    Reset();
    return Result::kCommand;
  }
}

Parser::Result Parser::ParseInline(std::string_view data, size_t* consumed,
                                   std::vector<std::string_view>* args, std::string* error) {
  // The line, without its LF, may be max_inline_bytes long.
  const size_t limit = std::min(data.size(), pos_ + limits_.max_inline_bytes + 1);
  size_t nl = std::string_view::npos;
  if (scan_ < limit) {
    const void* p = std::memchr(data.data() + scan_, '\n', limit - scan_);
    if (p != nullptr) nl = static_cast<size_t>(static_cast<const char*>(p) - data.data());
  }
  if (nl == std::string_view::npos) {
    if (data.size() > pos_ + limits_.max_inline_bytes) {
      return Fail("ERR Protocol error: too big inline request", error);
    }
    scan_ = std::max(scan_, limit);
    return Result::kNeedMore;
  }
  if (nl + 1 > limits_.max_command_bytes) {
    return Fail("ERR Protocol error: command of " + Num(nl + 1) +
                    " bytes or more is over the limit of " + Num(limits_.max_command_bytes) +
                    " bytes",
                error);
  }
  size_t line_end = nl;
  if (line_end > pos_ && data[line_end - 1] == '\r') --line_end;
  std::vector<InlineArg> parsed;
  std::string unescaped;
  if (!SplitInline(data, pos_, line_end, &parsed, &unescaped)) {
    return Fail("ERR Protocol error: unbalanced quotes in request", error);
  }
  if (parsed.size() > limits_.max_args) {
    return Fail("ERR Protocol error: " + Num(parsed.size()) + " arguments is over the limit of " +
                    Num(limits_.max_args),
                error);
  }
  pos_ = scan_ = nl + 1;
  if (parsed.empty()) {  // an empty line: skipped, as Redis does
    state_ = State::kStart;
    return Result::kCommand;
  }
  for (const InlineArg& a : parsed) {
    if (a.length > limits_.max_bulk_bytes) {
      return Fail("ERR Protocol error: bulk length " + Num(a.length) + " is over the limit of " +
                      Num(limits_.max_bulk_bytes) + " bytes",
                  error);
    }
  }
  const std::string* store = nullptr;
  if (!unescaped.empty()) {
    store = &storage_.emplace_back(std::move(unescaped));
    storage_bytes_ += store->capacity() + sizeof(std::string);
  }
  args->reserve(parsed.size());
  for (const InlineArg& a : parsed) {
    args->push_back(a.in_storage ? std::string_view(*store).substr(a.offset, a.length)
                                 : data.substr(a.offset, a.length));
  }
  *consumed = pos_;
  Reset();
  return Result::kCommand;
}

// ---------------------------------------------------------------------------

Writer::Writer(std::string* out, int protocol) : out_(out), protocol_(protocol == 3 ? 3 : 2) {}

void Writer::Header(char type, uint64_t n) {
  char buf[24];
  buf[0] = type;
  const auto r = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n);
  char* p = r.ptr;
  *p++ = '\r';
  *p++ = '\n';
  out_->append(buf, static_cast<size_t>(p - buf));
}

void Writer::Line(char type, std::string_view s) {
  const size_t at = out_->size();
  out_->push_back(type);
  out_->append(s);
  for (size_t i = at + 1; i < out_->size(); ++i) {
    char& c = (*out_)[i];
    if (c == '\r' || c == '\n') c = ' ';
  }
  out_->append("\r\n");
}

void Writer::SimpleString(std::string_view s) { Line('+', s); }

void Writer::Error(std::string_view message) { Line('-', message); }

void Writer::Integer(int64_t v) {
  char buf[32];
  buf[0] = ':';
  const auto r = std::to_chars(buf + 1, buf + sizeof(buf) - 2, v);
  char* p = r.ptr;
  *p++ = '\r';
  *p++ = '\n';
  out_->append(buf, static_cast<size_t>(p - buf));
}

void Writer::Bulk(std::string_view s) {
  Header('$', s.size());
  out_->append(s);
  out_->append("\r\n");
}

void Writer::Null() { out_->append(protocol_ == 3 ? "_\r\n" : "$-1\r\n"); }

void Writer::NullArray() { out_->append(protocol_ == 3 ? "_\r\n" : "*-1\r\n"); }

void Writer::Array(size_t n) { Header('*', n); }

void Writer::Map(size_t n) {
  if (protocol_ == 3) {
    Header('%', n);
  } else {
    Header('*', static_cast<uint64_t>(n) * 2);
  }
}

void Writer::Set(size_t n) { Header(protocol_ == 3 ? '~' : '*', n); }

void Writer::Push(size_t n) { Header(protocol_ == 3 ? '>' : '*', n); }

void Writer::Double(double d) {
  const std::string text = FormatDouble(d);
  if (protocol_ == 3) {
    out_->push_back(',');
    out_->append(text);
    out_->append("\r\n");
  } else {
    Bulk(text);
  }
}

void Writer::Boolean(bool b) {
  if (protocol_ == 3) {
    out_->append(b ? "#t\r\n" : "#f\r\n");
  } else {
    out_->append(b ? ":1\r\n" : ":0\r\n");
  }
}

void Writer::Verbatim(std::string_view format, std::string_view text) {
  if (protocol_ != 3) {
    Bulk(text);
    return;
  }
  if (format.size() != 3) format = "txt";
  Header('=', static_cast<uint64_t>(text.size()) + 4);
  out_->append(format);
  out_->push_back(':');
  out_->append(text);
  out_->append("\r\n");
}

std::string FormatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest digits that read back as d, e.g. "-1.2345e-05".
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  std::string out;
  if (sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::string_view es = sci.substr(e + 1);
  const bool neg_exp = es[0] == '-';
  es.remove_prefix(1);  // the sign
  (void)std::from_chars(es.data(), es.data() + es.size(), exp);
  if (neg_exp) exp = -exp;
  // %g: fixed notation for exponents from -4 to below the precision (17).
  if (exp >= -4 && exp < 17) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else {
      const size_t int_digits = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_digits) {
        out += digits;
        out.append(int_digits - digits.size(), '0');
      } else {
        out.append(digits, 0, int_digits);
        out.push_back('.');
        out.append(digits, int_digits, std::string::npos);
      }
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out.push_back('e');
  out.push_back(neg_exp ? '-' : '+');
  const int abs_exp = exp < 0 ? -exp : exp;
  if (abs_exp < 10) out.push_back('0');
  out += std::to_string(abs_exp);
  return out;
}

}  // namespace cuckoo::server::resp
