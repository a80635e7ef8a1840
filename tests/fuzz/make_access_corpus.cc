// Writes the access fuzzer's seeds into DIR: valid files of every kind of
// entry and a few typical mistakes.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::string mkdir = "mkdir -p '" + dir + "'";
  if (std::system(mkdir.c_str()) != 0) return 1;
  const std::string hash(64, 'a');
  const std::string seeds[] = {
      "# comment\ntoken reader sha256:" + hash + " read:billing.*\n",
      "token w sha256:" + hash +
          " write:billing.* read:*\ncert c san:spiffe://acme/x admin:cart.?\n",
      "cert ops \"subject:CN=ops, O=Acme \\\"x\\\"\" admin:*\r\ncert b cn:batch write:e*\n",
      "token a sha256:" + hash + " reed:x\n",
      "token a sha256:abc read:*\n",
      "cert a \"san:x read:*\n",
      "**a*?b\tabcab",
  };
  int i = 0;
  for (const std::string& s : seeds) {
    std::ofstream(dir + "/seed-" + std::to_string(i++)) << s;
  }
  return 0;
}
