"""``reminders tenants set``: a tenant's limits and the deployment's defaults, from a shell."""

from __future__ import annotations

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
