"""Checks the cuckoo-client wheel as pip installed it into a virtual environment.

Run by CTest (python_wheel_check, tests/e2e/CMakeLists.txt) with the venv's
python and no PYTHONPATH, after the build installed the wheel of the target
cuckoo_python_wheel into ${CMAKE_BINARY_DIR}/python-venv:

    python-venv/bin/python tests/e2e/python_wheel_check.py --wheel W.whl \\
        --venv python-venv --version PROJECT_VERSION --grpc-version GRPC_VERSION \\
        --readme client/python/README.md

--version and --grpc-version are CMake's PROJECT_VERSION and gRPC_VERSION.
Prints "ok <check>" or "FAIL <check>" and a traceback per check, then "<n>
checks passed" (exit 0) or "<k> of <n> checks FAILED" (exit 1).
"""

import argparse
import importlib.metadata
import os
import re
import sys
import sysconfig
import zipfile

from check_runner import run_checks  # tests/e2e/check_runner.py, beside this file

# What the wheel must hold, inside cuckoo_client/: the wrapper, the PEP 561
# marker, the version, and every generated module with its type stub.
PACKAGE_FILES = [
    "__init__.py", "client.py", "py.typed", "_version.py",
    "cuckoo/__init__.py", "cuckoo/v1/__init__.py",
    "cuckoo/v1/filter_service_pb2.py", "cuckoo/v1/filter_service_pb2.pyi",
    "cuckoo/v1/filter_service_pb2_grpc.py",
    "grpc/__init__.py", "grpc/health/__init__.py", "grpc/health/v1/__init__.py",
    "grpc/health/v1/health_pb2.py", "grpc/health/v1/health_pb2.pyi",
    "grpc/health/v1/health_pb2_grpc.py",
]


def version_tuple(text):
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


class Checks:
    def __init__(self, args):
        self.args = args
        self.site = sysconfig.get_paths()["purelib"]
        self.dist = importlib.metadata.distribution("cuckoo-client")

    def check_interpreter(self):
        """This is the venv's python, without PYTHONPATH, over the system's packages."""
        assert "PYTHONPATH" not in os.environ, os.environ["PYTHONPATH"]
        venv = os.path.realpath(self.args.venv)
        assert os.path.realpath(sys.prefix) == venv, (sys.prefix, venv)
        assert sys.prefix != sys.base_prefix, "not a virtual environment"
        assert os.path.realpath(self.site).startswith(venv + os.sep), self.site
        cfg = open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8").read()
        assert re.search(r"^include-system-site-packages\s*=\s*true\s*$", cfg, re.M), cfg

    def check_wheel_file(self):
        """The wheel's name carries the project's version and holds every module and py.typed."""
        name = os.path.basename(self.args.wheel)
        expected = f"cuckoo_client-{self.args.version}-py3-none-any.whl"
        assert name == expected, (name, expected)
        names = set(zipfile.ZipFile(self.args.wheel).namelist())
        missing = [f for f in PACKAGE_FILES if f"cuckoo_client/{f}" not in names]
        assert not missing, f"not in the wheel: {missing}"
        info = f"cuckoo_client-{self.args.version}.dist-info"
        for f in ("METADATA", "RECORD", "WHEEL", "LICENSE"):
            assert f"{info}/{f}" in names, f"{info}/{f} not in {sorted(names)}"
        # One top-level package: nothing to shadow grpcio's `grpc`.
        tops = {n.split("/")[0] for n in names}
        assert tops == {"cuckoo_client", info}, tops

    def check_installed_files(self):
        """pip installed every file of the package into the venv's site-packages."""
        recorded = {str(f) for f in self.dist.files}
        for f in PACKAGE_FILES:
            path = f"cuckoo_client/{f}"
            assert path in recorded, f"{path} not in the installed RECORD"
            assert os.path.isfile(os.path.join(self.site, path)), f"{path} not in {self.site}"

    def check_metadata(self):
        """Name, version (the project's), licence, Requires-Python, requirements, readme."""
        meta = self.dist.metadata
        assert meta["Name"] == "cuckoo-client", meta["Name"]
        assert self.dist.version == self.args.version, (self.dist.version, self.args.version)
        assert meta["License"] == "Apache-2.0", meta["License"]
        assert "License :: OSI Approved :: Apache Software License" in meta.get_all("Classifier")
        assert "Typing :: Typed" in meta.get_all("Classifier")
        assert meta["Requires-Python"] == ">=3.8", meta["Requires-Python"]
        assert sys.version_info >= (3, 8)
        requires = sorted(r.replace(" ", "").replace("(", "").replace(")", "")
                          for r in self.dist.requires)
        assert requires == [f"grpcio>={self.args.grpc_version}", "protobuf>=3.20"], requires
        assert meta["Description-Content-Type"] == "text/markdown"
        readme = open(self.args.readme, encoding="utf-8").read()
        assert meta.get_payload().strip() == readme.strip(), "the description is not the README"

    def check_requirements_met(self):
        """Debian's grpcio and protobuf, under the venv, meet the floors."""
        for name, floor in (("grpcio", self.args.grpc_version), ("protobuf", "3.20")):
            found = importlib.metadata.version(name)
            assert version_tuple(found) >= version_tuple(floor), (name, found, floor)

    def check_import(self):
        """import cuckoo_client: the installed one, the project's version, Debian's grpc under it."""
        import google.protobuf  # pylint: disable=import-outside-toplevel
        import grpc  # pylint: disable=import-outside-toplevel

        import cuckoo_client  # pylint: disable=import-outside-toplevel
        from cuckoo_client.cuckoo.v1 import filter_service_pb2_grpc  # noqa: F401
        from cuckoo_client.grpc.health.v1 import health_pb2_grpc  # noqa: F401
        installed = os.path.join(self.site, "cuckoo_client", "__init__.py")
        assert os.path.realpath(cuckoo_client.__file__) == os.path.realpath(installed), \
            cuckoo_client.__file__
        assert cuckoo_client.__version__ == self.args.version, cuckoo_client.__version__
        for module in (grpc, google.protobuf):
            assert not os.path.realpath(module.__file__).startswith(
                os.path.realpath(self.args.venv) + os.sep), module.__file__
        assert hasattr(grpc, "insecure_channel"), grpc.__file__
        assert callable(cuckoo_client.Client)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    for name in ("wheel", "venv", "version", "grpc-version", "readme"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    checks = Checks(args)
    names = [n for n in Checks.__dict__ if n.startswith("check_")]
    return run_checks(checks, names)


if __name__ == "__main__":
    sys.exit(main())
