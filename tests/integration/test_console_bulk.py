"""The console's bulk actions act on exactly the keys they counted or that were selected: a
row that comes to match between the count and the action (and sorts before the counted ones)
is never acted on in their place, and every counted key not acted on is named with why."""

from __future__ import annotations

from datetime import UTC, datetime

from reminders import db, operator
from tests.integration.cli_helpers import Cli

NOW = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)


def _schedule(cli: Cli, key: str, at: str, recipients: str) -> list[str]:
    got = cli("schedule", "--tenant", "acme", "--channel", "email", "--at", at, "--key", key,
              "--recipients", recipients, "--json").json()
    return [d["delivery_key"] for d in got["deliveries"]]


def test_at_most_n_acts_on_exactly_the_counted_keys_when_an_earlier_row_starts_matching(
        cli: Cli, conn: db.Connection) -> None:
    counted_keys = _schedule(cli, "late", "2027-03-01T09:30:00Z", "a@x.example,b@x.example")
    early = _schedule(cli, "early", "2027-03-01T09:05:00Z", "c@x.example")[0]
    conn.execute("update deliveries set state = 'dead', reason = 'retry budget spent' "
                 "where delivery_key = any(%s)", (counted_keys,))
    dry = operator.reconcile_bulk(conn, state="dead", target="retry", reason="counting",
                                  limit=2, now=NOW, actor="ops", via="console", tenant="acme",
                                  dry_run=True)
    counted = [d["delivery_key"] for d in dry["would_reconcile"]]
    assert sorted(counted) == sorted(counted_keys)
    # Between the count and the action a row due earlier comes to match the filter.
    conn.execute("update deliveries set state = 'dead', reason = 'retry budget spent' "
                 "where delivery_key = %s", (early,))
    done = operator.reconcile_bulk(conn, state="dead", target="retry", reason="fixed",
                                   limit=2, now=NOW, actor="ops", via="console",
                                   tenant="acme", only_keys=counted)
    assert sorted(d["delivery_key"] for d in done["reconciled"]) == sorted(counted)
    assert done["not_acted_on"] == []
    assert done["changed_since_counted"] == 0
    states = {r["delivery_key"]: r["state"] for r in conn.execute(
        "select delivery_key, state from deliveries").fetchall()}
    assert {k: states[k] for k in counted} == dict.fromkeys(counted, "scheduled")
    assert states[early] == "dead"  # it was not counted: left alone


def test_a_counted_key_that_changed_is_named_with_why(cli: Cli, conn: db.Connection) -> None:
    keys = _schedule(cli, "late", "2027-03-01T09:30:00Z", "a@x.example,b@x.example")
    conn.execute("update deliveries set state = 'dead', reason = 'retry budget spent'")
    moved = keys[0]
    conn.execute("update deliveries set state = 'sent', reason = null where delivery_key = %s",
                 (moved,))
    done = operator.reconcile_bulk(conn, state="dead", target="retry", reason="fixed",
                                   limit=3, now=NOW, actor="ops", via="console",
                                   tenant="acme", only_keys=[*keys, "no-such-key"])
    assert [d["delivery_key"] for d in done["reconciled"]] == [keys[1]]
    assert done["not_acted_on"] == [
        {"delivery_key": moved, "why": "it is sent now, not dead"},
        {"delivery_key": "no-such-key", "why": "no such delivery of tenant acme"}]
    assert done["changed_since_counted"] == 2
