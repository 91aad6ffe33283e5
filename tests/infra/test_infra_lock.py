"""The lock pins every package exactly, covers what pyproject.toml asks for, and is what the
venv runs: a new release upstream cannot change what `make test` installs."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra.lock import (
    EXTRA_REQUIREMENTS,
    LOCK_FILE,
    REPO_ROOT,
    canonical,
    parse_lock,
    pins_from_report,
    read_lock,
    render_lock,
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


def test_the_lock_is_rendered_sorted_and_read_back(tmp_path: Path) -> None:
    text = render_lock({"ruff": "0.17.6", "aws-cdk-lib": "2.275.0"})
    assert text.splitlines()[-2:] == ["aws-cdk-lib==2.275.0", "ruff==0.17.6"]
    assert LOCK_FILE.read_text() == render_lock(read_lock())
    report = {"install": [{"metadata": {"name": "reminders", "version": "0.1.0"}},
                          {"metadata": {"name": "Typing_Extensions", "version": "4.16.0"}}]}
    assert pins_from_report(report) == {"typing-extensions": "4.16.0"}
