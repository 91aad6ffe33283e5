"""No error is a bug report, where the database and the queues are involved: a terminal or pipe
that takes only ASCII still gets the output, and ``work`` with Postgres down says so in one line
on stderr, with the exit status its help documents, never a traceback."""

from __future__ import annotations

import json
from uuid import UUID

from reminders import config
from reminders.local import stack
from reminders.queue import LeaseMessage
from tests.integration.cli_helpers import Cli

TOKEN = UUID("6f1c2a3e-8d5b-4c7a-9e0f-1a2b3c4d5e6f")
SCHEDULE = ("schedule", "--tenant", "acme", "--recipient", "josé.ñúñez@example.com",
            "--channel", "email", "--at", "2027-03-01T10:00:00Z", "--key", "ascii-1")


def test_an_ascii_only_stdout_gets_json_escapes_and_text_escapes(cli: Cli) -> None:
    as_json = cli(*SCHEDULE, "--json", PYTHONIOENCODING="ascii")
    assert (as_json.code, as_json.err) == (0, "")
    assert as_json.out.isascii()
    assert json.loads(as_json.out)["deliveries"][0]["recipient"] == "josé.ñúñez@example.com"

    as_text = cli(*SCHEDULE, PYTHONIOENCODING="ascii")
    assert (as_text.code, as_text.err) == (0, "")
    assert "jos\\xe9.\\xf1\\xfa\\xf1ez@example.com" in as_text.out


def test_work_with_postgres_down_is_one_line_and_exit_4_without_a_traceback(
        aws_cli: Cli, queue_urls: config.QueueUrls, moto_endpoint: str,
        as_lambda: dict[str, str]) -> None:
    stack.aws_client("sqs", moto_endpoint).send_message(
        QueueUrl=queue_urls.deliveries, MessageBody=LeaseMessage(1, TOKEN).body())
    dead = f"postgresql://nobody:x@127.0.0.1:{stack.free_port()}/nothing"
    result = aws_cli("work", "--max-seconds", "2", DATABASE_URL=dead, **as_lambda)

    assert result.code == 4, result.err  # an invocation raised: the documented status
    assert "Traceback" not in result.err, result.err
    assert "Traceback" not in result.out
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("reminders: work: partial failure: ")
    assert "DatabaseUnavailable: cannot connect to Postgres" in last
