"""Builds the wheel cuckoo_client-<version>-py3-none-any.whl from the generated package.

Run by the CMake target cuckoo_python_wheel (client/python/CMakeLists.txt),
with the Python the build uses (CUCKOO_PYTHON, Debian's /usr/bin/python3):

    build_wheel.py --package DIR/cuckoo_client --pyproject FILE --readme FILE
                   --license FILE --stage DIR --out-dir DIR

It copies the generated package, pyproject.toml (configured from
client/python/pyproject.toml.in), the README and the LICENSE into a fresh
--stage directory, and builds the wheel there with
`pip wheel --no-build-isolation --no-deps --no-index`: setuptools and wheel
from the system (Debian's python3-pip, python3-setuptools, python3-wheel),
nothing downloaded. Older cuckoo_client wheels in --out-dir are removed
first, so it holds the current one only. The version is the package's
_version.py, which the build writes from CMakeLists.txt's project version.
Exits 1 with a message naming what is missing or what failed.
"""

import argparse
import ast
import glob
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys

# module -> the Debian package that has it.
TOOLS = {"pip": "python3-pip", "setuptools": "python3-setuptools", "wheel": "python3-wheel"}
MIN_SETUPTOOLS = (61,)  # the first to read pyproject.toml's [project] table


def fail(message):
    sys.exit(f"build_wheel: {message}")


def check_tools():
    missing = [deb for mod, deb in TOOLS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        fail(f"{sys.executable} cannot build the cuckoo-client wheel: it lacks "
             f"{', '.join(m for m, d in TOOLS.items() if d in missing)}. On Debian: "
             f"apt-get install {' '.join(missing)} (scripts/install-deps.sh installs them), "
             "or configure with -DCUCKOO_PYTHON=/path/to/a/python3 that has them")
    # Its metadata, not an import: setuptools must not be imported beside pip.
    found = importlib.metadata.version("setuptools")
    version = tuple(int(p) for p in found.split(".")[:2] if p.isdigit())
    if version < MIN_SETUPTOOLS:
        fail(f"setuptools {found} of {sys.executable} is too old to build from "
             f"pyproject.toml (needs >= {'.'.join(map(str, MIN_SETUPTOOLS))}; Debian bookworm has 66)")


def package_version(package):
    """__version__ from the package's _version.py, read without importing it."""
    path = os.path.join(package, "_version.py")
    try:
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
    except OSError as e:
        fail(f"cannot read {path} ({e.strerror}): build the CMake target cuckoo_python first")
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "__version__"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    fail(f"{path} has no __version__ = \"...\"")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    for name in ("package", "pyproject", "readme", "license", "stage", "out-dir"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    check_tools()
    version = package_version(args.package)

    shutil.rmtree(args.stage, ignore_errors=True)
    os.makedirs(args.stage)
    shutil.copytree(args.package, os.path.join(args.stage, "cuckoo_client"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for src, name in ((args.pyproject, "pyproject.toml"), (args.readme, "README.md"),
                      (args.license, "LICENSE")):
        shutil.copyfile(src, os.path.join(args.stage, name))

    os.makedirs(args.out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(args.out_dir, "cuckoo_client-*.whl")):
        os.remove(old)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
           "--no-cache-dir", "--quiet", "--wheel-dir", args.out_dir, args.stage]
    result = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
    if result.returncode != 0:
        fail(f"{' '.join(cmd)} exited {result.returncode}:\n{result.stdout}")

    wheel = os.path.join(args.out_dir, f"cuckoo_client-{version}-py3-none-any.whl")
    built = glob.glob(os.path.join(args.out_dir, "cuckoo_client-*.whl"))
    if built != [wheel]:
        fail(f"expected {wheel}, pip wrote {built or 'nothing'}:\n{result.stdout}")
    print(f"built {wheel}")


if __name__ == "__main__":
    main()
