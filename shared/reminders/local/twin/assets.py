"""The built assets a twin function runs from, for this machine.

- The **layer**: the packages of the layer that ships (``infra.layer``: the same requirement
  list, under the same lock), built as wheels for this machine's CPU into
  ``build/layer-<machine>`` beside the arm64 one and reused while current. It holds exactly
  the arm64 layer's distributions and versions; only the wheels' platform tags differ
  (:func:`layer_difference` says where they do not).
- The **code asset**: ``infra.layer.stage_code`` (what synth packages) staged into a folder of
  its own per content, ``build/twin-code/<hash>``, so a synth that stages the real one again
  never pulls files from under a running function.
- The **runtime** folder, standing for ``/var/runtime``: what Lambda's python3.13 runtime
  provides and the layer leaves out (boto3, botocore, s3transfer at the lock's pins) and the
  runtime interface client (awslambdaric, pinned in requirements/twin-runtime.txt), in
  ``build/runtime-<machine>``.
- The **interpreter**: a CPython 3.13 found as ``infra.layer.bytecode_python`` finds it.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reminders.errors import RemindersError

REPO_ROOT = Path(__file__).resolve().parents[4]
RUNTIME_PINS = REPO_ROOT / "requirements" / "twin-runtime.txt"


class AssetError(RemindersError):
    """An asset could not be built or found; the message says which and how to get it."""


@dataclass(frozen=True)
class FunctionAssets:
    """What a function instance runs: ``python`` on ``code`` (the task folder), ``layer``
    (whose ``python/`` stands for /opt/python) and ``runtime`` (/var/runtime)."""

    python: str
    code: Path
    layer: Path
    runtime: Path

    @property
    def python_path(self) -> list[str]:
        """sys.path after the task folder, in Lambda's order: the layer, then the runtime."""
        return [str(self.code), str(self.layer / "python"), str(self.runtime)]


def machine() -> str:
    return platform.machine()


def twin_layer_dir() -> Path:
    from infra.layer import BUILD_DIR

    return BUILD_DIR / f"layer-{machine()}"


def runtime_dir() -> Path:
    from infra.layer import BUILD_DIR

    return BUILD_DIR / f"runtime-{machine()}"


def runtime_python() -> str:
    """The CPython 3.13 the functions run on (Lambda's runtime): as infra.layer finds one."""
    from infra.layer import PYTHON_VERSION, bytecode_python

    found = bytecode_python()
    if found is None:
        raise AssetError(
            f"no CPython {PYTHON_VERSION} here (Lambda's runtime, which the twin's functions "
            f"run on): install one with `pyenv install {PYTHON_VERSION}` or "
            f"`uv python install {PYTHON_VERSION}`, or name one in REMINDERS_BYTECODE_PYTHON")
    return found


def build_twin_layer(*, force: bool = False) -> Path:
    """The layer's pinned packages as wheels for this machine, in build/layer-<machine>."""
    from infra.layer import build_layer, machine_platforms

    return build_layer(twin_layer_dir(), force=force, platforms=machine_platforms())


def layer_difference(twin: Path, shipped: Path) -> list[str]:
    """Where the two layers (folders holding ``python/``) differ in their distributions'
    name==version sets, read from their ``*.dist-info``; empty when they are the same."""
    from infra.layer import resolved_versions

    ours, theirs = resolved_versions(twin / "python"), resolved_versions(shipped / "python")
    return [f"{name}: {theirs.get(name, '(absent)')} in {shipped.name}, "
            f"{ours.get(name, '(absent)')} in {twin.name}"
            for name in sorted(ours.keys() | theirs.keys()) if ours.get(name) != theirs.get(name)]


def runtime_requirements() -> tuple[str, ...]:
    from infra.layer import RUNTIME_PROVIDED
    from infra.lock import read_lock

    return (*RUNTIME_PROVIDED, *(f"{n}=={v}" for n, v in read_lock(RUNTIME_PINS).items()))


def build_runtime(target: Path | None = None, *, force: bool = False,
                  python: str | None = None) -> Path:
    """The runtime folder (boto3, botocore, s3transfer, awslambdaric and what they need, at
    their pins, compiled for CPython 3.13), reused while current."""
    from infra.layer import (
        STAMP_NAME,
        _stamp,
        compile_bytecode,
        machine_platforms,
        pip_command,
        resolved_versions,
        staleness,
    )
    from infra.lock import plain_lock_file, read_lock

    target = target or runtime_dir()
    platforms = machine_platforms()
    requirements = runtime_requirements()
    pins = {**read_lock(), **read_lock(RUNTIME_PINS)}
    stamp = _stamp(platforms, requirements, ())
    stamp_file = target / STAMP_NAME
    if not force and stamp_file.is_file() and stamp_file.read_text().strip() == stamp and \
            not staleness(resolved_versions(target), pins, requirements):
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        # The lock's versions without its hashes: the runtime's own pins have none, and pip
        # checks hashes for every requirement or none.
        subprocess.run(pip_command(target, platforms, requirements,
                                   (plain_lock_file(target.parent), RUNTIME_PINS)), check=True)
    except subprocess.CalledProcessError as exc:
        raise AssetError(f"pip could not install the runtime folder {target} "
                         f"(exit {exc.returncode})") from None
    shutil.rmtree(target / "bin", ignore_errors=True)
    reasons = staleness(resolved_versions(target), pins, requirements)
    if reasons:
        raise AssetError("the runtime folder is not the pinned set: " + "; ".join(reasons))
    compile_bytecode(target, python or runtime_python())
    stamp_file.write_text(stamp + "\n")
    return target


def code_fingerprint(source: Path = REPO_ROOT) -> str:
    """A hash of what stage_code copies (functions/ and the package, less the console)."""
    from infra.layer import NOT_IN_LAMBDA, PYTHON_VERSION

    digest = hashlib.sha256(PYTHON_VERSION.encode())
    package = source / "shared" / "reminders"
    files = [*(source / "functions").rglob("*"), *package.rglob("*")]
    for path in sorted(files):
        relative = path.relative_to(source)
        if not path.is_file() or "__pycache__" in relative.parts or \
                path.suffix in (".pyc", ".pyo") or \
                (path.is_relative_to(package) and
                 path.relative_to(package).parts[0] in NOT_IN_LAMBDA):
            continue
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def stage_twin_code(source: Path = REPO_ROOT) -> Path:
    """The code asset (infra.layer.stage_code, with byte code) in build/twin-code/<hash>:
    staged once per content, never rewritten in place."""
    from infra.layer import BUILD_DIR, stage_code

    target = BUILD_DIR / "twin-code" / code_fingerprint(source)
    if target.is_dir():
        return target
    partial = target.with_name(target.name + ".partial")
    stage_code(partial, source)
    try:
        partial.rename(target)
    except OSError:  # staged by another process meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    return target


def build_assets(*, force: bool = False) -> FunctionAssets:
    """Everything a twin function runs from, built where missing or stale."""
    python = runtime_python()
    return FunctionAssets(python=python, code=stage_twin_code(),
                          layer=build_twin_layer(force=force),
                          runtime=build_runtime(force=force, python=python))
