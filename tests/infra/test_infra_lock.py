"""The lock pins every package exactly with the hashes of its files, covers what pyproject.toml
asks for, and is what the venv runs: a new release upstream, or a file replaced on the index,
cannot change what `make test` installs."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra.lock import (
    EXTRA_REQUIREMENTS,
    LOCAL_LOCK_FILE,
    LOCK_FILE,
    REPO_ROOT,
    TOOLS_LOCK_FILE,
    canonical,
    compile_command,
    hashes,
    parse_lock,
    plain,
    read_lock,
)

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    project = PYPROJECT["project"]
    found = [Requirement(r) for r in project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        found += [Requirement(r) for r in extra]
    found += [Requirement(r) for r in (*EXTRA_REQUIREMENTS, *PYPROJECT["build-system"]["requires"])]
    return [r for r in found if canonical(r.name) != "reminders"]


def test_every_requirement_is_pinned_at_a_version_it_accepts() -> None:
    pins = read_lock()
    for requirement in _requirements():
        name = canonical(requirement.name)
        assert name in pins, f"{name} is not in {LOCK_FILE.name}: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{name}=={pins[name]} does not satisfy {requirement}: run `make lock`")


def test_the_tools_and_the_time_zone_data_are_pinned_exactly() -> None:
    pins = read_lock()
    for name in ("ruff", "mypy", "pytest", "hypothesis", "tzdata", "psycopg", "pip",
                 "setuptools", "aws-cdk-lib", "cfn-lint", "moto"):
        assert re.fullmatch(r"\d+(\.\d+)*(\.post\d+)?", pins[name]), (name, pins[name])


@pytest.mark.parametrize("name", ["tzdata", "psycopg", "psycopg-binary", "ruff", "mypy",
                                  "pytest", "python-dateutil", "aws-lambda-powertools"])
def test_the_venv_runs_the_pinned_versions(name: str) -> None:
    assert metadata.version(name) == read_lock()[name], (
        f"{name}: the venv has {metadata.version(name)}; `make setup` installs the pinned one")


def test_a_lock_line_that_is_not_an_exact_pin_is_refused() -> None:
    assert parse_lock("# c\n\nRuff==0.17.6\ntyping_extensions==4.16.0\n") == {
        "ruff": "0.17.6", "typing-extensions": "4.16.0"}
    with pytest.raises(ValueError, match=r"line 2: expected name==version, got 'mypy>=1'"):
        parse_lock("ruff==0.17.6\nmypy>=1\n")


HASHED = """# c
boto3==1.44.8 \\
    --hash=sha256:{a} \\
    --hash=sha256:{b}
    # via reminders
colorama==0.4.6 ; sys_platform == 'win32' \\
    --hash=sha256:{a}
"""


def test_a_hashed_universal_lock_is_read_with_its_markers_and_hashes() -> None:
    a, b = "a" * 64, "b" * 64
    text = HASHED.format(a=a, b=b)
    assert parse_lock(text) == {"boto3": "1.44.8", "colorama": "0.4.6"}
    assert hashes(text) == {"boto3": {a, b}, "colorama": {a}}
    assert plain(text) == "boto3==1.44.8\ncolorama==0.4.6 ; sys_platform == 'win32'\n"
    with pytest.raises(ValueError, match="line 3: numpy is pinned twice"):
        parse_lock("numpy==2.3.0 ; python_version >= '3.12'\n\n"
                   "numpy==2.2.0 ; python_version < '3.12'\n")


@pytest.mark.parametrize("lock", [LOCK_FILE, LOCAL_LOCK_FILE, TOOLS_LOCK_FILE],
                         ids=lambda p: p.name)
def test_every_pin_carries_the_hashes_of_its_files(lock: Path) -> None:
    text = lock.read_text()
    pins, found = parse_lock(text), hashes(text)
    assert pins and set(found) == set(pins)
    assert [name for name, sums in found.items() if not sums] == []


def test_the_local_lock_is_the_package_and_the_local_stack_at_the_lock_s_versions() -> None:
    everything, local = read_lock(), read_lock(LOCAL_LOCK_FILE)
    assert {n: everything[n] for n in local} == local
    project = PYPROJECT["project"]
    wanted = [Requirement(r) for r in (*project["dependencies"],
                                       *project["optional-dependencies"]["local"])]
    assert {canonical(r.name) for r in wanted} - set(local) == set()
    assert {"pip", "setuptools"} <= set(local)  # the installers, for --no-build-isolation
    assert "aws-cdk-lib" not in local and "pytest" not in local  # `make demo` stays quick
    assert hashes(LOCAL_LOCK_FILE.read_text()).items() <= hashes(LOCK_FILE.read_text()).items()


def test_the_lock_is_resolved_for_every_platform_with_hashes() -> None:
    command = compile_command(["uv"], ["pyproject.toml"], LOCK_FILE, upgrade=False,
                              all_extras=True)
    assert command[:3] == ["uv", "pip", "compile"]
    assert {"--universal", "--generate-hashes", "--all-extras"} <= set(command)
    assert command[command.index("--python-version") + 1] == PYPROJECT["project"][
        "requires-python"].removeprefix(">=")
    assert "--upgrade" not in command
    assert "--upgrade" in compile_command(["uv"], [], LOCK_FILE, upgrade=True)


def test_every_install_of_the_makefile_requires_the_hashes() -> None:
    """pip refuses an editable install in hash-checking mode: the packages come from a lock
    with --require-hashes, the project after them with nothing more fetched."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if (" install " in line
                and "$(PIP)" in line) or "-m pip install" in line]
    assert installs, makefile
    for line in installs:
        assert "--require-hashes" in line or "--no-deps --no-build-isolation -e ." in line, line
    assert "PIP_CONSTRAINT" not in makefile
