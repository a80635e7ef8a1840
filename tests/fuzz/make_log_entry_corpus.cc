// Seeds for log_entry_fuzz: one entry of every type from the real encoder
// (names of assorted lengths, both table kinds, empty and larger hash lists,
// if_absent), written as files into the directory given.
//   make_log_entry_corpus DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/filter_options.h"
#include "server/cluster/log_entry.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  using namespace cuckoo::server;
  const std::string dir = argv[1];
  std::vector<std::string> seeds;
  std::vector<uint64_t> hashes;
  for (uint64_t i = 0; i < 40; ++i) hashes.push_back(i * 0x9e3779b97f4a7c15ULL);
  seeds.push_back(EncodeInsertEntry(1, "f", false, {}));
  seeds.push_back(EncodeInsertEntry(77, "users.v2", true, hashes));
  seeds.push_back(
      EncodeDeleteEntry(5, std::string(128, 'x'), absl::MakeConstSpan(hashes).subspan(0, 3)));
  seeds.push_back(EncodeDropEntry(9, "a-b_c"));
  seeds.push_back(EncodeRenameEntry(9, "seen:today", "seen:yesterday", 0, false));
  seeds.push_back(EncodeRenameEntry(12, "a", std::string(512, 'n'), 9, true));
  seeds.push_back(EncodeSetExpiryEntry(9, "seen:2026-11-29", 1796083200000));
  seeds.push_back(EncodeSetExpiryEntry(9, "seen:2026-11-29", 0));
  for (bool semi : {false, true}) {
    cuckoo::FilterOptions o{.capacity = 100'000, .seed = 3};
    o.semi_sort = semi;
    absl::StatusOr<cuckoo::FilterShape> shape = cuckoo::ComputeShape(o);
    if (!shape.ok()) return 1;
    seeds.push_back(EncodeCreateEntry(semi ? "semi" : "packed", *shape));
  }
  {
    absl::StatusOr<cuckoo::FilterShape> growing = cuckoo::ComputeShape(
        {.capacity = 1000, .seed = 3, .growth_factor = 2, .max_capacity = 1'000'000});
    if (!growing.ok()) return 1;
    seeds.push_back(EncodeCreateEntry("grows", *growing));
  }
  std::filesystem::create_directories(dir);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(dir + "/seed-" + std::to_string(i), std::ios::binary) << seeds[i];
  }
  return 0;
}
