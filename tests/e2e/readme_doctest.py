#!/usr/bin/python3
"""Runs the ```sh and ```python blocks of README.md and client/README.md.

Each Markdown file's blocks run in order, as a reader would run them from the
repository root after the quick start: in a fresh temporary directory that
holds `build/release` (a symlink to the build tree), against a fresh cuckood
started like `scripts/run.sh` starts it (gRPC on 0.0.0.0:50051, admin on
0.0.0.0:9090, Redis protocol on 127.0.0.1:6379, data in ./data). So that
those fixed ports are always free, everything runs in a private network
namespace (`unshare --net`, as root; CI runs as root): the script re-executes
itself there and brings up its loopback.

A ```sh block runs with `bash -e` (no pipefail: a pipeline's status is its
last command's, as in a reader's shell; PATH starts with build/release/client,
as after the README's `export PATH=...`); a ```python
block with /usr/bin/python3 and PYTHONPATH=build/release/python, or, once a
block has made the virtual environment `venv` in that directory (README.md's
"From Python" installs the Python client's wheel there), with venv/bin/python
and no PYTHONPATH, as the README says. Conventions in the Markdown:

  cmd   # ... -> TEXT      the block's output (stdout and stderr) contains
                           TEXT (runs of white space match any white
                           space); several are checked in order
  cmd   # ... exit N       this command exits N (every other one must exit 0);
                           may follow an expectation: `# -> TEXT; exit 1`
  <!-- doctest: skip: REASON -->   on the line before a fence: the block is
                           not run; REASON is printed

Exit 0 when every block passed; 1 (naming the block, its output and what
differed) otherwise; 2 on a setup problem (not root, no unshare, no binary).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

PYTHON = "/usr/bin/python3"
VENV_PYTHON = "venv/bin/python"  # relative to the blocks' directory
FILES = ["README.md", "client/README.md"]
BLOCK_TIMEOUT = 60  # seconds per block
SKIP_RE = re.compile(r"<!--\s*doctest:\s*skip:\s*(.*?)\s*-->")
FENCE_RE = re.compile(r"^\s*```(\S*)\s*$")
CLOSE_RE = re.compile(r"^\s*```\s*$")
EXPECT_RE = re.compile(r"->\s*(.*?)\s*$")
EXIT_RE = re.compile(r"\bexit (\d+)\s*$")


def blocks(path):
    """Yields (line number, language, text, skip reason or None) per fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE_RE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i + 1, m.group(1)
        j = i + 1
        while j < len(lines) and not CLOSE_RE.match(lines[j]):
            j += 1
        skip = None
        if i > 0:
            s = SKIP_RE.search(lines[i - 1])
            if s:
                skip = s.group(1)
        yield start, lang, "\n".join(lines[i + 1:j]) + "\n", skip
        i = j + 1


def trailing_comment(line):
    """The text after a ` # ` that starts a trailing comment, or None."""
    m = re.search(r"\s#\s(.*)$", line)
    return m.group(1) if m and not line.lstrip().startswith("#") else None


def expectations(text):
    """The `-> TEXT` of every trailing comment, in order."""
    out = []
    for line in text.split("\n"):
        c = trailing_comment(line)
        if c:
            m = EXPECT_RE.search(c)
            if m:
                out.append(" ".join(EXIT_RE.sub("", m.group(1)).rstrip(" ;").split()))
    return out


def sh_script(text):
    """The block as a bash script: a line whose comment says `exit N` must exit N."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        c = trailing_comment(line)
        m = EXIT_RE.search(c) if c else None
        if m:
            want = m.group(1)
            out.append("set +e; " + line)
            out.append(f'__rc=$?; set -e; if [ "$__rc" != {want} ]; then '
                       f'echo "doctest: line {n} exited $__rc, the README says {want}" >&2; exit 99; fi')
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def wait_ready(env, cwd, deadline):
    ctl = os.path.join(cwd, "build/release/client/cuckooctl")
    while time.monotonic() < deadline:
        ok = subprocess.run([ctl, "health", "--quiet", "--timeout=5s"], env=env, cwd=cwd,
                            capture_output=True).returncode == 0
        ok = ok and subprocess.run(["redis-cli", "-p", "6379", "PING"], env=env, cwd=cwd,
                                   capture_output=True, text=True).stdout.strip() == "PONG"
        if ok:
            return True
        time.sleep(0.1)
    return False


def run_file(src, build, md):
    """Runs one Markdown file's blocks against a fresh server. Returns failures."""
    failures, ran, skipped = [], 0, []
    with tempfile.TemporaryDirectory(prefix="readme_doctest.") as work:
        os.makedirs(os.path.join(work, "build"))
        os.symlink(build, os.path.join(work, "build", "release"))
        env = dict(os.environ)
        env["PATH"] = os.path.join(work, "build/release/client") + ":" + env.get("PATH", "")
        env["PYTHONPATH"] = os.path.join(work, "build/release/python")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # Sanitizer builds: c-ares' own 10-byte leak on resolving "localhost"
        # in this namespace is suppressed (lsan_cares.supp says why).
        env["LSAN_OPTIONS"] = "suppressions=" + os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "lsan_cares.supp")
        for var in ("CUCKOO_TARGET", "CUCKOO_TOKEN", "CUCKOO_TOKEN_FILE", "CUCKOO_TLS", "CUCKOO_CA",
                    "CUCKOO_CERT", "CUCKOO_KEY", "CUCKOO_TLS_SERVER_NAME"):
            env.pop(var, None)
        server_env = {k: v for k, v in env.items() if not k.startswith("CUCKOOD_")}
        server_env["CUCKOOD_REDIS_LISTEN"] = "127.0.0.1:6379"  # what scripts/run.sh sets
        log = open(os.path.join(work, "cuckood.log"), "w+")
        server = subprocess.Popen([os.path.join(build, "server/cuckood")], cwd=work,
                                  env=server_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            if not wait_ready(env, work, time.monotonic() + 90):
                log.seek(0)
                return [f"{md}: cuckood did not become ready in 90 s:\n{log.read()}"]
            for line, lang, text, skip in blocks(os.path.join(src, md)):
                if lang not in ("sh", "python"):
                    continue
                where = f"{md}:{line} ({lang})"
                if skip is not None:
                    skipped.append(f"{where}: {skip}")
                    continue
                ran += 1
                block_env = env
                if lang == "sh":
                    argv = ["bash", "-e", "-c", sh_script(text)]
                elif os.path.exists(os.path.join(work, VENV_PYTHON)):
                    argv = [os.path.join(work, VENV_PYTHON), "-c", text]
                    block_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
                else:
                    argv = [PYTHON, "-c", text]
                try:
                    r = subprocess.run(argv, cwd=work, env=block_env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
                    code, output = r.returncode, r.stdout
                except subprocess.TimeoutExpired as e:
                    code, output = f"timeout after {BLOCK_TIMEOUT} s", str(e.stdout or "")
                problems = []
                if code != 0:
                    problems.append(f"exit {code}")
                pos, output_words = 0, " ".join(output.split())
                for want in expectations(text):
                    at = output_words.find(want, pos)
                    if at < 0:
                        problems.append(f"output lacks {want!r} (in order)")
                    else:
                        pos = at + len(want)
                status = "ok" if not problems else "FAIL " + "; ".join(problems)
                print(f"{status}: {where}", flush=True)
                if problems:
                    failures.append(f"{where}: {'; '.join(problems)}\n--- block\n{text}"
                                    f"--- output\n{output}")
        finally:
            server.terminate()
            try:
                code = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                code = f"{server.wait()} (killed: no exit 30 s after SIGTERM)"
            if code != 0:
                log.seek(0)
                failures.append(f"{md}: cuckood exited {code} after SIGTERM:\n{log.read()}")
            log.close()
    for s in skipped:
        print(f"skipped: {s}")
    print(f"{md}: {ran} blocks run, {len(skipped)} skipped, {len(failures)} failed", flush=True)
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source-dir", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("files", nargs="*", default=FILES, help="Markdown files, relative to the source dir")
    a = p.parse_args()
    src, build = os.path.abspath(a.source_dir), os.path.abspath(a.build_dir)
    for exe in ("server/cuckood", "client/cuckooctl", "python/cuckoo_client/__init__.py"):
        if not os.path.exists(os.path.join(build, exe)):
            print(f"readme_doctest: {build}/{exe} is missing: build cuckood, cuckooctl and "
                  "cuckoo_python first", file=sys.stderr)
            return 2
    # README.md installs the Python client's wheel (one: the build removes older ones).
    if not glob.glob(os.path.join(build, "python/dist/cuckoo_client-*.whl")):
        print(f"readme_doctest: no {build}/python/dist/cuckoo_client-*.whl: build the target "
              "cuckoo_python_wheel first", file=sys.stderr)
        return 2
    if not a.in_netns:
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            print("readme_doctest: needs root and unshare(1) to run the README on its own ports "
                  "(50051, 9090, 6379) in a private network namespace", file=sys.stderr)
            return 2
        return subprocess.run(["unshare", "--net", "--", sys.executable] + sys.argv + ["--in-netns"]).returncode
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    failures = []
    for md in a.files:
        failures += run_file(src, build, md)
    for f in failures:
        print("\n" + f, file=sys.stderr)
    print(f"{len(failures)} failed" if failures else "every block passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
