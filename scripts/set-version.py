#!/usr/bin/python3
"""The project's version has one source: CMakeLists.txt's
`project(cuckood VERSION X.Y.Z ...)`. The binaries get it from CMake
(cmake/cuckoo_version.h.in). The copies that cannot be generated are
rewritten by this script and checked equal to it:

  scripts/set-version.py 0.2.0      writes 0.2.0 into CMakeLists.txt and
                                    every copy below, then checks
  scripts/set-version.py --check [ROOT]
                                    exit 1, naming each FILE:LINE whose
                                    version is not CMakeLists.txt's; 0 if none
  scripts/set-version.py --check-release [ROOT]
                                    --check, and CHANGELOG.md has the
                                    section `## [X.Y.Z] - YYYY-MM-DD` of
                                    this version (docs/RELEASING.md, step 2)
  scripts/set-version.py --selftest plants mismatches in a throwaway copy of
                                    the repository: --check must name each,
                                    and setting the version must fix them

The copies, in every tracked text file but CHANGELOG.md (its history names
old versions on purpose) and this script (its self-test's examples):
  - an image reference `cuckood:X.Y.Z` (the compose files, the Dockerfile's
    and the READMEs' `docker build -t` / `docker run` / `kustomize edit set
    image` lines), and the Node package's tarball `cuckood-client-X.Y.Z.tgz`;
  - kustomize's image entry `- name: cuckood` ... `newTag: X.Y.Z`; every
    folder with a manifest that says `image: cuckood` (no tag) must have one
    in its kustomization.yaml, or kustomize would render `cuckood:latest`;
  - the Dockerfile's `ARG VERSION=X.Y.Z` (the default of the image's
    org.opencontainers.image.version label for a plain `docker build .`);
  - client/node's package.json and package-lock.json: the version of
    "@cuckood/client".
--check also checks CHANGELOG.md's form (Keep a Changelog 1.1.0): its
first section is `## [Unreleased]`, every other one `## [X.Y.Z] - YYYY-MM-DD`,
newest first.
Prose that names a version as a fact ("these are cuckood 0.1.0's") and format
examples (a snapshot's writer string) are not copies and are left alone.
CI runs --check and --selftest (tests/repo/CMakeLists.txt). docs/RELEASING.md
has the release steps.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

SEMVER = r"\d+\.\d+\.\d+"
PROJECT_RE = re.compile(r"^(project\(cuckood VERSION )(" + SEMVER + r")\b", re.M)
KUSTOMIZE_RE = re.compile(r"(- name: cuckood\n(?:[ \t]+newName: \S+\n)?[ \t]+newTag: )(\S+)")
# (pattern, files it applies to: None = every tracked text file). Group 1 is
# what precedes the version, group 2 the version.
RULES = [
    (re.compile(r"(\bcuckood:)(" + SEMVER + r")\b"), None),
    (re.compile(r"(\bcuckood-client-)(" + SEMVER + r")(?=\.tgz)"), None),
    (KUSTOMIZE_RE, None),
    (re.compile(r"^(ARG VERSION=)(\S*)", re.M), {"Dockerfile"}),
    (re.compile(r'("name": "@cuckood/client",\n[ \t]*"version": ")([^"]*)'),
     {"client/node/package.json", "client/node/package-lock.json"}),
]
# Copies that must exist (file: how many): a reformatted file that the rules
# no longer match fails the check instead of escaping it.
REQUIRED = {
    "Dockerfile": 2,  # the header's `docker build -t cuckood:X.Y.Z`, ARG VERSION
    "client/node/package.json": 1,
    "client/node/package-lock.json": 2,  # the root and packages[""]
    "deploy/compose.yaml": 1,
    "deploy/compose.cluster.yaml": 1,
    "deploy/k8s/kustomization.yaml": 2,  # the header's `kustomize edit set image`, newTag
    "deploy/k8s/cluster/kustomization.yaml": 2,
    "deploy/examples/k8s-backup/kustomization.yaml": 1,
    "deploy/examples/k8s-sidecar/kustomization.yaml": 1,
}
UNTAGGED_IMAGE_RE = re.compile(r"^[ \t]*(?:-[ \t]+)?image:[ \t]*cuckood[ \t]*$", re.M)
# CHANGELOG.md names old versions on purpose; this script holds example
# versions of its self-test.
NOT_COPIES = {"CHANGELOG.md", "scripts/set-version.py"}


def tracked_files(root):
    """The repository's tracked files (an exported tree: every file but build trees)."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = []
        for d, dirs, names in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if x not in (".git", "node_modules")
                       and not (rel == "." and x.startswith("build"))]
            files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return sorted(files)


def read_text(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def project_version(root):
    text = read_text(os.path.join(root, "CMakeLists.txt")) or ""
    m = PROJECT_RE.search(text)
    if not m:
        sys.exit("set-version: no `project(cuckood VERSION X.Y.Z` line in "
                 + os.path.join(root, "CMakeLists.txt"))
    return m.group(2)


def copies(text, name):
    """Yields (line number, start, end, version) of each copy in `text`."""
    for pattern, only in RULES:
        if only is not None and name not in only:
            continue
        for m in pattern.finditer(text):
            yield text.count("\n", 0, m.start(2)) + 1, m.start(2), m.end(2), m.group(2)


CHANGELOG_HEADING_RE = re.compile(r"^## (.*)$", re.M)
RELEASE_HEADING_RE = re.compile(r"\[(" + SEMVER + r")\] - (\d{4}-\d{2}-\d{2})")


def changelog_problems(root, version, release):
    """CHANGELOG.md's sections against Keep a Changelog's form (and, for a
    release, this version's dated section)."""
    text = read_text(os.path.join(root, "CHANGELOG.md"))
    if text is None:
        return ["CHANGELOG.md: missing (docs/RELEASING.md)"]
    problems, released = [], []
    for i, m in enumerate(CHANGELOG_HEADING_RE.finditer(text)):
        line = text.count("\n", 0, m.start()) + 1
        heading = m.group(1).strip()
        if i == 0:
            if heading != "[Unreleased]":
                problems.append(f"CHANGELOG.md:{line}: the first section is '{heading}', "
                                "not '[Unreleased]'")
            continue
        r = RELEASE_HEADING_RE.fullmatch(heading)
        if not r:
            problems.append(f"CHANGELOG.md:{line}: '{heading}' is not '[X.Y.Z] - YYYY-MM-DD'")
            continue
        key = tuple(int(x) for x in r.group(1).split("."))
        if released and key >= released[-1][0]:
            problems.append(f"CHANGELOG.md:{line}: {r.group(1)} is below a section of a "
                            "lower version (newest first)")
        released.append((key, r.group(1)))
    if release and version not in [v for _, v in released]:
        problems.append(f"CHANGELOG.md: no section '## [{version}] - YYYY-MM-DD' for "
                        f"CMakeLists.txt's {version} (docs/RELEASING.md, step 2)")
    return problems


def check(root, release=False):
    version = project_version(root)
    problems, found = changelog_problems(root, version, release), {}
    files = tracked_files(root)
    for name in files:
        text = None if name in NOT_COPIES else read_text(os.path.join(root, name))
        if text is None:
            continue
        lines = text.split("\n")
        for line, _, _, got in copies(text, name):
            found[name] = found.get(name, 0) + 1
            if got != version:
                problems.append(f"{name}:{line}: {got!r}, not CMakeLists.txt's {version}: "
                                f"{lines[line - 1].strip()}")
        if name.endswith((".yaml", ".yml")) and UNTAGGED_IMAGE_RE.search(text):
            kust = os.path.join(os.path.dirname(name), "kustomization.yaml")
            ktext = read_text(os.path.join(root, kust)) or ""
            if not KUSTOMIZE_RE.search(ktext):
                line = text.count("\n", 0, UNTAGGED_IMAGE_RE.search(text).start()) + 1
                problems.append(f"{name}:{line}: `image: cuckood` without a tag, and {kust} "
                                f"has no `- name: cuckood` entry with `newTag: {version}`")
    for name, want in REQUIRED.items():
        if name in files and found.get(name, 0) < want:
            problems.append(f"{name}: {found.get(name, 0)} version copies found, expected "
                            f"{want} (reformatted? update scripts/set-version.py's rules)")
        elif name not in files:
            problems.append(f"{name}: missing (scripts/set-version.py expects it)")
    for p in problems:
        print(p)
    if problems:
        print(f"set-version: {len(problems)} problem(s) above (the project's version is "
              f"CMakeLists.txt's {version}; `scripts/set-version.py {version}` rewrites "
              "the copies)", file=sys.stderr)
        return 1
    print(f"set-version: {sum(found.values())} copies in {len(found)} files, "
          f"all CMakeLists.txt's {version}")
    return 0


def set_version(root, new):
    if not re.fullmatch(SEMVER, new):
        sys.exit(f"set-version: {new!r} is not MAJOR.MINOR.PATCH (CMake's project() "
                 "takes numbers only; see docs/RELEASING.md)")
    path = os.path.join(root, "CMakeLists.txt")
    text = read_text(path)
    new_text = PROJECT_RE.sub(lambda m: m.group(1) + new, text, count=1)
    changed = []
    if new_text != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new_text)
        changed.append("CMakeLists.txt")
    for name in tracked_files(root):
        path = os.path.join(root, name)
        text = None if name in NOT_COPIES else read_text(path)
        if text is None:
            continue
        spans = sorted({(s, e) for _, s, e, got in copies(text, name) if got != new})
        if not spans:
            continue
        for s, e in reversed(spans):
            text = text[:s] + new + text[e:]
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        changed.append(f"{name} ({len(spans)})")
    print(f"set-version: {new} written to " + (", ".join(changed) or "nothing (already)"))
    return check(root)


def selftest():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    with tempfile.TemporaryDirectory() as t:
        copy = os.path.join(t, "repo")
        os.makedirs(copy)
        names = tracked_files(root)
        for name in names:
            src = os.path.join(root, name)
            if os.path.isfile(src):
                os.makedirs(os.path.join(copy, os.path.dirname(name)), exist_ok=True)
                shutil.copy2(src, os.path.join(copy, name))
        version = project_version(copy)

        def run(*args):
            return subprocess.run([sys.executable, os.path.join(here, "set-version.py"), *args],
                                  capture_output=True, text=True)

        def edit(name, old, new):
            p = os.path.join(copy, name)
            text = read_text(p)
            assert old in text, f"self-test: {old!r} not in {name}"
            with open(p, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new, 1))

        r = run("--check", copy)
        if r.returncode != 0:
            sys.exit(f"self-test: the copy fails the check before any change:\n{r.stdout}{r.stderr}")
        edit("deploy/compose.yaml", f"cuckood:{version}", "cuckood:9.9.9")
        edit("client/node/package-lock.json", f'"version": "{version}"', '"version": "9.9.8"')
        edit("Dockerfile", f"ARG VERSION={version}", "ARG VERSION=")
        with open(os.path.join(copy, "deploy", "extra.yaml"), "w") as f:
            f.write("spec:\n  containers:\n    - image: cuckood\n")
        r = run("--check", copy)
        want = ["deploy/compose.yaml:", "client/node/package-lock.json:3:", "Dockerfile:",
                "deploy/extra.yaml:3:"]
        if r.returncode != 1 or not all(w in r.stdout for w in want):
            sys.exit(f"self-test: --check should exit 1 naming {want}, got exit "
                     f"{r.returncode}:\n{r.stdout}{r.stderr}")
        os.remove(os.path.join(copy, "deploy", "extra.yaml"))
        r = run("7.8.9", copy)
        cmake = read_text(os.path.join(copy, "CMakeLists.txt"))
        if r.returncode != 0 or "project(cuckood VERSION 7.8.9 " not in cmake:
            sys.exit(f"self-test: setting 7.8.9 did not fix the copy:\n{r.stdout}{r.stderr}")
        for name, needle in [("deploy/compose.yaml", "cuckood:7.8.9"),
                             ("deploy/k8s/kustomization.yaml", "newTag: 7.8.9"),
                             ("client/node/package.json", '"version": "7.8.9"'),
                             ("Dockerfile", "ARG VERSION=7.8.9")]:
            if needle not in read_text(os.path.join(copy, name)):
                sys.exit(f"self-test: {name} lacks {needle!r} after setting 7.8.9")
        if run("7.8", copy).returncode == 0:
            sys.exit("self-test: a version without a patch number was accepted")
        r = run("--check-release", copy)
        if r.returncode != 1 or "no section '## [7.8.9] - YYYY-MM-DD'" not in r.stdout:
            sys.exit(f"self-test: --check-release passed without a 7.8.9 section:\n{r.stdout}")
        with open(os.path.join(copy, "CHANGELOG.md"), "a", encoding="utf-8") as f:
            f.write("\n## [7.8.9] - 2030-01-02\n\n## [7.9.0] - 2030-01-01\n\n## 7.0.0\n")
        r = run("--check-release", copy)
        want = ["is below a section of a lower version", "'7.0.0' is not '[X.Y.Z] - YYYY-MM-DD'"]
        if r.returncode != 1 or not all(w in r.stdout for w in want) or "no section" in r.stdout:
            sys.exit(f"self-test: --check-release should name {want} only, got:\n{r.stdout}")
    print("set-version: self-test passed")
    return 0


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if argv[:1] == ["--selftest"] and len(argv) == 1:
        return selftest()
    if argv[:1] == ["--check"] and len(argv) <= 2:
        return check(argv[1] if len(argv) == 2 else root)
    if argv[:1] == ["--check-release"] and len(argv) <= 2:
        return check(argv[1] if len(argv) == 2 else root, release=True)
    if len(argv) in (1, 2) and not argv[0].startswith("-"):
        return set_version(argv[1] if len(argv) == 2 else root, argv[0])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
