"""On Tab, the shell asks the local stack for its kinds and tenants (``reminders __complete``):
what the database holds is offered after ``--kind`` and ``--tenant``, and ``tenants pause``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cli_helpers import Cli
from tests.terminal import bash_completes

pytestmark = pytest.mark.integration


def record_stack(cli: Cli, database_url: str, tmp_path: Path) -> dict[str, str]:
    """``reminders`` on PATH, and a local stack recorded whose database is the test's (only
    its database: what the completion asks)."""
    home = Path(cli.env["REMINDERS_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "local.json").write_text(json.dumps({
        "database_url": database_url, "endpoint_url": "http://127.0.0.1:1",
        "region": "us-east-1", "queues": {}, "receiver_url": "http://127.0.0.1:1",
        "receiver_secret": "x", "pgdata": str(tmp_path), "pids": {"postgres": os.getpid()}}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "reminders"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m reminders.cli "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in cli.env.items() if k != "DATABASE_URL"}
    # A machine busy with tests starts Python slowly: the bound is the shell's, not the test's.
    return {**env, "PATH": f"{bin_dir}:{os.environ['PATH']}", "REMINDERS_COMPLETE_SECONDS": "30"}


def complete(env: dict[str, str], *words: str) -> list[str]:
    return bash_completes(*words, env=env)


def test_the_local_stack_s_kinds_and_tenants_complete(cli: Cli, database_url: str,
                                                      tmp_path: Path) -> None:
    cli("kinds", "set", "trip", "--json").json()
    cli("kinds", "set", "billing", "--json").json()
    for tenant in ("acme", "beta"):
        cli("tenants", "pause", tenant, "--create", "--json").json()
    shell_env = record_stack(cli, database_url, tmp_path)
    assert {"trip", "billing"} <= set(complete(shell_env, "list", "--kind", ""))
    assert complete(shell_env, "schedule", "--kind", "tr") == ["trip"]
    assert complete(shell_env, "deliveries", "list", "--tenant", "") == ["acme", "beta"]
    assert complete(shell_env, "tenants", "resume", "b") == ["beta"]
    names = subprocess.run([sys.executable, "-m", "reminders.cli", "__complete", "tenants"],
                           capture_output=True, text=True, timeout=60, env=shell_env)
    assert (names.returncode, names.stdout, names.stderr) == (0, "acme\nbeta\n", "")
