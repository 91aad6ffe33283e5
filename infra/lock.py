"""The lock files: the exact version and the hashes of every package the venv and the Lambda
layer install, resolved by uv for every platform that installs them.

``requirements/lock.txt`` holds the whole set: the project's dependencies with every extra,
the layer's (``aws-lambda-powertools[tracer]``) and the installers' (pip, setuptools), each
``name==version`` with its environment marker and the sha256 of every file PyPI publishes for
it (``uv pip compile --universal --generate-hashes``: one resolution valid on Linux, macOS and
Windows, for Python 3.11 up). ``requirements/lock-local.txt`` is its subset for the package and
the local stack (what ``make demo`` needs), at the same versions; ``requirements/lock-tools.txt``
pins uv itself, the resolver ``make lock`` runs.

How the hashes are required: pip refuses an editable install in hash-checking mode ("there is
no single file to hash"), so ``make setup`` installs in two steps: every third-party package
from a lock file with ``--require-hashes --no-deps`` (a file whose hash is not in the lock, or a
package the lock does not pin, is refused), then the project itself, editable, with
``--no-deps --no-build-isolation`` (nothing more is fetched: its build backend came from the
lock). The layer is built by ``pip --platform`` with ``lock.txt`` as its constraints: pip checks
every file it downloads against the hashes there, and the build refuses a package the lock does
not pin (``infra/layer.py``).

``make lock`` (``python -m infra.lock``) resolves pyproject.toml again, keeping every current
pin that still fits (uv prefers the versions already in the output file) and pinning what is
new; ``make lock-upgrade`` (``--upgrade``) takes the newest release of everything. Both print
what changed and install nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO_ROOT / "requirements"
LOCK_FILE = REQUIREMENTS / "lock.txt"
LOCAL_LOCK_FILE = REQUIREMENTS / "lock-local.txt"
TOOLS_LOCK_FILE = REQUIREMENTS / "lock-tools.txt"
# Resolved together with the project, so the venv and the layer share one version of each; and
# the installers (setuptools is the build backend `pip install -e` uses without isolation).
EXTRA_REQUIREMENTS: tuple[str, ...] = ("aws-lambda-powertools[tracer]", "pip", "setuptools>=68")
TOOLS: tuple[str, ...] = ("uv",)
# The oldest Python pyproject.toml supports: a universal resolution holds for it and every later.
PYTHON_FLOOR = "3.11"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;#\\]+)")


def canonical(name: str) -> str:
    """A distribution name as PyPI compares them (PEP 503): ``Foo_Bar.x`` -> ``foo-bar-x``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _entries(text: str) -> list[tuple[int, str]]:
    """The requirement lines of a requirements file, continuation lines joined, comments and
    blank lines left out, each with its first line's number."""
    entries: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            if not line.strip():
                continue
            start = number
        pending.append(line.strip().removesuffix("\\").strip())
        if not line.endswith("\\"):
            entries.append((start, " ".join(p for p in pending if p)))
            pending = []
    if pending:
        entries.append((start, " ".join(p for p in pending if p)))
    return entries


def parse_lock(text: str) -> dict[str, str]:
    """``{canonical name: version}`` from a lock file's text (its markers and hashes left
    aside); anything but an exact pin, or two versions of one package, is an error naming the
    line."""
    pins: dict[str, str] = {}
    for number, entry in _entries(text):
        match = _PIN.match(entry)
        if match is None:
            raise ValueError(f"lock file line {number}: expected name==version, got {entry!r}")
        name, version = canonical(match[1]), match[2]
        if pins.get(name, version) != version:
            raise ValueError(f"lock file line {number}: {name} is pinned twice ({pins[name]} "
                             f"and {version}); the layer and the venv need one version")
        pins[name] = version
    return pins


def hashes(text: str) -> dict[str, set[str]]:
    """``{canonical name: {sha256, ...}}``: the files a lock file accepts for each package."""
    found: dict[str, set[str]] = {}
    for _, entry in _entries(text):
        match = _PIN.match(entry)
        if match is not None:
            found.setdefault(canonical(match[1]), set()).update(
                re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return found


def read_lock(path: Path = LOCK_FILE) -> dict[str, str]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make lock` to create it")
    return parse_lock(path.read_text())


def plain(text: str) -> str:
    """A lock file's pins and markers without their hashes: constraints for a resolution."""
    return "".join(entry.split(" --hash=", 1)[0] + "\n" for _, entry in _entries(text))


def plain_lock_file(directory: Path, lock: Path = LOCK_FILE) -> Path:
    """``lock`` without its hashes, written in ``directory``: constraints for an install whose
    other requirements have no hashes to check (the local twin's runtime folder, beside
    requirements/twin-runtime.txt), which pip's hash-checking mode would refuse."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{lock.stem}-plain.txt"
    path.write_text(plain(lock.read_text()))
    return path


def compile_command(uv: Sequence[str], inputs: Sequence[str], output: Path, *, upgrade: bool,
                    extras: Sequence[str] = (), all_extras: bool = False,
                    constraints: Sequence[Path] = ()) -> list[str]:
    """``uv pip compile`` of ``inputs`` into ``output``: universal, with hashes."""
    return [*uv, "pip", "compile", *inputs, "--universal", "--generate-hashes",
            "--python-version", PYTHON_FLOOR, "--output-file", str(output), "--quiet",
            "--no-header",
            # One version of each package for every Python and platform (an older release
            # where the newest needs a later Python): the layer and the venv read one pin.
            "--fork-strategy", "fewest",
            *(["--all-extras"] if all_extras else []),
            *(arg for extra in extras for arg in ("--extra", extra)),
            *(arg for path in constraints for arg in ("--constraint", str(path))),
            *(["--upgrade"] if upgrade else [])]


HEADER = ("# {what}\n# Generated by `make lock` (keeps current pins) or `make lock-upgrade` "
          "(newest of\n# everything) with uv from pyproject.toml; do not edit by hand. See "
          "infra/lock.py.\n")
WHAT = {
    LOCK_FILE: "Every package the venv and the Lambda layer install, with their hashes.",
    LOCAL_LOCK_FILE: "The package and the local stack (make demo): lock.txt's versions.",
    TOOLS_LOCK_FILE: "The resolver `make lock` runs.",
}


def _compile(uv: Sequence[str], output: Path, inputs: Sequence[str], *, upgrade: bool,
             **options: object) -> None:
    done = subprocess.run(compile_command(uv, inputs, output, upgrade=upgrade,
                                          **options),  # type: ignore[arg-type]
                          check=False, cwd=REPO_ROOT)
    if done.returncode != 0:
        hint = "" if upgrade else (" (a current pin may no longer fit pyproject.toml: "
                                   "`make lock-upgrade` resolves everything afresh)")
        raise SystemExit(f"uv could not resolve {output.name}{hint}")
    output.write_text(HEADER.format(what=WHAT[output]) + output.read_text())


# The inputs uv reads besides pyproject.toml, written here afresh each time (relative paths,
# so that the "# via" lines they give rise to read the same on every machine).
INPUTS = Path("build") / "lock-inputs"


def resolve(*, upgrade: bool, uv: Sequence[str] = ("uv",)) -> None:
    """Write the three lock files; nothing is installed."""
    REQUIREMENTS.mkdir(exist_ok=True)
    inputs = REPO_ROOT / INPUTS
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "extra.in").write_text("".join(f"{r}\n" for r in EXTRA_REQUIREMENTS))
    (inputs / "tools.in").write_text("".join(f"{r}\n" for r in TOOLS))
    extra, pyproject = str(INPUTS / "extra.in"), "pyproject.toml"
    _compile(uv, LOCK_FILE, [pyproject, extra], upgrade=upgrade, all_extras=True)
    pinned = INPUTS / "pinned.txt"
    (REPO_ROOT / pinned).write_text(plain(LOCK_FILE.read_text()))
    _compile(uv, LOCAL_LOCK_FILE, [pyproject, extra], upgrade=False, extras=["local"],
             constraints=[pinned])
    _compile(uv, TOOLS_LOCK_FILE, [str(INPUTS / "tools.in")], upgrade=upgrade)


def main() -> None:
    upgrade = "--upgrade" in sys.argv[1:]
    before = read_lock() if LOCK_FILE.is_file() and _readable(LOCK_FILE) else {}
    resolve(upgrade=upgrade, uv=(sys.executable, "-m", "uv"))
    pins = read_lock()
    changed = sorted(n for n in pins.keys() | before.keys() if pins.get(n) != before.get(n))
    for name in changed:
        print(f"{name}: {before.get(name, '(new)')} -> {pins.get(name, '(removed)')}")
    print(f"{LOCK_FILE.relative_to(REPO_ROOT)}: {len(pins)} packages, {len(changed)} changed")


def _readable(path: Path) -> bool:
    try:
        read_lock(path)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    main()
