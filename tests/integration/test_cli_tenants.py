"""``reminders tenants set``: a tenant's limits and the deployment's defaults, from a shell."""

from __future__ import annotations

from reminders import db, operator
from tests.bench.support import statement_reads
from tests.integration.cli_helpers import Cli

DUE = "2027-03-01T10:00:00Z"


def _schedule(cli: Cli, key: str, *recipients: str) -> tuple[int, str]:
    flags = [part for r in recipients for part in ("--recipient", r)]
    got = cli("schedule", "--tenant", "acme", *flags, "--channel", "email", "--at", DUE,
              "--key", key)
    return got.code, got.err.strip()


def test_a_tenant_s_limits_are_set_listed_and_enforced(cli: Cli) -> None:
    got = cli("tenants", "set", "acme", "--max-pending", "1", "--json")
    assert got.code == 3 and "pass --create" in got.err
    assert cli("tenants", "set", "acme", "--max-pending", "1", "--create", "--reason",
               "INC-9: a looping import", "--json").json() == {
        "tenant": "acme", "max_pending": 1, "schedules_per_minute": None, "changed": True}
    assert cli("tenants", "set", "acme", "--max-pending", "1", "--json").json()[
        "changed"] is False
    assert _schedule(cli, "one", "a@example.com") == (0, "")
    assert _schedule(cli, "two", "b@example.com") == (
        2, "reminders: error: tenant 'acme' is at its limit of 1 pending deliveries "
           "(max_pending): 1 pending, this call adds 1")
    assert cli("tenants", "set", "--default", "--schedules-per-minute", "7", "--json").json(
        ) == {"tenant": None, "max_pending": 1000000, "schedules_per_minute": 7,
              "changed": True}
    (acme,) = cli("tenants", "list", "--json").json()
    assert (acme["pending"], acme["max_pending"], acme["schedules_per_minute"],
            acme["default_limits"]) == (1, 1, 7, False)
    assert cli("tenants", "set", "acme", "--max-pending", "default").out.strip() == (
        "tenant acme: at most the default pending deliveries, the default schedules created "
        "a minute")
    assert _schedule(cli, "two", "b@example.com") == (0, "")


def test_bad_limits_are_refused_naming_the_flag(cli: Cli) -> None:
    got = cli("tenants", "set", "acme", "--max-pending", "lots", "--create")
    assert got.code == 2 and "--max-pending: expected a whole number or 'default', got 'lots'" \
        in got.err
    got = cli("tenants", "set", "acme", "--max-pending", "-1", "--create")
    assert (got.code, got.err.strip()) == (
        2, "reminders: error: max_pending: must be a whole number from 0 to 1000000000000, "
           "got -1")
    got = cli("tenants", "set", "--default", "--max-pending", "default")
    assert (got.code, got.err.strip()) == (
        2, "reminders: error: max_pending: the deployment's default must be a number")
    got = cli("tenants", "set", "acme", "--create")
    assert got.code == 2 and "give --max-pending, --schedules-per-minute or both" in got.err


def _copies(conn: db.Connection, key: str, count: int, state: str) -> None:
    """``count`` copies of schedule ``key`` in ``state``, each its own key: what years of an
    application's schedules leave (built by hand: the API would take minutes)."""
    columns = [r["column_name"] for r in conn.execute(
        "select column_name from information_schema.columns where table_name = 'schedules'"
        " and table_schema = current_schema() and column_name not in"
        " ('id', 'schedule_key', 'state') and is_generated = 'NEVER'").fetchall()]
    listed = ", ".join(columns)
    conn.execute(f"insert into schedules (schedule_key, state, {listed})"
                 f" select %s || g, %s, {listed} from schedules, generate_series(1, %s) g"
                 " where schedule_key = %s", (f"{key}-{state}-", state, count, key))
    conn.execute("analyze schedules")


def test_the_tenants_list_counts_active_schedules_up_to_a_bound(cli: Cli,
                                                                 conn: db.Connection) -> None:
    """Its schedule count is bounded per tenant (counted to COUNTED_SCHEDULES, then shown as
    more): a tenant with thousands of active schedules and many more ended ones costs the
    listing what the bound allows, never a read of every schedule it ever had."""
    assert _schedule(cli, "big", "a@example.com") == (0, "")
    cli("schedule", "--tenant", "small", "--recipient", "b@example.com", "--channel", "email",
        "--at", DUE, "--key", "small", "--json").json()
    _copies(conn, "big", 3 * operator.COUNTED_SCHEDULES, "active")
    _copies(conn, "big", 20_000, "cancelled")
    listed = {r["tenant"]: r for r in cli("tenants", "list", "--json").json()}
    assert (listed["acme"]["schedules"], listed["acme"]["schedules_more"]) == (
        operator.COUNTED_SCHEDULES, True)
    assert (listed["small"]["schedules"], listed["small"]["schedules_more"]) == (1, False)
    assert f"{operator.COUNTED_SCHEDULES}+" in cli("tenants", "list").out
    reads = statement_reads(conn, "tenants_list", {"limit": 1000,
                                                   "counted": operator.COUNTED_SCHEDULES})
    # The bound's entries of the big tenant and the small one's, the two tenant rows and
    # their kept counts; the 23,000 other schedules are never read.
    assert reads["rows_read"] <= operator.COUNTED_SCHEDULES + 50, reads
