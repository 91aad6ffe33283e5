"""Build the dependency layer and stage the function code, without Docker.

The layer holds third-party packages compiled for Lambda (Python 3.13, arm64, glibc 2.28 wheels
or older), fetched as binary wheels from PyPI by ``pip --platform``; psycopg is pinned to the
version installed where synth runs, the one the tests ran. The code asset holds ``functions/``
and the ``reminders`` package side by side, so both import from ``/var/task``.

Every package comes at the version ``requirements/lock.txt`` pins (tzdata included), the same
the venv installs. ``python -m infra.layer`` (``make layer``) builds the layer; synth reuses
``build/layer`` while it is current: the packages resolved into it (their ``.dist-info``) are
exactly the pinned versions, and its stamp matches the platform and requirements below.

Both carry byte code compiled by a CPython of the runtime's version (3.13) found on this
machine, as unchecked-hash ``.pyc`` files: Lambda's file system is read-only, so byte code it
cannot find beside the source is compiled again on every cold start, and unchecked-hash files
are used without comparing them to the source's time stamps (which a zip does not keep). With
no such interpreter here, both ship source only and the build says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from infra.lock import LOCK_FILE, canonical, read_lock

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = REPO_ROOT / "build"
LAYER_DIR = BUILD_DIR / "layer"
CODE_DIR = BUILD_DIR / "lambda-code"

PYTHON_VERSION = "3.13"
# Lambda's python3.13 runtime is Amazon Linux 2023 (glibc 2.34). psycopg-binary 3.3 publishes
# aarch64 wheels only for manylinux_2_28, so "manylinux2014" alone silently resolved psycopg 3.2
# instead. pip takes an explicit --platform literally (no older manylinux tags implied), and
# cffi (under cryptography) publishes aarch64 wheels only for manylinux_2_17, so the older tags
# Lambda also runs are named as well, after the preferred one.
PLATFORM = "manylinux_2_28_aarch64"
OLDER_PLATFORMS: tuple[str, ...] = ("manylinux_2_17_aarch64", "manylinux2014_aarch64")
# The wheel tags the layer is built for, preferred first: Lambda's (the default everywhere
# below), or this machine's (machine_platforms) for the local twin, which runs the same pinned
# packages on the machine's own CPU.
LAMBDA_PLATFORMS: tuple[str, ...] = (PLATFORM, *OLDER_PLATFORMS)
# Used when psycopg is not installed where the layer is built (it is in the project's venv).
PSYCOPG_FALLBACK = "psycopg[binary]>=3.3,<3.4"


def psycopg_requirement() -> str:
    """The psycopg the tests run (the one installed here), pinned exactly for Lambda."""
    try:
        return f"psycopg[binary]=={metadata.version('psycopg')}"
    except metadata.PackageNotFoundError:
        return PSYCOPG_FALLBACK


def pinned(distribution: str, fallback: str) -> str:
    """``distribution`` at the version installed here (the one the tests ran), else
    ``fallback``."""
    try:
        return f"{distribution}=={metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return fallback


LAYER_REQUIREMENTS: tuple[str, ...] = (
    psycopg_requirement(),
    # AES-GCM for the webhook secrets (abi3 wheels, manylinux_2_28 aarch64), with its cffi.
    pinned("cryptography", "cryptography==50.0.2"),
    "tzdata",
    "python-dateutil",
    "aws-lambda-powertools[tracer]>=3.0,<4",
)
# The Lambda Python runtime ships boto3/botocore/s3transfer; a second botocore pulled in by
# aws-xray-sdk would shadow the runtime's and could mismatch its boto3, so it is removed.
RUNTIME_PROVIDED: tuple[str, ...] = ("boto3", "botocore", "s3transfer")
STAMP_NAME = ".requirements-stamp"
BYTECODE_STAMP = ".bytecode-stamp"
CODE_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".pytest_cache")
# Parts of the package no function imports: the operator's web console (its libraries are the
# `console` extra, never in the layer).
NOT_IN_LAMBDA = ("console",)


def machine_platforms(machine: str | None = None) -> tuple[str, ...]:
    """The manylinux tags of ``machine`` (``uname -m``; this one by default), in the order
    LAMBDA_PLATFORMS names Lambda's: glibc 2.28, then the older tags."""
    import platform

    arch = machine or platform.machine()
    if arch in ("aarch64", "arm64"):
        return LAMBDA_PLATFORMS
    if arch not in ("x86_64", "AMD64", "amd64"):
        raise SystemExit(f"no manylinux wheels are built for this machine ({arch}); "
                         "the layer can be built for aarch64 or x86_64 only")
    return ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")


def _stamp(platforms: tuple[str, ...] = LAMBDA_PLATFORMS,
           requirements: tuple[str, ...] = LAYER_REQUIREMENTS,
           removed: tuple[str, ...] = RUNTIME_PROVIDED) -> str:
    text = "\n".join((*platforms, PYTHON_VERSION, *requirements, *removed))
    return hashlib.sha256(text.encode()).hexdigest()


def resolved_versions(site_packages: Path) -> dict[str, str]:
    """``{canonical name: version}`` of the distributions installed in ``site_packages``, read
    from their ``.dist-info`` directories (what pip resolved, not what was asked for)."""
    found: dict[str, str] = {}
    for dist_info in site_packages.glob("*.dist-info"):
        name, _, version = dist_info.name.removesuffix(".dist-info").partition("-")
        found[canonical(name)] = version
    return found


def _requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0])


def staleness(resolved: dict[str, str], pinned: dict[str, str],
              requirements: tuple[str, ...] = LAYER_REQUIREMENTS) -> list[str]:
    """Why a layer holding ``resolved`` is not the pinned set (empty: it is): a requirement
    missing, a package at another version than its pin, a package the lock does not pin."""
    reasons = [f"{name} is not in the layer" for name in map(_requirement_name, requirements)
               if name not in resolved]
    for name, version in sorted(resolved.items()):
        if name not in pinned:
            reasons.append(f"{name} {version} is not pinned in {LOCK_FILE.name}")
        elif pinned[name] != version:
            reasons.append(f"{name} is {version}, pinned {pinned[name]}")
    return reasons


def layer_is_current(target: Path = LAYER_DIR, lock: Path = LOCK_FILE,
                     platforms: tuple[str, ...] = LAMBDA_PLATFORMS) -> bool:
    stamp = target / STAMP_NAME
    if not (stamp.is_file() and stamp.read_text().strip() == _stamp(platforms)):
        return False
    return not staleness(resolved_versions(target / "python"), read_lock(lock))


def pip_command(site_packages: Path, platforms: tuple[str, ...] = LAMBDA_PLATFORMS,
                requirements: tuple[str, ...] = LAYER_REQUIREMENTS,
                constraints: tuple[Path, ...] = (LOCK_FILE,)) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        *(arg for platform in platforms for arg in ("--platform", platform)),
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--target",
        str(site_packages),
        *(arg for constraint in constraints for arg in ("--constraint", str(constraint))),
        *requirements,
    ]


def _remove_runtime_provided(site_packages: Path) -> None:
    for name in RUNTIME_PROVIDED:
        for path in (site_packages / name, *site_packages.glob(f"{name}-*.dist-info")):
            if path.is_dir():
                shutil.rmtree(path)
    # Console scripts are of no use in a layer.
    shutil.rmtree(site_packages / "bin", ignore_errors=True)


_held = 0  # how deep this process is inside build_lock()


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold ``build/``'s lock: one process at a time builds the layer or stages the code
    (each rewrites its folder in place), whichever processes synthesize at once (the test
    suite's workers, ``make synth`` beside ``make test``). Re-entrant within a process."""
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with (BUILD_DIR / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_layer(target: Path = LAYER_DIR, *, force: bool = False,
                platforms: tuple[str, ...] = LAMBDA_PLATFORMS) -> Path:
    """Install the layer's packages, as wheels for ``platforms`` (Lambda's by default), into
    ``target/python`` and return ``target``."""
    if not force and layer_is_current(target, platforms=platforms):
        ensure_bytecode(target)
        return target
    if target.exists():
        shutil.rmtree(target)
    site_packages = target / "python"
    site_packages.mkdir(parents=True)
    subprocess.run(pip_command(site_packages, platforms), check=True)
    _remove_runtime_provided(site_packages)
    for cache in site_packages.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    reasons = staleness(resolved_versions(site_packages), read_lock())
    if reasons:  # the lock must cover the layer too: `make lock` resolves it with the rest
        raise SystemExit("the layer is not the pinned set: " + "; ".join(reasons))
    (target / STAMP_NAME).write_text(_stamp(platforms) + "\n")
    ensure_bytecode(target)
    return target


def bytecode_python() -> str | None:
    """A CPython of the Lambda runtime's version here: ``REMINDERS_BYTECODE_PYTHON``, else
    ``python3.13`` on the PATH, else one installed by pyenv or uv. None if there is none."""
    named = os.environ.get("REMINDERS_BYTECODE_PYTHON")
    candidates: list[str | None] = [named] if named else []
    candidates.append(shutil.which(f"python{PYTHON_VERSION}"))
    for root in (Path.home() / ".pyenv" / "versions",
                 Path.home() / ".local" / "share" / "uv" / "python"):
        candidates += [str(p) for p in sorted(root.glob(f"*{PYTHON_VERSION}*/bin/"
                                                        f"python{PYTHON_VERSION}"))]
    for candidate in candidates:
        if candidate and _python_version(candidate) == PYTHON_VERSION:
            return candidate
    if named:
        raise SystemExit(f"REMINDERS_BYTECODE_PYTHON={named} is not a CPython {PYTHON_VERSION}")
    return None


def _python_version(executable: str) -> str | None:
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print(sys.implementation.name, "
                               "'%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    name, _, version = done.stdout.strip().partition(" ")
    return version if done.returncode == 0 and name == "cpython" else None


def compile_bytecode(directory: Path, python: str) -> None:
    """Compile every ``.py`` under ``directory`` with ``python`` into unchecked-hash ``.pyc``
    files (used without looking at the source or its time stamp, which a zip does not keep).
    A file that does not compile fails the build."""
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0",
                    "--invalidation-mode", "unchecked-hash", str(directory)],
                   check=True, stdout=subprocess.DEVNULL)


def ensure_bytecode(target: Path, *, python: str | None = None) -> bool:
    """Compile ``target`` (the layer: its ``python`` directory) unless its byte code is there
    already. False, with a warning on stderr, when no CPython of the runtime's version is
    found: the layer then ships source, compiled on each cold start."""
    stamp = target / BYTECODE_STAMP
    if stamp.is_file():
        return True
    python = python or bytecode_python()
    if python is None:
        print(f"warning: no CPython {PYTHON_VERSION} found (set REMINDERS_BYTECODE_PYTHON); "
              f"{target} ships without byte code, so every Lambda cold start compiles it",
              file=sys.stderr)
        return False
    compile_bytecode(target / "python", python)
    stamp.write_text(f"{PYTHON_VERSION}\n")
    return True


def stage_code(target: Path = CODE_DIR, source: Path = REPO_ROOT, *,
               bytecode: bool = True) -> Path:
    """Copy ``functions/`` and ``shared/reminders`` into one fresh directory, with their byte
    code for the runtime's Python (when one is found here)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(source / "functions", target / "functions", ignore=CODE_IGNORE)
    package = source / "shared" / "reminders"

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = set(CODE_IGNORE(directory, names))
        if Path(directory) == package:
            skipped.update(n for n in names if n in NOT_IN_LAMBDA)
        return skipped

    shutil.copytree(package, target / "reminders", ignore=ignore)
    python = bytecode_python() if bytecode else None
    if python is not None:
        compile_bytecode(target, python)
    elif bytecode:
        print(f"warning: no CPython {PYTHON_VERSION} found (set REMINDERS_BYTECODE_PYTHON); "
              f"the code asset ships without byte code", file=sys.stderr)
    return target


def migrations_fingerprint(source: Path = REPO_ROOT) -> str:
    """A hash of the SQL the migrate function applies (the migrations, and the application
    role's grants in the migrate handler), so a change re-runs it on deploy."""
    digest = hashlib.sha256()
    sql_root = source / "shared" / "reminders" / "db"
    for path in sorted(sql_root.rglob("*.sql")):
        digest.update(path.relative_to(sql_root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    for path in (source / "functions" / "migrate" / "handler.py",
                 sql_root / "migrate.py"):
        if path.is_file():
            digest.update(path.relative_to(source).as_posix().encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def main() -> None:
    force = "--force" in sys.argv[1:]
    print(build_layer(force=force))


if __name__ == "__main__":
    main()
