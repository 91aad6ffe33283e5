"""``reminders work`` tells a partial failure apart from success: exit status 4, the counts and
the first error reason on stderr, and the same JSON on stdout with keys only added."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

from reminders import config
from reminders.local import stack
from reminders.queue import LeaseMessage
from tests.integration.cli_helpers import Cli, base_env

TOKEN = UUID("6f1c2a3e-8d5b-4c7a-9e0f-1a2b3c4d5e6f")
OLD_KEYS = {"batches", "records", "failures"}


def put(moto_endpoint: str, url: str, body: str) -> None:
    stack.aws_client("sqs", moto_endpoint).send_message(QueueUrl=url, MessageBody=body)


def test_work_exits_4_when_records_fail(aws_cli: Cli, queue_urls: config.QueueUrls,
                                        moto_endpoint: str, as_lambda: dict[str, str]) -> None:
    # Nobody can read it: the consumer fails it twice (maxReceiveCount), redrive parks it.
    put(moto_endpoint, queue_urls.deliveries, "{not json")
    result = aws_cli("work", "--json", "--max-seconds", "20", **as_lambda)

    assert result.code == 4, result.err
    out = json.loads(result.out)
    assert out["idle"] is True
    assert set(out["consumer"]) >= OLD_KEYS and set(out["redrive"]) >= OLD_KEYS
    assert out["consumer"] == {"batches": 2, "records": 2, "failures": 2, "errors": 0,
                               "first_error": None, "last_error": None}
    assert out["redrive"]["records"] == 1 and out["redrive"]["failures"] == 0
    assert (out["failed_records"], out["invocation_errors"]) == (2, 0)
    last = result.err.strip().splitlines()[-1]
    assert last == ("reminders: work: partial failure: consumer 2 of 2 records failed, "
                    "0 invocations raised; redrive 0 of 1 records failed, 0 invocations "
                    "raised; the handlers' log lines above say why")
    assert "malformed message" in result.err  # the consumer's own log line, with the reason


def test_work_exits_4_when_an_invocation_raises(aws_cli: Cli, queue_urls: config.QueueUrls,
                                                moto_endpoint: str,
                                                as_lambda: dict[str, str]) -> None:
    put(moto_endpoint, queue_urls.deliveries, LeaseMessage(1, TOKEN).body())
    dead = f"postgresql://nobody:x@127.0.0.1:{stack.free_port()}/nothing"
    result = aws_cli("work", "--max-seconds", "2", DATABASE_URL=dead, **as_lambda)

    assert result.code == 4, result.err
    assert "queues not empty" in result.out
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("reminders: work: partial failure: consumer ")
    assert "first error: consumer: DatabaseUnavailable: cannot connect to Postgres" in last
    assert last.endswith("; the queues did not empty within 2s")
    logged = [json.loads(line) for line in result.err.splitlines() if line.startswith("{")]
    failed = [r for r in logged if r.get("message") == "invocation failed"]
    assert failed and failed[0]["error_type"] == "DatabaseUnavailable"
    assert failed[0]["function"] == "consumer"


def test_work_exits_0_and_writes_nothing_to_stderr_when_all_went_well(
        aws_cli: Cli, queue_urls: config.QueueUrls, as_lambda: dict[str, str]) -> None:
    result = aws_cli("work", "--json", "--max-seconds", "10", **as_lambda)
    assert (result.code, result.err) == (0, "")
    out = json.loads(result.out)
    assert out["idle"] is True and (out["failed_records"], out["invocation_errors"]) == (0, 0)


def test_work_help_explains_its_exit_statuses(tmp_path: Path) -> None:
    result = Cli(base_env(tmp_path))("work", "--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert "4 some records failed or an invocation raised" in text
    assert "1 the queues did not empty within the bounds" in text


def test_status_shows_the_alarms_tick_and_work_evaluated(aws_cli: Cli, queue_urls: config.QueueUrls,
                                                         moto_endpoint: str,
                                                as_lambda: dict[str, str]) -> None:
    """On a local moto, `work` and `tick` evaluate the template's alarms and keep them in
    REMINDERS_HOME; `status` (and its JSON) names the ones in ALARM."""
    put(moto_endpoint, queue_urls.deliveries, "{not json")
    assert aws_cli("work", "--max-seconds", "20", now="2027-03-01T09:00:10Z", **as_lambda).code == 4
    quiet = aws_cli("status", "--json", now="2027-03-01T09:00:20Z").json()["alarms"]
    assert quiet["available"] is True and quiet["in_alarm"] == []  # its minute is not over
    assert aws_cli("tick", now="2027-03-01T09:01:05Z", **as_lambda).code == 0

    data = aws_cli("status", "--json", now="2027-03-01T09:01:10Z").json()["alarms"]
    assert data["evaluated_at"] == "2027-03-01T09:01:00Z"
    assert [a["name"] for a in data["in_alarm"]] == ["ParkingQueueNotEmpty"]
    assert data["in_alarm"][0]["since"] == "2027-03-01T09:01:00Z"
    text = aws_cli("status", now="2027-03-01T09:01:10Z").out
    assert "alarms in ALARM (evaluated 2027-03-01T09:01:00Z):\n  ParkingQueueNotEmpty since " \
           "2027-03-01T09:01:00Z: Threshold Crossed: 1 of 1 datapoints [1] were " \
           "GreaterThanOrEqualToThreshold 1" in text
    # Five minutes on, the redrive function's invocation (the DLQ arrival) has its period.
    assert aws_cli("tick", now="2027-03-01T09:05:05Z", **as_lambda).code == 0
    data = aws_cli("status", "--json", now="2027-03-01T09:05:10Z").json()["alarms"]
    assert [a["name"] for a in data["in_alarm"]] == ["DeadLetterArrivals"]


def test_status_without_an_evaluation_says_where_alarms_come_from(cli: Cli) -> None:
    data = cli("status", "--json").json()["alarms"]
    assert data["available"] is False
    assert "`reminders tick` and `reminders work` evaluate the template's alarms" in data["why"]
    assert "alarms: not evaluated yet" in cli("status").out


def test_work_shows_its_progress_in_a_terminal_and_nothing_when_piped(
        aws_cli: Cli, queue_urls: config.QueueUrls, moto_endpoint: str,
        as_lambda: dict[str, str]) -> None:
    from tests.terminal import run

    env = {**aws_cli.env, **as_lambda, "REMINDERS_NOW": "2027-03-01T09:00:00Z"}
    put(moto_endpoint, queue_urls.deliveries, "{not json")
    shown = run(["work", "--max-seconds", "20"], env, stdout_tty=True, stderr_tty=True)
    assert shown.code == 4, shown.err
    # Each redraw, up to where a handler's own log line (a failed record's) followed it.
    drawn = [part.split("{", 1)[0].split("\n", 1)[0]
             for part in shown.err.split("\r\x1b[K") if part.startswith("work: ")]
    assert drawn[0] == "work: polling the queues; about 20s left"
    assert any(part.startswith("work: consumer 2 records (2 failed), redrive ")
               and " left" in part for part in drawn), drawn
    assert "consumer: 2 batches" in shown.out
    put(moto_endpoint, queue_urls.deliveries, "{not json")
    piped = run(["work", "--max-seconds", "20"], env, stdout_tty=False, stderr_tty=True)
    assert piped.code == 4 and "work: " not in piped.err.replace("reminders: work: ", "")
    assert "\x1b" not in piped.err
