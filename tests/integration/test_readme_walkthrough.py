"""The README's command-line walkthrough, run as written: every command of the marked block, in
order, in one shell, against a fresh ``reminders local up``; each must exit 0."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import reminders
from tests.integration.test_local_stack import Home, new_home

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- walkthrough:"
SCRIPT_SECONDS = 240  # tick and work start the twin: its function processes cold-start


def walkthrough_commands(text: str, marker: str = MARKER) -> list[str]:
    """The commands of the fenced block after the marker: continuation lines joined, lines that
    are only a comment left out."""
    start = text.index(marker)
    fence = text.index("```sh\n", start) + len("```sh\n")
    block = text[fence:text.index("\n```", fence)]
    commands: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    assert not pending, pending
    return commands


@dataclass
class Step:
    command: str
    code: int
    out: str
    err: str


def run_script(commands: list[str], home: Home, work: Path) -> list[Step]:
    """One bash process runs them in order (exports and evals carry on, as in a terminal),
    each with its output and exit status kept; the first failure ends the script."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    # `reminders` is the package these tests import, whatever is installed on PATH.
    launcher = bin_dir / "reminders"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m reminders.cli "$@"\n')
    launcher.chmod(0o755)
    python = bin_dir / "python"  # the interpreter these tests run on, with psycopg
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    lines = ["set -u"]
    for i, command in enumerate(commands):
        lines.append(f"{{ {command}\n}} >{work}/{i}.out 2>{work}/{i}.err </dev/null; "
                     f"echo $? >{work}/{i}.rc; [ \"$(cat {work}/{i}.rc)\" = 0 ] || exit 1")
    script = work / "walkthrough.sh"
    script.write_text("\n".join(lines) + "\n")
    package_root = str(Path(reminders.__file__).resolve().parent.parent)
    env = {**home.env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([package_root, *filter(None, [
               os.environ.get("PYTHONPATH")])])}
    subprocess.run(["bash", str(script)], env=env, cwd=work, timeout=SCRIPT_SECONDS,
                   check=False)
    steps = []
    for i, command in enumerate(commands):
        rc = work / f"{i}.rc"
        if not rc.exists():
            break
        steps.append(Step(command, int(rc.read_text()), (work / f"{i}.out").read_text(),
                          (work / f"{i}.err").read_text()))
    return steps


def test_the_command_blocks_are_found_and_joined() -> None:
    text = ("intro\n```sh\nnot this\n```\n<!-- walkthrough: x -->\n```sh\n"
            "a --x   # note\n   # only a comment\nb \\\n    --y\n\nc\n```\nafter\n")
    assert walkthrough_commands(text) == ["a --x   # note", "b      --y", "c"]


@pytest.fixture
def home() -> Any:
    h = new_home()
    yield h
    h.cleanup()


def test_the_readme_walkthrough_runs_as_written(home: Home, tmp_path: Path) -> None:
    commands = walkthrough_commands(README.read_text())
    assert commands[0].startswith("reminders local up")
    assert commands[-1] == "reminders local down"
    steps = run_script(commands, home, tmp_path)
    for step in steps:
        assert step.code == 0, (step.command, step.out, step.err)
    assert len(steps) == len(commands), [s.command for s in steps]
    by = {s.command.split("#")[0].strip(): s for s in steps}

    def out(prefix: str) -> str:
        (step,) = [s for c, s in by.items() if c.startswith(prefix)]
        return step.out

    tick = json.loads(out("reminders tick --json"))
    assert (tick["leased"], tick["published"]) == (1, 1)
    work = json.loads(out("reminders work --json"))
    assert work["idle"] is True and work["consumer"]["failures"] == 0
    status = json.loads(out("reminders status --json"))
    assert status["by_state"]["sent"] == 1
    assert out("reminders show schedule:1/0").startswith(
        "schedule:1/0:20270301T090000Z:alice:webhook: sent")
    assert "suppress 1 pending" in out("reminders cancel trip-42 --dry-run")
    dead = json.loads(out("reminders list --state dead --json"))
    assert [d["delivery_key"] for d in dead] == ["schedule:2/0:20270301T090000Z:bob:webhook"]
    assert "would reconcile 1 dead" in out("reminders reconcile --state dead")
    shown = out("reminders show schedule:2/0")
    assert shown.startswith("schedule:2/0:20270301T090000Z:bob:webhook: failed")
    assert re.search(r"operator \S+: reconciled as failed \(bob travelled already\)", shown)
    assert json.loads(out("reminders version --json"))["tzdata"]
