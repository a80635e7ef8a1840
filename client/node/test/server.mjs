// Starts a real cuckood for the tests: the binary named by $CUCKOO_NODE_TEST_CUCKOOD
// (scripts/test.sh sets it), else build/release/server/cuckood of this repository.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const repoRoot = resolve(packageDir, "..", "..");
export const cuckood = process.env.CUCKOO_NODE_TEST_CUCKOOD
  ? resolve(process.env.CUCKOO_NODE_TEST_CUCKOOD)
  : join(repoRoot, "build", "release", "server", "cuckood");

/** A temporary directory, removed by the returned cleanup. */
export function tempDir(prefix = "cuckoo-node-") {
  return mkdtempSync(join(tmpdir(), prefix));
}

/**
 * Starts cuckood on 127.0.0.1 (a free port) and, with `unix`, also on a Unix
 * socket; `args` are extra flags. Resolves when it logs "serving on" to
 * { address: "127.0.0.1:PORT", socket, dir, stop(), log() }.
 */
export async function startServer({ args = [], unix = false } = {}) {
  if (!existsSync(cuckood)) {
    throw new Error(`no cuckood at ${cuckood}: build it (bash scripts/build.sh release cuckood) ` +
      "or set CUCKOO_NODE_TEST_CUCKOOD to its path");
  }
  const dir = tempDir();
  const socket = join(dir, "cuckood.sock");
  const listen = unix ? `127.0.0.1:0,unix://${socket}` : "127.0.0.1:0";
  // cuckood refuses unknown CUCKOOD_* variables: start it without any.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("CUCKOOD_")));
  const child = spawn(cuckood, [`--listen=${listen}`, "--admin-listen=", `--data-dir=${join(dir, "data")}`,
    "--memory-budget=64MiB", "--snapshot-interval=0", "--drain-timeout=1s", ...args],
  { env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const address = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`cuckood did not start in 15 s:\n${output}`)), 15000);
    const onData = (data) => {
      output += data;
      const m = /serving on (127\.0\.0\.1:\d+)/.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`cuckood exited (${code ?? signal}) before serving:\n${output}`));
    });
  });
  return {
    address,
    socket,
    dir,
    log: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const { code, signal } = await exited;
      rmSync(dir, { recursive: true, force: true });
      if (code !== 0) throw new Error(`cuckood exited ${code ?? signal}:\n${output}`);
    },
  };
}
