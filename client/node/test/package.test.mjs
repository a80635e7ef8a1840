// The package as a user gets it: `npm pack` of the built package (npm run
// build first; the pack skips the build so that it does not rewrite dist/
// under the other test files), installed with npm into a temporary
// directory, loaded through its ES module and its CommonJS entry points,
// type-checked from a TypeScript consumer of each kind, and used against a
// real cuckood. Its dependencies come from npm's cache when they are there
// (scripts/test.sh's `npm ci` of client/node fills it).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { packageDir, repoRoot, startServer, tempDir } from "./server.mjs";

const npm = (args, cwd) => execFileSync("npm", [...args, "--no-audit", "--no-fund", "--loglevel=error"],
  { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

let dir;
let app;
let server;
let packed;
before(async () => {
  if (!existsSync(join(packageDir, "dist", "cjs", "index.js"))) throw new Error("no dist/: run npm run build first");
  dir = tempDir("cuckoo-node-pack-");
  [packed] = JSON.parse(npm(["pack", "--ignore-scripts", "--json", "--pack-destination", dir], packageDir));
  app = join(dir, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true }));
  npm(["install", "--prefer-offline", join(dir, packed.filename)], app);
  server = await startServer();
});
after(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("the tarball holds the builds, the types and the proto, not the sources", () => {
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ["package.json", "README.md", "LICENSE", "dist/cjs/index.js", "dist/cjs/index.d.ts",
    "dist/esm/index.mjs", "dist/esm/index.d.mts", "proto/cuckoo/v1/filter_service.proto"]) {
    assert.ok(files.includes(f), `${f} is in the tarball: ${files.join(", ")}`);
  }
  assert.deepEqual(files.filter((f) => /^(src|test|scripts|node_modules)\//.test(f)), []);
  assert.match(packed.filename, /^cuckood-client-\d+\.\d+\.\d+\.tgz$/);
});

test("the installed proto is the repository's", () => {
  const file = join("proto", "cuckoo", "v1", "filter_service.proto");
  assert.ok(readFileSync(join(app, "node_modules", "@cuckood", "client", file)).equals(readFileSync(join(repoRoot, file))),
    `the packed ${file} differs from the repository's: run npm run build in client/node`);
});

const use = (name) => `
  const client = new Client({ target: process.argv[2], token: "" });
  await client.createFilter("${name}", { capacity: 1000 });
  const inserted = await client.insert("${name}", ["k"]);
  const found = await client.lookup("${name}", ["k", "absent"]);
  let missing;
  try { await client.getFilter("no-such-filter"); } catch (e) { missing = e instanceof CuckooError && e.code === Status.NOT_FOUND; }
  client.close();
  console.log(JSON.stringify({ inserted, found, missing }));`;

test("the ES module entry point", () => {
  writeFileSync(join(app, "esm.mjs"), `
import { Client, CuckooError, Status } from "@cuckood/client";
import { createRequire } from "node:module";
// One implementation behind both entry points.
if (createRequire(import.meta.url)("@cuckood/client").Client !== Client) throw new Error("two Client classes");
${use("from-esm")}`);
  const out = JSON.parse(execFileSync("node", ["esm.mjs", server.address], { cwd: app, encoding: "utf8" }));
  assert.deepEqual(out, { inserted: ["INSERTED"], found: [true, false], missing: true });
});

test("the CommonJS entry point", () => {
  writeFileSync(join(app, "cjs.cjs"), `
const { Client, CuckooError, Status } = require("@cuckood/client");
(async () => {${use("from-cjs")}
})().catch((e) => { console.error(e); process.exit(1); });`);
  const out = JSON.parse(execFileSync("node", ["cjs.cjs", server.address], { cwd: app, encoding: "utf8" }));
  assert.deepEqual(out, { inserted: ["INSERTED"], found: [true, false], missing: true });
});

test("the type declarations, from TypeScript ES module and CommonJS code", () => {
  const consumer = (imports) => `${imports}
export async function run(target: string): Promise<number> {
  const client = new Client({ target, token: "", timeoutMs: 5000 });
  const info: FilterInfo = await client.createFilter("typed", { capacity: 1000, ifNotExists: true });
  const results: InsertResult[] = await client.insert(info.name, ["a", new Uint8Array([1])]);
  const present: boolean[] = await client.lookup(info.name, ["a"]);
  const position: number = (await client.count(info.name, ["a"])).logPosition;
  // @ts-expect-error capacity is required
  await client.createFilter("untyped", {});
  // @ts-expect-error keys are strings or bytes
  await client.lookup("typed", [1]);
  client.close();
  return results.length + present.length + position;
}
export function isNotFound(e: unknown): boolean {
  return e instanceof CuckooError && e.code === Status.NOT_FOUND;
}
`;
  writeFileSync(join(app, "typed.mts"), consumer(`import { Client, CuckooError, Status, type FilterInfo, type InsertResult } from "@cuckood/client";`));
  writeFileSync(join(app, "typed.cts"), consumer(`import { Client, CuckooError, Status } from "@cuckood/client";
import type { FilterInfo, InsertResult } from "@cuckood/client";`));
  writeFileSync(join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      module: "nodenext", moduleResolution: "nodenext", target: "ES2022", strict: true, noEmit: true,
      // Declaration files are not checked in themselves (tsc wrote the
      // package's); what the consumers do with their types is.
      skipLibCheck: true,
      typeRoots: [join(packageDir, "node_modules", "@types")], types: ["node"],
    },
    files: ["typed.mts", "typed.cts"],
  }));
  const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");
  try {
    execFileSync("node", [tsc, "-p", "tsconfig.json"], { cwd: app, encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    assert.fail(`tsc found errors:\n${e.stdout}${e.stderr}`);
  }
});

test("README.md's example, run as it is against a new server, prints what README.md says", async () => {
  const readme = readFileSync(join(packageDir, "README.md"), "utf8");
  const example = /## Example\n\n```js\n([\s\S]*?)```\n\nprints\n\n```text\n([\s\S]*?)```/.exec(readme);
  assert.ok(example, "README.md has an Example section: a js block, \"prints\", a text block");
  const [, code, expected] = example;
  assert.ok(code.includes('"localhost:50051"'));
  const fresh = await startServer();
  try {
    writeFileSync(join(app, "readme.mjs"), code.replace('"localhost:50051"', JSON.stringify(fresh.address)));
    const out = execFileSync("node", ["readme.mjs"], { cwd: app, encoding: "utf8" });
    // Log positions count the server's log records, which are its business.
    const positionless = (text) => text.replace(/logPosition: \d+/g, "logPosition: N");
    assert.equal(positionless(out), positionless(expected));
    assert.equal((out.match(/logPosition: [1-9]/g) ?? []).length, 5);
  } finally {
    await fresh.stop();
  }
});
