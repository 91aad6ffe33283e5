"""``reminders tick`` and ``reminders work`` on the stack ``reminders local up`` runs: the
template's functions from their built assets, each in processes of their own (the local
stack's twin), the handlers in the command's own process only where asked, and then said."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.cli_helpers import Result
from tests.integration.test_local_stack import Home, new_home

DUE = "2027-03-01T09:05:00Z"
FALLBACK = "the handlers run in this process, not on the twin"


@pytest.fixture(scope="module")
def home() -> Iterator[Home]:
    h = new_home()
    try:
        yield h
    finally:
        h.cleanup()


@pytest.fixture(scope="module")
def running_stack(home: Home) -> dict[str, Any]:
    return home.up()


def schedule(home: Home, stack_info: dict[str, Any], key: str) -> str:
    url = f"{stack_info['receiver_url']}/hooks/twin"
    home("endpoints", "add", url, "--secret", stack_info["receiver_secret"], "--json")
    scheduled = home("schedule", "--tenant", "acme", "--recipient", "alice", "--channel",
                     "webhook", "--to", url, "--at", DUE, "--key", key, "--json",
                     now="2027-03-01T09:00:00Z").json()
    return str(scheduled["delivery_key"])


def logs(home: Home) -> dict[str, int]:
    """How many function processes of each function wrote a log on the twin."""
    found: dict[str, int] = {}
    for path in (home.path / "twin" / "logs").glob("*.log"):
        name = path.name.split("-")[0]
        found[name] = found.get(name, 0) + 1
    return found


def test_tick_and_work_run_the_templates_functions_in_processes_of_their_own(
        home: Home, running_stack: dict[str, Any]) -> None:
    key = schedule(home, running_stack, "twin-1")
    tick = home("tick", "--json", now=DUE)
    assert tick.code == 0, tick.err
    assert FALLBACK not in tick.err
    assert (tick.json()["leased"], tick.json()["published"]) == (1, 1)
    # The scanner read the command's clock (REMINDERS_NOW), handed to its process in a file.
    assert tick.json()["now"].startswith("2027-03-01T09:05:00")
    work = home("work", "--json", "--max-seconds", "30", now=DUE)
    assert work.code == 0, work.err
    assert work.json()["idle"] is True and work.json()["consumer"]["records"] == 1
    assert home("show", key, "--json").json()["state"] == "sent"
    ran = logs(home)
    assert ran.get("scanner", 0) >= 1 and ran.get("consumer", 0) >= 1, ran
    assert ran.get("migrate", 0) >= 1, ran  # the custom resource's event, on the first command
    # Each command's clock file is gone with it, and every function process ended.
    assert not list((home.path / "twin").glob("clock-*"))
    assert not _function_processes(str(home.path))


def test_in_process_when_asked_and_then_said(home: Home, running_stack: dict[str, Any]) -> None:
    env = {**home.env, "REMINDERS_LOCAL_FUNCTIONS": "in-process", "REMINDERS_NOW": DUE}
    proc = subprocess.run([sys.executable, "-m", "reminders.cli", "tick", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    done = Result(proc.returncode, proc.stdout, proc.stderr)
    assert done.code == 0, done.err
    assert done.err.splitlines()[-1] == (f"reminders: tick: {FALLBACK}: "
                                         "REMINDERS_LOCAL_FUNCTIONS=in-process")


def test_local_serve_delivers_on_the_wall_clock_and_stops_on_sigint(
        home: Home, running_stack: dict[str, Any]) -> None:
    """``reminders local serve``: a webhook due now, scheduled with no clock set, is delivered
    at the stack's receiver with no ``reminders work`` by hand (the rule's first firing at
    once, the consumer's mapping polled); SIGINT ends it within 10 s, exit status 0, with its
    function processes."""
    url = f"{running_stack['receiver_url']}/hooks/serve"
    home("endpoints", "add", url, "--secret", running_stack["receiver_secret"], "--json")
    due = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    scheduled = home("schedule", "--tenant", "acme", "--recipient", "bea", "--channel",
                     "webhook", "--to", url, "--at", due, "--key", "serve-1", "--json")
    assert scheduled.code == 0, scheduled.err
    key = str(scheduled.json()["delivery_key"])
    proc = subprocess.Popen([sys.executable, "-m", "reminders.cli", "local", "serve"],
                            env=home.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        state = None
        for _ in range(120):  # until it is sent, or the serve ended, at most 2 minutes
            state = home("show", key, "--json").json()["state"]
            if state == "sent" or proc.poll() is not None:
                break
            time.sleep(1)
        received = json.loads(urllib.request.urlopen(
            f"{running_stack['receiver_url']}/_stats", timeout=10).read())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert state == "sent", (state, err)
    assert received["effects"].get(key) == 1, received
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("serving the local stack"), out
    assert any("tick: leased 1, published 1" in line for line in lines), out
    assert lines[-1].startswith("stopped on SIGINT: "), out
    assert not _function_processes(str(home.path))


def test_local_serve_refuses_without_a_local_stack() -> None:
    bare = new_home()
    try:
        refused = bare("local", "serve", timeout=30)
    finally:
        bare.cleanup()
    assert refused.code == 5, (refused.out, refused.err)
    assert "no local stack is running" in refused.err
    assert "`reminders local up`" in refused.err


def _function_processes(home: str) -> list[int]:
    """The runtime interface client's processes whose environment names ``home`` (the twin's
    log and clock files are under it)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read()
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if b"awslambdaric" in command and home.encode() in environ:
            found.append(int(entry.name))
    return found
