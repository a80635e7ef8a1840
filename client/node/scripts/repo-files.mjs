// The package ships the repository's proto (proto/cuckoo/v1/filter_service.proto)
// in its own proto/ directory, so an installed package needs nothing else,
// and the repository's LICENSE.
//   node scripts/repo-files.mjs copy    copies both from the repository (npm run build)
//   node scripts/repo-files.mjs check   fails unless the package's copy is
//                                  byte-for-byte the repository's (npm test)
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const file = join("cuckoo", "v1", "filter_service.proto");
const source = join(pkg, "..", "..", "proto", file);
const copy = join(pkg, "proto", file);

const mode = process.argv[2];
if (mode === "copy") {
  mkdirSync(dirname(copy), { recursive: true });
  copyFileSync(source, copy);
  copyFileSync(join(pkg, "..", "..", "LICENSE"), join(pkg, "LICENSE"));
} else if (mode === "check") {
  let theirs, ours;
  try {
    theirs = readFileSync(source);
    ours = readFileSync(copy);
  } catch (e) {
    console.error(`repo-files check: ${e.message} (run npm run build)`);
    process.exit(1);
  }
  if (!theirs.equals(ours)) {
    console.error(`repo-files check: ${relative(process.cwd(), copy)} differs from ` +
      `${relative(process.cwd(), source)}: run npm run build`);
    process.exit(1);
  }
} else {
  console.error("usage: node scripts/repo-files.mjs copy|check");
  process.exit(2);
}
