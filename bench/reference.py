"""Locate, or build, the reference llama-server for a llama-cpp-python version.

The llama-cpp-python sdist vendors the full llama.cpp tree (server included) at
vendor/llama.cpp. Building llama-server from the same version that mlxcel pins
gives a reference that runs exactly the same llama.cpp. Everything (sdist,
extracted source, build tree) lives under ~/.cache/mlxcel/reference/VERSION/;
nothing is written into the repository.

    python bench/reference.py [--version 0.3.36] [--jobs 2] [--source-only]

prints the path of the llama-server binary (or of the llama.cpp source tree).
"""
from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

DEFAULT_VERSION = "0.3.36"
CACHE_ROOT = Path(os.environ.get("MLXCEL_REFERENCE_CACHE",
                                 Path.home() / ".cache" / "mlxcel" / "reference"))


def version_dir(version: str = DEFAULT_VERSION) -> Path:
    return CACHE_ROOT / version


def binary_path(version: str = DEFAULT_VERSION) -> Path:
    # The build links libllama/libggml as shared libraries with an RPATH into the
    # build tree, so the binary stays inside its build directory.
    return version_dir(version) / "build" / "bin" / "llama-server"


def _run(cmd: list[str], log) -> None:
    print("+ " + " ".join(cmd), file=log, flush=True)
    subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)


def ensure_source(version: str = DEFAULT_VERSION, log=sys.stderr) -> Path:
    """Download and extract the sdist; return the vendored llama.cpp tree."""
    vdir = version_dir(version)
    tree = vdir / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (tree / "CMakeLists.txt").is_file():
        return tree
    sdist_dir = vdir / "sdist"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    sdist = sdist_dir / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={version}", "-d", str(sdist_dir)], log)
    staging = vdir / "src.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(staging, filter="data")
    shutil.rmtree(vdir / "src", ignore_errors=True)
    staging.rename(vdir / "src")
    if not (tree / "CMakeLists.txt").is_file():
        raise RuntimeError(f"no vendored llama.cpp tree in {sdist}")
    return tree


def _has_cmake_option(tree: Path, name: str) -> bool:
    return f"option({name} " in (tree / "CMakeLists.txt").read_text(errors="replace")


def configure_args(tree: Path, build: Path) -> list[str]:
    args = ["cmake", "-S", str(tree), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_USE_PREBUILT_UI=OFF",   # otherwise it tries to download the web UI
            "-DLLAMA_BUILD_TESTS=OFF"]
    if _has_cmake_option(tree, "LLAMA_CURL"):
        args.append("-DLLAMA_CURL=OFF")
    return args


def ensure_llama_server(version: str = DEFAULT_VERSION, jobs: int = 2,
                        log=sys.stderr) -> Path:
    """Return the path of llama-server for `version`, building it if missing."""
    binary = binary_path(version)
    if binary.is_file():
        return binary
    vdir = version_dir(version)
    vdir.mkdir(parents=True, exist_ok=True)
    with open(vdir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)     # one build per version at a time
        if binary.is_file():
            return binary
        tree = ensure_source(version, log)
        build = vdir / "build"
        _run(configure_args(tree, build), log)
        _run(["cmake", "--build", str(build), f"-j{jobs}", "--target", "llama-server"], log)
    if not binary.is_file():
        raise RuntimeError(f"build finished but {binary} is missing")
    return binary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=DEFAULT_VERSION, help="llama-cpp-python version")
    ap.add_argument("--jobs", type=int, default=2, help="parallel compile jobs")
    ap.add_argument("--source-only", action="store_true",
                    help="only fetch the source; print the llama.cpp tree path")
    args = ap.parse_args(argv)
    if args.source_only:
        print(ensure_source(args.version))
    else:
        print(ensure_llama_server(args.version, args.jobs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
