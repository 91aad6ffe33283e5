"""Running the ``reminders`` command line as a user does: a separate process, settings from
the environment, JSON on stdout, one line on stderr for a bad argument."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NOW = "2027-03-01T09:00:00Z"


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        assert self.err == "", self.err
        return json.loads(self.out)


@dataclass
class Cli:
    env: dict[str, str]

    def __call__(self, *args: str, now: str = NOW, **extra: str) -> Result:
        env = {**self.env, "REMINDERS_NOW": now, **extra}
        proc = subprocess.run([sys.executable, "-m", "reminders.cli", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        return Result(proc.returncode, proc.stdout, proc.stderr)


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REMINDERS_", "AWS_")) and k != "DATABASE_URL"}
    env["REMINDERS_HOME"] = str(tmp_path / "home")  # never a running local stack
    return env


# Reasons that break the one rule for --reason (reminders.reasons), and the line every path
# (the command line, the operations function, the console) refuses each with.
BAD_REASONS = {
    "line break": ("a\nb", "--reason: contains a line break: 'a\\nb'"),
    "control character": ("ok\x1b[2Jok", "--reason: contains a control character: "
                                          "'ok\\x1b[2Jok'"),
    "over-long": ("x" * 501, "--reason: longer than 500 characters (501)"),
}
BLANK_REQUIRED = "--reason: say what you checked"
BLANK_OPTIONAL = "--reason: empty; say why, or leave --reason out"
