// Writes the seed corpus of the wire fuzzer (tests/fuzz/wire_fuzz.cc) into a
// directory: requests serialized by the generated code (empty, filter only,
// keys of assorted lengths, if_absent, merged messages), requests with
// unknown fields of every wire type and nested groups, and a few the
// generated parser rejects (truncated, a length varint over 32 bits, a zero
// tag, invalid UTF-8 in the filter). Each is written whole and again cut
// into chunks, with the fuzzer's input header (see wire_fuzz.cc). A few KB in
// all; generated at build or test time, never committed.
//
//   make_wire_corpus <dir>
//
// Every seed's message must be accepted or rejected by the generated parser
// as this file expects, so a change that breaks the corpus fails here, not
// silently in the fuzzer. Exits non-zero on any failure.
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cuckoo/v1/filter_service.pb.h"

namespace {

using cuckoo::v1::InsertRequest;

struct Seed {
  std::string name;
  std::string message;
  bool valid;  // Whether the generated parser accepts it.
};

InsertRequest Request(const std::string& filter, std::vector<std::string> keys, bool if_absent) {
  InsertRequest r;
  r.set_filter(filter);
  for (std::string& k : keys) r.add_keys(std::move(k));
  r.set_if_absent(if_absent);
  return r;
}

std::string S(const char* s, size_t n) { return std::string(s, n); }

// The fuzzer's header: `cuts` (at most 7) and a limits byte.
std::string Header(const std::vector<uint16_t>& cuts, uint8_t limits) {
  std::string h;
  h.push_back(static_cast<char>(cuts.size()));
  h.push_back(static_cast<char>(limits));
  for (uint16_t c : cuts) {
    h.push_back(static_cast<char>(c & 0xff));
    h.push_back(static_cast<char>(c >> 8));
  }
  return h;
}

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "make_wire_corpus: cannot create %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    return 1;
  }

  const std::string some = Request("users", {"alice", "bob", "carol"}, true).SerializeAsString();
  std::vector<std::string> many_keys;
  for (int i = 0; i < 40; ++i) many_keys.push_back("user:" + std::to_string(i * 7919));
  // Unknown fields: varint, fixed64, length-delimited, fixed32, a group
  // holding a "key", and keys (field 2) as a varint.
  const std::string unknown = S("\x48\x96\x01", 3) + S("\x49", 1) + std::string(8, '\x07') +
                              S("\x4a\x03xyz", 5) + S("\x4d\x01\x02\x03\x04", 5) +
                              S("\x4b\x12\x01k\x4c", 5) + S("\x10\x05", 2);
  // Groups of fields 5 and 6 nested `depth` deep; the generated parser
  // allows 100.
  auto nest = [](int depth) {
    std::string s;
    for (int i = 0; i < depth; ++i) s += static_cast<char>(((5 + i % 2) << 3) | 3);
    for (int i = depth - 1; i >= 0; --i) s += static_cast<char>(((5 + i % 2) << 3) | 4);
    return s;
  };
  const std::string nested = nest(10);

  const std::vector<Seed> seeds = {
      {"empty", "", true},
      {"filter-only", Request("f", {}, false).SerializeAsString(), true},
      {"some-keys", some, true},
      {"many-keys", Request("bulk.filter-1", many_keys, false).SerializeAsString(), true},
      {"long-key", Request("f", {std::string(300, 'k'), ""}, false).SerializeAsString(), true},
      {"utf8-filter", Request("f\xc3\xa9\xe2\x82\xac", {"k"}, true).SerializeAsString(), true},
      {"merged", some + Request("other", {"dave"}, false).SerializeAsString(), true},
      {"unknown-fields", unknown + some + unknown, true},
      {"nested-groups", nested + some, true},
      {"groups-100-deep", some + nest(100), true},
      {"groups-101-deep", some + nest(101), false},
      {"ten-byte-varint", S("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 11), true},
      {"five-byte-tag", S("\x92\x80\x80\x80\x70\x01k", 7), true},
      {"truncated", some.substr(0, some.size() - 4), false},  // Inside "carol".
      {"length-over-32-bits", S("\x12\x81\x80\x80\x80\x10\x6b", 7), false},
      {"trailing-zero-tag", some + S("\x00", 1), false},
      {"bad-utf8-filter", S("\x0a\x02\xc3\x28", 4) + some, false},
      {"group-mismatch", S("\x2b\x34", 2) + some, false},
  };
  bool ok = true;
  size_t files = 0, bytes = 0;
  for (const Seed& s : seeds) {
    InsertRequest r;
    bool parsed;
    {
      google::protobuf::LogSilencer quiet;
      parsed = r.ParseFromArray(s.message.data(), static_cast<int>(s.message.size()));
    }
    if (parsed != s.valid) {
      std::fprintf(stderr, "make_wire_corpus: the generated parser %s %s\n",
                   parsed ? "accepts" : "rejects", s.name.c_str());
      ok = false;
      continue;
    }
    const uint16_t n = static_cast<uint16_t>(s.message.size());
    // Whole with no limits to speak of (limits byte 0x3f: 7 keys of up to 22
    // bytes), and cut in three with tighter ones.
    const std::pair<std::string, std::string> inputs[] = {
        {s.name + ".bin", Header({}, 0x3f) + s.message},
        {s.name + "-cut.bin", Header({static_cast<uint16_t>(n / 3), static_cast<uint16_t>(n / 2),
                                      static_cast<uint16_t>(n / 2)},
                                     0x0a) +
                                  s.message},
    };
    for (const auto& [name, data] : inputs) {
      if (!Write(dir + "/" + name, data)) {
        std::fprintf(stderr, "make_wire_corpus: cannot write %s/%s\n", dir.c_str(), name.c_str());
        ok = false;
      }
      ++files;
      bytes += data.size();
    }
  }
  if (!ok) return 1;
  std::printf("make_wire_corpus: %zu files, %zu bytes in %s\n", files, bytes, dir.c_str());
  return 0;
}
