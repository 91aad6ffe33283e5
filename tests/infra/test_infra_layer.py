"""The dependency layer is built for Lambda's arm64 Python 3.13, and the code asset is staged."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from infra.layer import (
    PLATFORM,
    PYTHON_VERSION,
    RUNTIME_PROVIDED,
    bytecode_python,
    compile_bytecode,
    layer_is_current,
    stage_code,
)
from tests.infra.synth import Synthesized

ELF_MACHINE_AARCH64 = 183
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
    for package in ("psycopg", "psycopg_binary", "tzdata", "dateutil", "aws_lambda_powertools"):
        assert (site_packages / package).is_dir(), package
    for package in RUNTIME_PROVIDED:
        assert not (site_packages / package).exists(), package
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

    staged = stage_code(tmp_path / "out", source, bytecode=False)

    files = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert files == [
        "functions/scanner/handler.py",
        "reminders/__init__.py",
        "reminders/db/queries.sql",
    ]


def test_every_function_uses_the_one_code_asset_and_the_one_layer(default: Synthesized) -> None:
    functions = [
        default.function(name)[1]["Properties"]
        for name in ("scanner", "consumer", "redrive", "migrate")
    ]
    assert len({str(f["Code"]) for f in functions}) == 1
    assert len({str(f["Layers"]) for f in functions}) == 1
    (layer,) = default.resources("AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
