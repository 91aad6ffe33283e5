"""``reminders local up`` / ``local down`` as a user runs them: the servers start in the
background, every later command finds them through ``REMINDERS_HOME`` alone, and ``down`` leaves
nothing running."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from reminders import db
from reminders.aws_http import Credentials
from reminders.errors import DatabaseUnavailable
from reminders.local import stack
from reminders.operator import STATES
from reminders.timezones import tzdata_version
from tests.integration.cli_helpers import Result, base_env

UP_SECONDS = 60
STACK_KEYS = {"database_url", "endpoint_url", "region", "queues", "receiver_url",
              "receiver_secret", "pgdata", "pids", "secrets_key_id", "direct_url",
              "administrator", "operator"}
FRESH_STATS = {"effects": {}, "requests": {}, "ok_answers": {}, "duplicates": 0,
               "bad_signatures": 0, "by_endpoint": {}}
DUE = "2027-03-01T09:05:00Z"


@dataclass
class Home:
    """A REMINDERS_HOME: the only reminders setting the commands get besides the clock."""

    root: Path
    env: dict[str, str]
    pids: set[int] = field(default_factory=set)  # every server pid `up` reported

    @property
    def path(self) -> Path:
        return Path(self.env["REMINDERS_HOME"]).resolve()

    def __call__(self, *args: str, now: str | None = None,
                 timeout: float = UP_SECONDS) -> Result:
        env = {**self.env, "REMINDERS_NOW": now} if now else self.env
        proc = subprocess.run([sys.executable, "-m", "reminders.cli", *args], env=env,
                              capture_output=True, text=True, timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def up(self) -> dict[str, Any]:
        started = time.monotonic()
        data: dict[str, Any] = self("local", "up", "--json").json()
        assert time.monotonic() - started < UP_SECONDS
        self.pids.update(data["pids"].values())
        return data

    def cleanup(self) -> None:
        """``down``, then anything a failed ``up`` or ``down`` may have left behind."""
        state = self.path / "local.json"
        if state.exists():
            self.pids.update(json.loads(state.read_text())["pids"].values())
        try:
            self("local", "down", timeout=30)
        finally:
            for pid in self.pids:
                if running(pid):
                    os.kill(pid, signal.SIGKILL)
            if (self.path / "pgdata" / "postmaster.pid").exists():
                stack.stop_postgres(self.path / "pgdata")
            shutil.rmtree(self.root, ignore_errors=True)


def new_home() -> Home:
    # Short and outside pytest's tmp dirs: Postgres puts its socket in the data directory, and a
    # concurrent pytest run may prune pytest's tmp dirs while the servers still use them.
    root = Path(tempfile.mkdtemp(prefix="reminders-local-"))
    # A login session's runtime dir: embedded Postgres keeps its lock file there (without one,
    # platformdirs warns on stderr and falls back to a directory shared by the whole machine).
    runtime_dir = root / "run"
    runtime_dir.mkdir(mode=0o700)
    return Home(root, {**base_env(root), "XDG_RUNTIME_DIR": str(runtime_dir)})


def exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def running(pid: int) -> bool:
    """The process exists and has not ended (a zombie has ended; only its reaping is due)."""
    if not exists(pid):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return not sys.platform.startswith("linux")  # no /proc to ask: it exists
    return state != "Z"


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def get_json(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, json.loads(response.read())


def postmaster_pid(home: Home) -> int:
    """The Postgres server's pid, as its data directory records it."""
    return int((home.path / "pgdata" / "postmaster.pid").read_text().split()[0])


def kill_postgres(home: Home) -> int:
    """kill -9 the postmaster (it cannot clean up), and wait until it has ended."""
    pid = postmaster_pid(home)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not running(pid)), pid
    return pid


def refuses(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


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


def test_up_reports_where_everything_runs(home: Home, running_stack: dict[str, Any]) -> None:
    s = running_stack
    assert set(s) == STACK_KEYS | {"restarted"}
    assert s["restarted"] == []
    pgdata = home.path / "pgdata"
    assert s["pgdata"] == str(pgdata)
    # Clients go through PgBouncer (the local RDS Proxy); databases are made on the server.
    assert s["direct_url"] == f"postgresql://postgres@/reminders?host={quote(str(pgdata), safe='')}"
    # A URL, which psql, psycopg and Node's pg read alike (pg reads `host=...` as a host name).
    assert re.fullmatch(r"postgresql://postgres@127\.0\.0\.1:\d+/reminders",
                        s["database_url"]), s["database_url"]
    assert s["region"] == "us-east-1"
    endpoint, receiver = s["endpoint_url"], s["receiver_url"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", endpoint), endpoint
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", receiver), receiver
    assert endpoint != receiver
    assert s["queues"] == {"deliveries": f"{endpoint}/123456789012/reminders-deliveries",
                           "dlq": f"{endpoint}/123456789012/reminders-dlq",
                           "parking": f"{endpoint}/123456789012/reminders-parking"}
    assert s["receiver_secret"].startswith("whsec_")
    assert set(s["pids"]) == {"moto", "receiver", "pooler"}
    assert all(running(pid) for pid in s["pids"].values())
    assert json.loads((home.path / "local.json").read_text()) == {
        k: v for k, v in s.items() if k != "restarted"}

    assert get_json(f"{receiver}/_stats") == (200, FRESH_STATS)
    assert get_json(f"{endpoint}/_reminders/health") == (200, {"status": "ok"})
    # moto's own API answers no one: its data.json would show the administrator's secret.
    for path in ("/moto-api/data.json", "/moto-api/", "/moto-api/reset-auth"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{endpoint}{path}", timeout=5)
        assert refused.value.code == 403, path
    admin = s["administrator"]
    stack.register_administrator(endpoint, Credentials(admin["access_key"], admin["secret_key"]))
    sqs = stack.aws_client("sqs", endpoint)
    # The template's queues: the three the stack records, and the schedule's invocation DLQ.
    schedule_dlq = f"{endpoint}/123456789012/reminders-schedule-invocation-dead-letter"
    assert sorted(sqs.list_queues()["QueueUrls"]) == sorted([*s["queues"].values(),
                                                            schedule_dlq])
    redrive = json.loads(sqs.get_queue_attributes(
        QueueUrl=s["queues"]["deliveries"], AttributeNames=["RedrivePolicy"])[
        "Attributes"]["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == "arn:aws:sqs:us-east-1:123456789012:reminders-dlq"
    key = stack.aws_client("kms", endpoint).describe_key(KeyId=s["secrets_key_id"])
    assert key["KeyMetadata"]["Arn"] == s["secrets_key_id"] and key["KeyMetadata"]["Enabled"]

    with db.connect(s["database_url"]) as conn:  # migrated
        assert conn.execute("select name from kinds").fetchall() == [{"name": "default"}]


def test_a_second_up_returns_the_running_stack(home: Home,
                                               running_stack: dict[str, Any]) -> None:
    started = time.monotonic()
    assert home.up() == running_stack
    assert time.monotonic() - started < 10
    text = home("local", "up")
    assert (text.code, text.err) == (0, "")
    assert text.out.splitlines()[0] == "local stack running:"
    assert f"  DATABASE_URL={running_stack['database_url']}" in text.out.splitlines()
    assert text.out.splitlines()[-1] == f"  webhook receiver: {running_stack['receiver_url']}"
    assert text.out.splitlines()[-2] == (
        f"  webhook receiver secret: {running_stack['receiver_secret']}")


def test_commands_find_the_running_stack_through_reminders_home(
        home: Home, running_stack: dict[str, Any]) -> None:
    settings = [k for k in home.env if k.startswith(("REMINDERS_", "AWS_", "DATABASE_"))]
    assert settings == ["REMINDERS_HOME"]
    first = stack.decision_count(running_stack["endpoint_url"])
    before = datetime.now(UTC)
    status = home("status", "--json").json()
    after = datetime.now(UTC)
    assert status["by_state"] == dict.fromkeys(STATES, 0)
    assert (status["total"], status["by_channel"], status["tzdata"]) == (0, {}, tzdata_version())
    idle = {"visible": 0, "in_flight": 0}
    assert status["queues"] == {"deliveries": idle, "dlq": idle, "parking": idle}
    stamp = datetime.fromisoformat(status["now"])
    assert status["now"].endswith("Z")
    assert before - timedelta(seconds=1) <= stamp <= after + timedelta(seconds=1)

    # The whole path on that stack: its database, its queues on moto, its receiver.
    url = f"{running_stack['receiver_url']}/hooks/local"
    home("endpoints", "add", url, "--secret", running_stack["receiver_secret"], "--json").json()
    scheduled = home("schedule", "--tenant", "acme", "--recipient", "alice", "--channel",
                     "webhook", "--to", url, "--at", DUE, "--key", "k1", "--json",
                     now="2027-03-01T09:00:00Z").json()
    key = scheduled["delivery_key"]
    seen = stack.decision_count(running_stack["endpoint_url"])
    # status read the queues and endpoints add sealed the secret as the stack's operator, an
    # IAM user holding the documented operator-direct policy, never as the administrator.
    operator_key = running_stack["operator"]["access_key"]
    assert operator_key != running_stack["administrator"]["access_key"]
    own = {(d["action"], d["outcome"]) for d in
           stack.decisions(running_stack["endpoint_url"], since=first)[:seen - first]
           if d["key"] == operator_key}
    assert own == {("sqs:GetQueueAttributes", "allowed"), ("kms:GenerateDataKey", "allowed")}
    tick = home("tick", "--json", now=DUE).json()
    assert (tick["leased"], tick["published"]) == (1, 1)
    work = home("work", "--json", "--max-seconds", "20", now=DUE).json()
    assert work["idle"] is True
    assert work["consumer"] == {"batches": 1, "records": 1, "failures": 0, "errors": 0,
                                "first_error": None, "last_error": None}
    assert get_json(f"{running_stack['receiver_url']}/_stats")[1]["effects"] == {key: 1}
    # The functions ran as their roles, each with a key of its own (not the administrator's),
    # and moto allowed every call.
    calls = stack.decisions(running_stack["endpoint_url"], since=seen)
    assert [d for d in calls if d["outcome"] != "allowed"] == []
    keys = {d["action"]: d["key"] for d in calls if d["action"].startswith("sqs:")}
    sent, deleted = keys["sqs:SendMessage"], keys["sqs:DeleteMessage"]
    assert running_stack["administrator"]["access_key"] not in (sent, deleted)
    assert sent != deleted  # the scanner's role, the consumer's role
    assert home("show", key, "--json").json()["state"] == "sent"
    assert home("status", "--json").json()["by_state"] == {**dict.fromkeys(STATES, 0),
                                                           "sent": 1}


def test_up_starts_a_killed_postgres_again_on_the_same_database_url(
        home: Home, running_stack: dict[str, Any]) -> None:
    url = running_stack["database_url"]
    with db.connect(url) as conn:
        conn.execute("create table before_the_kill as select 1 as n")
    killed = kill_postgres(home)
    # The pooler still takes the connection (as RDS Proxy does); its first statement fails.
    with pytest.raises(DatabaseUnavailable), db.connect(url) as conn:
        db.fetch_one(conn, "ping")

    text = home("local", "up")
    assert (text.code, text.err) == (0, "")
    lines = text.out.splitlines()
    assert lines[:2] == ["restarted postgres: it was not running (same data directory, "
                         "same DATABASE_URL)", "local stack running:"]
    assert f"  DATABASE_URL={url}" in lines
    assert postmaster_pid(home) != killed
    assert running(postmaster_pid(home))
    with db.connect(url) as conn:  # what was committed before the kill is there
        assert conn.execute("select n from before_the_kill").fetchall() == [{"n": 1}]
        conn.execute("drop table before_the_kill")
    assert set(home("status", "--json").json()["by_state"]) == set(STATES)

    # Only Postgres was started again: the same moto and receiver, and nothing more to do.
    assert home.up() == running_stack


def test_down_stops_everything_and_a_second_down_finds_nothing() -> None:
    h = new_home()
    try:
        s = h.up()
        pids = list(s["pids"].values())
        assert all(running(pid) for pid in pids)

        down = h("local", "down")
        assert (down.code, down.out, down.err) == (0, "local stack stopped\n", "")
        assert wait_until(lambda: not any(running(pid) for pid in pids)), pids
        assert refuses(f"{s['receiver_url']}/_stats")
        assert refuses(f"{s['endpoint_url']}/_reminders/health")
        assert not (h.path / "pgdata" / "postmaster.pid").exists()
        assert not (h.path / "local.json").exists()

        again = h("local", "down")
        assert (again.code, again.out, again.err) == (0, "nothing was running\n", "")
        assert h("local", "down", "--json").json() == {"stopped": False, "not_running": []}
        nothing = h("status", "--json")
        assert (nothing.code, nothing.out) == (2, "")
        assert nothing.err == (
            "reminders: error: no database configured: set DATABASE_URL, or REMINDERS_DB_HOST "
            "with REMINDERS_DB_SECRET_ARN (run `reminders local up` for a local one)\n")
    finally:
        h.cleanup()


def test_down_after_postgres_was_killed_stops_the_rest_and_forgets_the_stack() -> None:
    h = new_home()
    try:
        s = h.up()
        kill_postgres(h)

        down = h("local", "down")
        assert (down.code, down.err) == (0, "")
        assert down.out == ("postgres was not running (removed the postmaster.pid it left)\n"
                            "local stack stopped\n")
        assert not (h.path / "local.json").exists()
        assert not (h.path / "pgdata" / "postmaster.pid").exists()
        assert wait_until(lambda: not any(running(pid) for pid in s["pids"].values()))
        assert h("local", "down", "--json").json() == {"stopped": False, "not_running": []}

        # And `up` starts over on the same data directory.
        again = h.up()
        assert (again["database_url"], again["restarted"]) == (s["database_url"], [])
        with db.connect(again["database_url"]) as conn:
            assert conn.execute("select name from kinds").fetchall() == [{"name": "default"}]
    finally:
        h.cleanup()


def test_up_after_a_server_died_leaves_only_the_new_servers_running() -> None:
    h = new_home()
    try:
        first = h.up()
        os.kill(first["pids"]["receiver"], signal.SIGTERM)
        assert wait_until(lambda: not exists(first["pids"]["receiver"]))  # ended and reaped

        second = h.up()
        assert second["restarted"] == ["receiver"]  # the rest still answered
        assert second["database_url"] == first["database_url"]
        assert second["pids"]["moto"] == first["pids"]["moto"]
        assert second["queues"] == first["queues"]
        # Endpoints registered with the old receiver's secret still verify.
        assert second["receiver_secret"] == first["receiver_secret"]
        assert get_json(f"{second['receiver_url']}/_stats") == (200, FRESH_STATS)
        assert [pid for pid in first["pids"].values()
                if running(pid) and pid not in second["pids"].values()] == []
    finally:
        h.cleanup()
