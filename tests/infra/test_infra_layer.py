"""The dependency layer is built for Lambda's arm64 Python 3.13, and the code asset is staged."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from infra.layer import (
    LAYER_REQUIREMENTS,
    PLATFORM,
    PYTHON_VERSION,
    REPO_ROOT,
    RUNTIME_PROVIDED,
    STAMP_NAME,
    _stamp,
    bytecode_python,
    compile_bytecode,
    layer_is_current,
    migrations_fingerprint,
    pip_command,
    resolved_versions,
    stage_code,
    staleness,
)
from infra.lock import LOCK_FILE, hashes, read_lock
from tests.infra.synth import Synthesized

ELF_MACHINE_AARCH64 = 183
CONSOLE_ONLY = ("starlette", "jinja2", "uvicorn", "pygal", "multipart", "python_multipart")
WHEEL_TAG = re.compile(r"^cp313-cp313-manylinux(?:_(\d+)_(\d+)|2014)_aarch64$")
# Lambda's python3.13 runtime: Amazon Linux 2023, glibc 2.34.
LAMBDA_GLIBC = (2, 34)


def _wheel_tags(dist_info: Path) -> list[str]:
    lines = (dist_info / "WHEEL").read_text().splitlines()
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("Tag:")]


def test_psycopg_binary_wheel_is_for_manylinux_aarch64_cp313(layer_dir: Path) -> None:
    site_packages = layer_dir / "python"
    (dist_info,) = site_packages.glob("psycopg_binary-*.dist-info")
    tags = _wheel_tags(dist_info)
    assert tags
    for tag in tags:
        match = WHEEL_TAG.match(tag)
        assert match, tags
        if match[1]:
            assert (int(match[1]), int(match[2])) <= LAMBDA_GLIBC, tag


def test_layer_runs_the_psycopg_the_tests_run(layer_dir: Path) -> None:
    import psycopg

    site_packages = layer_dir / "python"
    for distribution in ("psycopg", "psycopg_binary"):
        (dist_info,) = site_packages.glob(f"{distribution}-*.dist-info")
        version = dist_info.name.removeprefix(f"{distribution}-").removesuffix(".dist-info")
        assert version == psycopg.__version__, distribution
    assert PLATFORM == "manylinux_2_28_aarch64"


def test_psycopg_binary_extensions_are_arm64_elf(layer_dir: Path) -> None:
    libraries = list((layer_dir / "python" / "psycopg_binary").rglob("*.so"))
    assert libraries
    for library in libraries:
        header = library.read_bytes()[:20]
        assert header[:4] == b"\x7fELF"
        (machine,) = struct.unpack("<H", header[18:20])
        assert machine == ELF_MACHINE_AARCH64, library


def test_layer_holds_the_packages_the_functions_import(layer_dir: Path) -> None:
    site_packages = layer_dir / "python"
    for package in ("psycopg", "psycopg_binary", "cryptography", "tzdata", "dateutil",
                    "aws_lambda_powertools"):
        assert (site_packages / package).is_dir(), package
    for package in RUNTIME_PROVIDED:
        assert not (site_packages / package).exists(), package
    for package in CONSOLE_ONLY:  # the console's libraries stay on the operator's machine
        assert not (site_packages / package).exists(), package
        assert not any(package in r for r in LAYER_REQUIREMENTS), LAYER_REQUIREMENTS
    assert layer_is_current(layer_dir)


def _unchecked_pycs(root: Path) -> dict[Path, bytes]:
    """Each ``.pyc`` under ``root``, by the source it was compiled from, with its flags."""
    tag = "cpython-" + PYTHON_VERSION.replace(".", "")
    found: dict[Path, bytes] = {}
    for pyc in root.rglob("*.pyc"):
        assert pyc.parent.name == "__pycache__" and pyc.name.endswith(f".{tag}.pyc"), pyc
        found[pyc.parent.parent / (pyc.name.split(".")[0] + ".py")] = pyc.read_bytes()[4:8]
    return found


def test_layer_and_code_asset_ship_unchecked_byte_code_for_the_runtime(
        layer_dir: Path, tmp_path: Path) -> None:
    if bytecode_python() is None:
        pytest.skip(f"no CPython {PYTHON_VERSION} on this machine: the layer ships source")
    for root in (layer_dir / "python", stage_code(tmp_path / "code")):
        pycs = _unchecked_pycs(root)
        sources = set(root.rglob("*.py"))
        assert sources and set(pycs) == sources, sources ^ set(pycs)
        # PEP 552 flags: bit 0 hash-based, bit 1 check the source; unchecked is exactly 1.
        assert set(pycs.values()) == {b"\x01\x00\x00\x00"}


def test_unchecked_byte_code_is_used_without_the_source_being_read(tmp_path: Path) -> None:
    """What Lambda's read-only file system needs: the .pyc is taken as it is (a stale time
    stamp or a changed source does not send Python back to compiling)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("VALUE = 'compiled'\n")
    compile_bytecode(tmp_path, sys.executable)
    (package / "mod.py").write_text("VALUE = 'source'\n")
    done = subprocess.run(
        [sys.executable, "-B", "-c", "import pkg.mod as m; print(m.VALUE, m.__spec__.cached)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    value, cached = done.stdout.split()
    assert value == "compiled"
    assert cached.endswith(".pyc")


def test_code_asset_puts_functions_and_the_package_at_its_root(tmp_path: Path) -> None:
    source = tmp_path / "repo"
    (source / "functions" / "scanner" / "__pycache__").mkdir(parents=True)
    (source / "functions" / "scanner" / "handler.py").write_text("def handler(e, c): ...\n")
    (source / "functions" / "scanner" / "__pycache__" / "handler.cpython-313.pyc").write_bytes(b"")
    (source / "shared" / "reminders" / "db").mkdir(parents=True)
    (source / "shared" / "reminders" / "__init__.py").write_text("")
    (source / "shared" / "reminders" / "db" / "queries.sql").write_text("-- name: x\n")
    (source / "shared" / "reminders" / "stale.pyc").write_bytes(b"")
    (source / "shared" / "reminders" / "console" / "templates").mkdir(parents=True)
    (source / "shared" / "reminders" / "console" / "app.py").write_text("import starlette\n")

    staged = stage_code(tmp_path / "out", source, bytecode=False)

    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert files == [
        "functions/scanner/handler.py",
        "reminders/__init__.py",
        "reminders/db/queries.sql",
    ]


def test_the_code_asset_and_the_package_carry_every_sql_file_the_migrator_reads(
        tmp_path: Path) -> None:
    """The migrate function applies the numbered migrations and the repeatable objects
    (db/objects/<kind>/<name>.sql) from the code asset; an installed package carries them as
    package data."""
    import tomllib

    sql_root = REPO_ROOT / "shared" / "reminders" / "db"
    wanted = sorted(p.relative_to(sql_root).as_posix() for p in sql_root.rglob("*.sql"))
    assert any(w.startswith("objects/functions/") for w in wanted)
    assert any(w.startswith("objects/triggers/") for w in wanted)
    assert any(w.startswith("objects/views/") for w in wanted)
    staged = stage_code(tmp_path / "code", bytecode=False) / "reminders" / "db"
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*.sql")) == wanted

    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packaged: set[str] = set()
    for package, patterns in setuptools["package-data"].items():
        top, *rest = package.split(".")
        base = REPO_ROOT / setuptools["package-dir"][top] / Path(*rest)
        for pattern in patterns:
            packaged.update(p.relative_to(sql_root).as_posix() for p in base.glob(pattern)
                            if p.suffix == ".sql" and p.is_relative_to(sql_root))
    assert sorted(packaged) == wanted


def test_a_changed_object_file_runs_the_migrate_function_again(tmp_path: Path) -> None:
    objects = tmp_path / "shared" / "reminders" / "db" / "objects" / "functions"
    objects.mkdir(parents=True)
    (objects / "f.sql").write_text("create or replace function f() ...")
    before = migrations_fingerprint(tmp_path)
    (objects / "f.sql").write_text("create or replace function f() ... -- changed")
    assert migrations_fingerprint(tmp_path) != before


def test_every_function_uses_the_one_code_asset_and_the_one_layer(default: Synthesized) -> None:
    functions = [
        default.function(name)[1]["Properties"]
        for name in ("scanner", "consumer", "redrive", "migrate", "publisher")
    ]
    assert len({str(f["Code"]) for f in functions}) == 1
    assert len({str(f["Layers"]) for f in functions}) == 1
    (layer,) = default.resources("AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]


# What a build resolved into build/layer/python, as its .dist-info directories name it.
RECORDED_LAYER = (
    "aws_lambda_powertools-3.37.0", "aws_xray_sdk-2.15.0", "cffi-2.1.1", "cryptography-50.0.2",
    "jmespath-1.1.0", "psycopg-3.3.9", "pycparser-3.12",
    "psycopg_binary-3.3.9", "python_dateutil-2.9.0.post0", "six-1.17.0",
    "typing_extensions-4.16.0", "tzdata-2026.6", "urllib3-2.8.0", "wrapt-2.5.2",
)
RECORDED_PINS = {
    "aws-lambda-powertools": "3.37.0", "aws-xray-sdk": "2.15.0", "cffi": "2.1.1",
    "cryptography": "50.0.2", "jmespath": "1.1.0", "pycparser": "3.12",
    "psycopg": "3.3.9", "psycopg-binary": "3.3.9", "python-dateutil": "2.9.0.post0",
    "six": "1.17.0", "typing-extensions": "4.16.0", "tzdata": "2026.6", "urllib3": "2.8.0",
    "wrapt": "2.5.2", "ruff": "0.17.6",
}


def _recorded_layer(root: Path, dists: tuple[str, ...] = RECORDED_LAYER,
                    pins: dict[str, str] = RECORDED_PINS) -> tuple[Path, Path]:
    """A layer directory holding only the recorded metadata, its stamp, and a lock."""
    site_packages = root / "layer" / "python"
    for dist in dists:
        (site_packages / f"{dist}.dist-info").mkdir(parents=True)
    (root / "layer" / STAMP_NAME).write_text(_stamp() + "\n")
    lock = root / "lock.txt"
    lock.write_text("".join(f"{name}=={pins[name]}\n" for name in sorted(pins)))
    return root / "layer", lock


def test_layer_is_current_when_what_it_resolved_is_the_pinned_set(tmp_path: Path) -> None:
    layer, lock = _recorded_layer(tmp_path)
    assert resolved_versions(layer / "python")["python-dateutil"] == "2.9.0.post0"
    assert staleness(resolved_versions(layer / "python"), RECORDED_PINS) == []
    assert layer_is_current(layer, lock)


def test_a_new_pin_makes_the_layer_stale_though_the_requirements_read_the_same(
        tmp_path: Path) -> None:
    # The requirement is the bare "tzdata": its stamp does not change when the pin moves.
    layer, lock = _recorded_layer(tmp_path, pins={**RECORDED_PINS, "tzdata": "2027.1"})
    assert (layer / STAMP_NAME).read_text().strip() == _stamp()
    assert not layer_is_current(layer, lock)
    assert staleness(resolved_versions(layer / "python"), read_lock(lock)) == [
        "tzdata is 2026.6, pinned 2027.1"]


def test_a_package_the_lock_does_not_pin_or_a_missing_requirement_makes_it_stale(
        tmp_path: Path) -> None:
    unpinned = {k: v for k, v in RECORDED_PINS.items() if k != "wrapt"}
    resolved = {k: v for k, v in RECORDED_PINS.items() if k != "ruff"}
    assert staleness(resolved, unpinned) == ["wrapt 2.5.2 is not pinned in lock.txt"]
    without_tzdata = tuple(d for d in RECORDED_LAYER if not d.startswith("tzdata"))
    layer, lock = _recorded_layer(tmp_path, dists=without_tzdata)
    assert not layer_is_current(layer, lock)
    assert staleness(resolved_versions(layer / "python"), RECORDED_PINS) == [
        "tzdata is not in the layer"]


def test_the_layer_is_built_under_the_lock_and_its_hashes(tmp_path: Path) -> None:
    """The constraints are the hashed lock itself: pip checks every file it downloads for
    the layer against the hashes there (hashes in a constraints file turn its hash-checking
    mode on)."""
    command = pip_command(tmp_path)
    assert command[command.index("--constraint") + 1] == str(LOCK_FILE)
    layer_packages = {"aws-lambda-powertools", "aws-xray-sdk", "psycopg", "psycopg-binary",
                      "tzdata", "python-dateutil"}
    found = hashes(LOCK_FILE.read_text())
    assert all(found[name] for name in layer_packages)


ABI3_TAG = re.compile(r"^cp3\d+-abi3-manylinux_(\d+)_(\d+)_aarch64$")


def test_cryptography_is_the_tests_version_built_for_arm64(layer_dir: Path) -> None:
    import cryptography

    site_packages = layer_dir / "python"
    (dist_info,) = site_packages.glob("cryptography-*.dist-info")
    assert dist_info.name == f"cryptography-{cryptography.__version__}.dist-info"
    for tag in _wheel_tags(dist_info):
        match = ABI3_TAG.match(tag)
        assert match, tag
        assert (int(match[1]), int(match[2])) <= LAMBDA_GLIBC, tag
    libraries = [*(site_packages / "cryptography").rglob("*.so"),
                 *site_packages.glob("_cffi_backend*.so")]
    assert any(lib.name.startswith("_cffi_backend") for lib in libraries), libraries
    for library in libraries:
        header = library.read_bytes()[:20]
        (machine,) = struct.unpack("<H", header[18:20])
        assert header[:4] == b"\x7fELF" and machine == ELF_MACHINE_AARCH64, library
