"""Shell completion generated from the parser: bash's own completion machinery, run against the
script ``reminders completion bash`` prints, completes flags (also after an option's value) and
the values the command line knows (channels, states); zsh and fish get scripts too."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.terminal import bash_completes, completion_script


def _script(shell: str) -> str:
    return completion_script(shell)


def complete(*words: str) -> list[str]:
    return bash_completes(*words)


pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def test_flags_complete_after_an_option_s_value() -> None:
    offered = complete("list", "--tenant", "acme", "--")
    assert "--state" in offered and "--channel" in offered and "--limit" in offered


def test_subcommands_and_a_flag_s_prefix_complete() -> None:
    assert {"add", "remove", "rotate-secret", "list"} <= set(complete("endpoints", ""))
    assert {"pause", "resume", "list"} <= set(complete("tenants", ""))
    assert complete("list", "--st") == ["--state"]


def test_a_channel_completes_from_its_choices() -> None:
    assert complete("schedule", "--channel", "") == ["email", "sms", "webhook"]


def test_a_state_completes_from_the_states() -> None:
    assert complete("list", "--state", "") == sorted(
        ["scheduled", "leased", "retrying", "sent", "failed", "suppressed", "stale",
         "unknown", "dead"])
    assert "dead" in complete("reconcile", "--state", "d")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_get_a_script_with_the_commands(shell: str) -> None:
    text = _script(shell)
    assert "rotate-secret" in text and "--max-seconds" in text


def test_the_nouns_complete_as_their_short_forms_do() -> None:
    assert {"show", "list", "reconcile"} <= set(complete("deliveries", ""))
    assert "dead" in complete("deliveries", "list", "--state", "d")
    assert "deliveries" in complete("del")


def test_kinds_and_tenants_are_asked_of_the_local_stack_by_every_shell() -> None:
    bash, zsh, fish = (_script(shell) for shell in ("bash", "zsh", "fish"))
    assert "_shtab_reminders_schedule___kind_COMPGEN=_reminders_kinds" in bash
    assert "_shtab_reminders_tenants_pause_pos_0_COMPGEN=_reminders_tenants" in bash
    assert "reminders __complete kinds" in bash and "reminders __complete tenants" in zsh
    assert "(reminders __complete tenants 2>/dev/null)" in fish


def test_asking_a_local_stack_that_does_not_answer_gives_up_quickly(tmp_path: Path) -> None:
    """A Postgres that accepts the connection and never answers: nothing, exit 0, within the
    bound (the shell is never left hanging on Tab)."""
    import json
    import os
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    home = tmp_path / "home"
    home.mkdir()
    (home / "local.json").write_text(json.dumps({
        "database_url": f"postgresql://reminders@127.0.0.1:{port}/reminders",
        "endpoint_url": "http://127.0.0.1:1", "region": "us-east-1", "queues": {},
        "receiver_url": "http://127.0.0.1:1", "receiver_secret": "x", "pgdata": str(tmp_path),
        "pids": {"postgres": os.getpid()}}))
    env = {**os.environ, "REMINDERS_HOME": str(home)}
    try:  # unbounded, it would wait on the silent server until this timeout fails the test
        done = subprocess.run([sys.executable, "-m", "reminders.cli", "__complete", "tenants"],
                              capture_output=True, text=True, timeout=60, env=env)
    finally:
        silent.close()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_without_a_local_stack_nothing_is_offered(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "REMINDERS_HOME": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "reminders.cli", "__complete", "kinds"],
                          capture_output=True, text=True, timeout=30, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_whatever_hangs_is_cut_off_at_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only the connection: a read that never returns ends at REMINDERS_COMPLETE_SECONDS."""
    import time

    from reminders.cli import meta
    from reminders.local import stack

    def hangs() -> None:
        time.sleep(60)

    monkeypatch.setattr(stack, "load", hangs)
    monkeypatch.setenv("REMINDERS_COMPLETE_SECONDS", "0.2")
    began = time.monotonic()
    assert meta.known_names("kinds") == []
    assert time.monotonic() - began < 30  # it would sleep 60 s unbounded
