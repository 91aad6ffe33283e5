"""The REMINDERS_ variables: every name the project uses is a known one, each known one is read
where config.KNOWN_VARIABLES says, and a name that is not known stops loading the settings with
the name closest to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reminders import config, fanout
from reminders.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
# Where names are used: the code, the tests, the tools and what the docs tell people to set.
SOURCES = ("shared", "functions", "infra", "tests", "examples", "docs", ".ci", "Makefile",
           "README.md", "pyproject.toml", "cdk.json")
NAME = re.compile(r"REMINDERS_[A-Z0-9_]+")
BASE_ENV = {"DATABASE_URL": "postgresql://u:p@localhost:5432/reminders"}
# A misspelling, put together here so that the source tree scan below does not find it.
MISSPELT = "REMINDERS_" + "LOCK_TIMEOUT_MS"
RUN_TOGETHER = "REMINDERS_" + "SCANBATCH"


def _files() -> list[Path]:
    found: list[Path] = []
    for source in SOURCES:
        path = ROOT / source
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(p for p in sorted(path.rglob("*")) if p.is_file()
                         and "__pycache__" not in p.parts and "cdk.out" not in p.parts)
    return found


def test_every_reminders_name_in_the_source_tree_is_known() -> None:
    used: dict[str, set[str]] = {}
    files = _files()
    assert len(files) > 100  # the scan reached the tree
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file (an image)
            continue
        for name in NAME.findall(text):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    unknown = {name: sorted(where) for name, where in used.items()
               if name not in config.KNOWN_VARIABLES}
    assert unknown == {}, "add each to config.KNOWN_VARIABLES (and docs/settings.md)"
    # and the scan sees the names read outside config.py too
    assert {"REMINDERS_HOME", "REMINDERS_BYTECODE_PYTHON", "REMINDERS_CHROMIUM"} <= set(used)


@pytest.mark.parametrize("name", sorted(config.KNOWN_VARIABLES))
def test_each_known_name_is_read_where_the_table_says(name: str) -> None:
    reader = ROOT / config.KNOWN_VARIABLES[name]
    assert re.search(rf"\b{name}\b", reader.read_text(encoding="utf-8")), reader


def test_a_misspelt_setting_stops_loading_with_the_closest_known_name() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE_ENV, MISSPELT: "100"})
    assert str(err.value) == (
        f"unknown setting: {MISSPELT} (did you mean REMINDERS_DB_LOCK_TIMEOUT_MS?); "
        "docs/settings.md lists the REMINDERS_ variables")


def test_every_unknown_name_is_named() -> None:
    with pytest.raises(ConfigError) as err:
        config.load({**BASE_ENV, MISSPELT: "100", RUN_TOGETHER: "5",
                     "REMINDERS_SCAN_BATCH": "5"})
    assert str(err.value).startswith(
        f"unknown settings: {MISSPELT} (did you mean REMINDERS_DB_LOCK_TIMEOUT_MS?), "
        f"{RUN_TOGETHER} (did you mean REMINDERS_SCAN_BATCH?); ")


def test_the_publisher_refuses_an_unknown_name_too() -> None:
    with pytest.raises(ConfigError, match="did you mean REMINDERS_PUBLISH_CONCURRENCY"):
        fanout.sender_from_env({"REMINDERS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/d",
                                "REMINDERS_" + "PUBLISH_CONCURENCY": "4"})


def test_names_read_outside_the_settings_are_accepted() -> None:
    """The shell the command line runs in may hold the tools' and tests' own variables."""
    others = {name: "1" for name, reader in config.KNOWN_VARIABLES.items()
              if reader != "shared/reminders/config.py"}
    others["REMINDERS_NOW"] = "2026-12-01T09:00:00Z"
    settings = config.load({**BASE_ENV, **others, "REMINDERS_SCAN_BATCH": "7"})
    assert settings.limits.scan_batch == 7


def test_other_names_are_not_settings() -> None:
    """Only the REMINDERS_ prefix is checked: other variables are the platform's."""
    config.load({**BASE_ENV, "REMINDERS": "x", "AWS_REGION": "eu-west-1", "reminders_x": "y"})


def test_the_settings_page_names_every_setting_but_the_tests_own() -> None:
    text = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    section = text.split("# Settings\n", 1)[1].split("\n## ", 1)[0]
    table = {name for line in section.splitlines() if line.startswith("| `")
             for name in NAME.findall(line.split(" | ")[0])}
    readers = config.KNOWN_VARIABLES
    assert table == {name for name in readers if not readers[name].startswith("tests/")}
