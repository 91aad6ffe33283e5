"""Every function and trigger function the service defines resolves its names in the service's
schema, whatever the search path of the session that runs it: an administrator's manual fix in
psql (the default search path, ``"$user", public``) in a database where an application login
may create in ``public`` writes the service's tables only, and never runs what that login put
there under the same names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from reminders import db, schedules
from reminders.config import DEFAULT_SCHEMA
from reminders.db.queries import CHECKS
from tests.conftest import T0, PgCluster

OPERATOR_ACCESS = Path(__file__).resolve().parents[2] / "docs" / "operator-access.md"
DEFAULT_SEARCH_PATH = '"$user",public'  # Postgres's default (no space: a startup option)
STARTUP_OPTION = f"-c search_path={DEFAULT_SEARCH_PATH}"


def manual_fix_recipe() -> tuple[list[str], str]:
    """The fix by hand of docs/operator-access.md: psql's ``-v`` options and the SQL it is fed."""
    text = OPERATOR_ACCESS.read_text()
    found = re.search(r"\*\*A fix by hand\.\*\*.*?```sh\n(?P<cmd>.*?)<<'SQL'\n"
                      r"(?P<sql>.*?)\nSQL\n```", text, re.S)
    assert found is not None, "docs/operator-access.md's 'A fix by hand' recipe is missing"
    options = re.findall(r"-v (\S+?)='?([^' \n]+)'?(?=\s)", found["cmd"])
    return [f"{name}={value}" for name, value in options], found["sql"] + "\n"


@dataclass(frozen=True)
class Application:
    login: str
    url: str
    admin_url: str  # the migrating login, on the server itself (psql through a port-forward)


@pytest.fixture
def application(pg_cluster: PgCluster, conn: db.Connection) -> Iterator[Application]:
    """An application's login that may create in ``public`` (as every login could before
    Postgres 15, and as an application that owns its database can)."""
    login = f"app_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    role = sql.Identifier(login)
    conn.execute(sql.SQL("create role {} login password 'pw'").format(role))
    conn.execute(sql.SQL("grant create, usage on schema public to {}").format(role))
    name = conn.execute("select current_database() as d").fetchone()
    assert name is not None
    direct = make_conninfo(pg_cluster.direct, dbname=name["d"])
    yield Application(login, make_conninfo(direct, user=login, password="pw"), direct)
    conn.execute(sql.SQL("drop owned by {}").format(role))
    conn.execute(sql.SQL("drop role {}").format(role))


def plant_lookalikes(app: Application) -> None:
    """Tables in ``public`` named as the service's, each recording who writes it."""
    with psycopg.connect(app.url, autocommit=True) as c:
        c.execute("create table public.captured (who text, what text)")
        c.execute("grant insert on public.captured to public")
        for table, columns in (
                ("due_queue", "id bigint primary key, tenant text, state text,"
                              " due_at timestamptz, token uuid, expires_at timestamptz"),
                ("delivery_counts", "tenant text, kind text, channel text, state text,"
                                    " shard integer, n bigint,"
                                    " primary key (tenant, kind, channel, state, shard)"),
                ("schedules", "id bigint primary key, kind text")):
            c.execute(f"create table public.{table} ({columns})")
            c.execute(f"grant all on public.{table} to public")
        c.execute("""
            create function public.capture() returns trigger language plpgsql as $$
            begin
                insert into public.captured values (current_user, tg_table_name);
                return null;
            end $$""")
        for table in ("due_queue", "delivery_counts", "schedules"):
            c.execute(f"create trigger capture after insert or update or delete on"
                      f" public.{table} for each statement execute function public.capture()")


def run_recipe(direct_url: str, key: str) -> str:
    options, script = manual_fix_recipe()
    options = [o if not o.startswith("key=") else f"key={key}" for o in options]
    psql = shutil.which("psql")
    env = {**os.environ, "PGOPTIONS": STARTUP_OPTION}
    if psql is None:  # the same statements through psycopg, psql's variable substituted
        with psycopg.connect(direct_url, autocommit=True,
                             options=STARTUP_OPTION) as c:
            c.execute(script.replace(":'key'", sql.quote(key)).encode())
        return ""
    argv = [psql, direct_url, "-X"]
    for option in options:
        argv += ["-v", option]
    argv += ["-c", "show search_path", "-f", "-"]
    done = subprocess.run(argv, input=script, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


@pytest.mark.parametrize("lookalikes", [False, True], ids=["nothing-in-public",
                                                           "lookalikes-in-public"])
def test_the_readme_manual_fix_runs_on_the_default_search_path_and_touches_only_the_service(
        conn: db.Connection, application: Application, lookalikes: bool) -> None:
    """Without anything in public, the old triggers failed (relation "due_queue" does not
    exist); with an application's tables of the same names there, they wrote those, and ran
    that application's trigger with the administrator's rights."""
    result = schedules.schedule(conn, tenant="acme", recipients=["ann@example.com"],
                                channel="email", at=T0, now=T0, key="trip-42")
    key = result.deliveries[0].delivery_key
    if lookalikes:
        plant_lookalikes(application)
    out = run_recipe(application.admin_url, key)
    if shutil.which("psql") is not None:
        assert DEFAULT_SEARCH_PATH in out and "UPDATE 1" in out, out

    row = conn.execute("select d.due_at, d.updated_at, q.due_at as entry_due_at"
                       " from deliveries d join due_queue q on q.id = d.id"
                       " where d.delivery_key = %s", (key,)).fetchone()
    assert row is not None and row["due_at"] == row["entry_due_at"] != T0
    assert db.fetch_all(conn, "check_due_queue", source=CHECKS) == []
    assert db.fetch_all(conn, "check_delivery_counts", source=CHECKS) == []
    if not lookalikes:
        return
    with psycopg.connect(application.url, autocommit=True) as app:
        assert app.execute("select * from public.captured").fetchall() == []
        assert app.execute("select count(*) from public.due_queue").fetchone() == (0,)
        assert app.execute("select count(*) from public.delivery_counts").fetchone() == (0,)


def test_every_function_of_the_service_has_its_own_search_path(conn: db.Connection) -> None:
    """Each function resolves names in the schema first, then pg_temp last (pg_catalog is
    searched first when it is not named): a session's search path never reaches it."""
    rows = conn.execute(
        "select p.proname, p.proconfig from pg_proc p"
        " join pg_namespace n on n.oid = p.pronamespace where n.nspname = %s"
        " order by p.proname", (DEFAULT_SCHEMA,)).fetchall()
    assert rows, "no functions in the service's schema"
    wrong = [(r["proname"], r["proconfig"]) for r in rows
             if r["proconfig"] != [f"search_path={DEFAULT_SCHEMA}, pg_temp"]]
    assert wrong == []
