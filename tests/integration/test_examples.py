"""The booking-plus-reminder examples of docs/scheduling-sql.md run as written, each as an
application login granted ``reminders_client``: SQL through psql (through psycopg when psql is
absent), Python, and Node.js with pg where Node is installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reminders import db
from tests.integration.test_local_stack import Home, new_home
from tests.integration.test_readme_walkthrough import run_script, walkthrough_commands

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "scheduling-sql.md"
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class App:
    login: str
    url: str


@pytest.fixture
def app(database_url: str) -> Iterator[App]:
    login = f"booking_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(login)
    with db.connect(database_url) as admin:
        admin.execute(sql.SQL("create role {} login password 'pw'").format(role))
        admin.execute(sql.SQL("grant reminders_client to {}").format(role))
        admin.execute(sql.SQL("grant create on schema public to {}").format(role))
        admin.execute("select grant_tenant(%s, 'acme')", (login,))
        yield App(login, make_conninfo(database_url, user=login, password="pw"))
        admin.execute(sql.SQL("drop owned by {}").format(role))
        admin.execute(sql.SQL("drop role {}").format(role))


def booked(database_url: str, booking: int) -> list[tuple[str, str, str]]:
    with db.connect(database_url) as conn:
        rows = conn.execute(
            "select s.tenant, s.schedule_key, d.state from schedules s"
            " join deliveries d on d.schedule_id = s.id where s.schedule_key = %s",
            (f"booking-{booking}",)).fetchall()
        guests = conn.execute("select guest from public.bookings where id = %s",
                              (booking,)).fetchall()
    assert guests == [{"guest": "alice@example.com"}]
    return [(r["tenant"], r["schedule_key"], r["state"]) for r in rows]


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run(argv, env={**os.environ, **env}, cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def test_the_sql_example(app: App, database_url: str) -> None:
    script = EXAMPLES / "booking.sql"
    psql = shutil.which("psql")
    if psql is not None:
        out = run([psql, app.url, "-X", "-v", "ON_ERROR_STOP=1", "-v", "booking=101",
                   "-f", str(script)], {})
        assert "booking-101" in out
    else:  # the same statements, psql's meta-commands aside
        text = "\n".join(line for line in script.read_text().splitlines()
                         if not line.startswith("\\"))
        with psycopg.connect(app.url, autocommit=True) as conn:
            conn.execute(re.sub(r":booking\b", "101", text).encode())
    assert booked(database_url, 101) == [("acme", "booking-101", "scheduled")]


def test_the_python_example(app: App, database_url: str) -> None:
    out = run([sys.executable, str(EXAMPLES / "booking.py"), "102"],
              {"DATABASE_URL": app.url})
    assert out.startswith("booking-102\tTrue\talice@example.com\tschedule:")
    assert booked(database_url, 102) == [("acme", "booking-102", "scheduled")]
    # The same booking again fails on the application's own key, and so schedules nothing.
    again = subprocess.run([sys.executable, str(EXAMPLES / "booking.py"), "102"],
                           env={**os.environ, "DATABASE_URL": app.url}, capture_output=True,
                           text=True, timeout=60, check=False)
    assert again.returncode != 0 and "bookings_pkey" in again.stderr
    assert booked(database_url, 102) == [("acme", "booking-102", "scheduled")]


@pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                    reason="Node.js is not installed")
def test_the_node_example(app: App, database_url: str, tmp_path: Path) -> None:
    copy = tmp_path / "node"
    shutil.copytree(EXAMPLES / "node", copy, ignore=shutil.ignore_patterns("node_modules"))
    run(["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline"], {}, cwd=copy)
    out = run(["node", "booking.js", "103"], {"DATABASE_URL": db.as_url(app.url)}, cwd=copy)
    assert out.startswith("booking-103\ttrue\talice@example.com\tschedule:")
    assert booked(database_url, 103) == [("acme", "booking-103", "scheduled")]


@pytest.fixture
def home() -> Iterator[Home]:
    h = new_home()
    yield h
    h.cleanup()


@pytest.mark.skipif(shutil.which("psql") is None or shutil.which("node") is None
                    or shutil.which("npm") is None,
                    reason="the example steps use psql, Node.js and npm")
def test_the_example_steps_run_as_written(home: Home, tmp_path: Path) -> None:
    """The marked block of docs/scheduling-sql.md, as a new user types it against `reminders
    local up`: the URL `local up --env` prints works unchanged in psql, psycopg and Node's pg,
    and the application login needs exactly the grants the block gives it (and its
    password)."""
    commands = walkthrough_commands(PAGE.read_text(), "<!-- examples:")
    work = tmp_path / "clone"
    shutil.copytree(EXAMPLES, work / "examples", ignore=shutil.ignore_patterns("node_modules"))
    after = ["printenv DATABASE_URL", "reminders local down"]
    steps = run_script([*commands, *after], home, work)
    for step in steps:
        assert step.code == 0, (step.command, step.out, step.err)
    assert len(steps) == len(commands) + len(after), [s.command for s in steps]

    def out(fragment: str) -> str:
        (step,) = [s for s in steps if fragment in s.command]
        return step.out

    assert out("printenv").startswith("postgresql://")
    assert "booking-42" in out("examples/booking.sql")
    assert out("examples/booking.py").startswith("booking-43\tTrue\talice@example.com\tschedule:")
    assert out("node booking.js").splitlines()[-1].startswith(
        "booking-44\ttrue\talice@example.com\tschedule:")


def test_a_wrong_password_is_refused_by_the_local_stack(app: App) -> None:
    """The local Postgres (through its pooler, as every client reaches it) authenticates an
    application login by its password, as RDS does."""
    with psycopg.connect(app.url) as conn:
        assert conn.execute("select current_user").fetchone() == (app.login,)
    with pytest.raises(psycopg.OperationalError, match="authentication failed"):
        psycopg.connect(make_conninfo(app.url, password="not-its-password")).close()
