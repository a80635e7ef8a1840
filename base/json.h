// JSON strings: the one escaper for every JSON the project writes by hand
// (the server's JSON logs and audit log, cuckooctl's --format=json,
// cuckoo-bench's report, the benchmarks' results).
//
//   std::string out = "{\"name\":";
//   out += cuckoo::JsonString(name);  // "\"a \\\"b\\\"\""
//
// Escaped: `"` and `\`, the control characters (\n, \r and \t as such, the
// rest and DEL as \u00XX). Everything else, UTF-8 included, is copied as it
// is: the caller passes text it knows to be UTF-8 (or accepts that a reader
// may refuse it).
#ifndef CUCKOO_BASE_JSON_H_
#define CUCKOO_BASE_JSON_H_

#include <string>
#include <string_view>

namespace cuckoo {

// Appends `text` as the inside of a JSON string (no quotes) to `out`: a
// std::string or any buffer with append(const char*, const char*), such as
// spdlog's memory_buf_t.
template <typename Buffer>
void AppendJsonEscaped(std::string_view text, Buffer& out) {
  constexpr char kHex[] = "0123456789abcdef";
  const char* run = text.data();
  const char* const end = text.data() + text.size();
  for (const char* p = run; p != end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F) continue;
    out.append(run, p);
    run = p + 1;
    char escape[6] = {'\\', static_cast<char>(c), 0, 0, 0, 0};
    size_t length = 2;
    switch (c) {
      case '"':
      case '\\':
        break;
      case '\n':
        escape[1] = 'n';
        break;
      case '\r':
        escape[1] = 'r';
        break;
      case '\t':
        escape[1] = 't';
        break;
      default:
        escape[1] = 'u';
        escape[2] = '0';
        escape[3] = '0';
        escape[4] = kHex[c >> 4];
        escape[5] = kHex[c & 0xF];
        length = 6;
    }
    out.append(escape, escape + length);
  }
  out.append(run, end);
}

// `text` as a JSON string literal, quotes included.
inline std::string JsonString(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  AppendJsonEscaped(text, out);
  out.push_back('"');
  return out;
}

}  // namespace cuckoo

#endif  // CUCKOO_BASE_JSON_H_
