"""The twin's CloudWatch alarm evaluation on fixed instants: each statistic, M of N, each
missing-data treatment, composite rules, and the template's own ScannerSilent composite."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta

import pytest

from reminders.local.twin import alarms
from reminders.local.twin.alarms import (
    ALARM,
    INSUFFICIENT,
    OK,
    AlarmEvaluator,
    CompositeAlarmSpec,
    LocalNames,
    MetricAlarmSpec,
)
from reminders.local.twin.metrics import (
    EmfError,
    MetricKey,
    MetricStore,
    feed_emf,
    record_invocation,
)
from reminders.local.twin.template import PlanError
from tests.twin_templates import logical_id, template_copy

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a period boundary
KEY = MetricKey.of("Test", "Errors", {"FunctionName": "f"})
NO_NAMES = LocalNames(functions={}, queues={})


def spec(**given: object) -> MetricAlarmSpec:
    fields: dict[str, object] = dict(
        logical_id="A", name="A", namespace="Test", metric_name="Errors",
        dimensions=(alarms.Dimension("FunctionName", "literal", "f"),), statistic="Sum",
        period=60, threshold=1, comparison="GreaterThanOrEqualToThreshold",
        evaluation_periods=3, datapoints_to_alarm=3, treat_missing_data="missing")
    fields.update(given)
    return MetricAlarmSpec(**fields)  # type: ignore[arg-type]


def put_minutes(store: MetricStore, values: list[float | None], start: datetime = T0) -> None:
    """One sample per minute from ``start`` (None: nothing that minute)."""
    for i, value in enumerate(values):
        if value is not None:
            store.put(KEY, start + timedelta(minutes=i, seconds=10), value)


@pytest.mark.parametrize(("statistic", "expected"), [
    ("SampleCount", 5), ("Sum", 15), ("Average", 3), ("Minimum", 1), ("Maximum", 5),
    ("p50", 3), ("p99", 5), ("p20", 1), ("p100", 5)])
def test_each_statistic(statistic: str, expected: float) -> None:
    assert alarms.aggregate(statistic, [5, 1, 4, 2, 3]) == expected
    assert alarms.aggregate(statistic, []) is None


def evaluate(alarm: MetricAlarmSpec, values: list[float | None], *,
             start_state: str = INSUFFICIENT) -> str:
    store = MetricStore()
    put_minutes(store, values)
    evaluator = AlarmEvaluator([alarm], [], store, NO_NAMES)
    evaluator.state[alarm.logical_id] = start_state
    evaluator.evaluate(T0 + timedelta(minutes=len(values), seconds=5))
    return evaluator.state[alarm.logical_id]


@pytest.mark.parametrize(("values", "state"), [
    ([1, 1, 1, 0, 0], ALARM), ([1, 0, 1, 0, 1], ALARM), ([1, 0, 0, 0, 1], OK),
    ([0, 0, 1, 1, 1], ALARM), ([1, 1, 0, 0, 0], OK)])
def test_m_of_n(values: list[float | None], state: str) -> None:
    assert evaluate(spec(evaluation_periods=5, datapoints_to_alarm=3), values) == state


def test_the_running_period_is_not_evaluated() -> None:
    store = MetricStore()
    store.put(KEY, T0 + timedelta(minutes=3, seconds=1), 5)  # in the period still running
    evaluator = AlarmEvaluator([spec(datapoints_to_alarm=1)], [], store, NO_NAMES)
    evaluator.evaluate(T0 + timedelta(minutes=3, seconds=50))
    assert evaluator.state["A"] == INSUFFICIENT
    evaluator.evaluate(T0 + timedelta(minutes=4))
    assert evaluator.state["A"] == ALARM


@pytest.mark.parametrize(("treat", "values", "start", "state"), [
    # nothing at all in the three periods
    ("missing", [None, None, None], OK, INSUFFICIENT),
    ("ignore", [None, None, None], ALARM, ALARM),
    ("ignore", [None, None, None], OK, OK),
    ("breaching", [None, None, None], OK, ALARM),
    ("notBreaching", [None, None, None], ALARM, OK),
    # one breaching datapoint, two missing, 3 of 3 needed
    ("missing", [None, None, 1], OK, ALARM),
    ("ignore", [None, None, 1], OK, ALARM),
    ("breaching", [None, None, 1], OK, ALARM),
    ("notBreaching", [None, None, 1], OK, OK),
    # one datapoint within the threshold, two missing
    ("missing", [0, None, None], ALARM, OK),
    ("breaching", [0, None, None], OK, OK),
    ("breaching", [1, None, None], OK, ALARM),
    # all present: the treatment does not matter
    ("notBreaching", [1, 1, 1], OK, ALARM),
    ("breaching", [1, 0, 1], ALARM, OK),
])
def test_each_missing_data_treatment(treat: str, values: list[float | None], start: str,
                                     state: str) -> None:
    assert evaluate(spec(treat_missing_data=treat), values, start_state=start) == state


@pytest.mark.parametrize(("comparison", "value", "state"), [
    ("GreaterThanThreshold", 1, OK), ("GreaterThanThreshold", 2, ALARM),
    ("LessThanThreshold", 0, ALARM), ("LessThanThreshold", 1, OK),
    ("LessThanOrEqualToThreshold", 1, ALARM), ("GreaterThanOrEqualToThreshold", 1, ALARM)])
def test_each_comparison(comparison: str, value: float, state: str) -> None:
    alarm = spec(comparison=comparison, evaluation_periods=1, datapoints_to_alarm=1)
    assert evaluate(alarm, [value]) == state


def test_transitions_carry_time_old_new_and_reason() -> None:
    store = MetricStore()
    evaluator = AlarmEvaluator([spec(evaluation_periods=1, datapoints_to_alarm=1,
                                     treat_missing_data="notBreaching")], [], store, NO_NAMES)
    evaluator.evaluate(T0)
    store.put(KEY, T0 + timedelta(seconds=20), 3)
    evaluator.evaluate(T0 + timedelta(minutes=1))
    evaluator.evaluate(T0 + timedelta(minutes=1, seconds=30))  # no change: no transition
    evaluator.evaluate(T0 + timedelta(minutes=2))
    assert [(t.at, t.old, t.new) for t in evaluator.transitions] == [
        (T0, INSUFFICIENT, OK), (T0 + timedelta(minutes=1), OK, ALARM),
        (T0 + timedelta(minutes=2), ALARM, OK)]
    assert "1 of 1 datapoints [3]" in evaluator.transitions[1].reason


def composite(rule: str) -> CompositeAlarmSpec:
    return CompositeAlarmSpec(logical_id="C", name="C", rule=rule)


@pytest.mark.parametrize(("rule", "states", "value"), [
    ('ALARM("a") AND OK("b")', {"a": ALARM, "b": OK}, True),
    ('ALARM("a") AND OK("b")', {"a": ALARM, "b": INSUFFICIENT}, False),
    ("ALARM(a) OR ALARM(b) AND ALARM(c)", {"a": ALARM, "b": OK, "c": OK}, True),
    ("(ALARM(a) OR ALARM(b)) AND ALARM(c)", {"a": ALARM, "b": OK, "c": OK}, False),
    ("NOT ALARM(a) AND INSUFFICIENT_DATA(b)", {"a": OK, "b": INSUFFICIENT}, True),
    ("NOT (ALARM(a) OR OK(b))", {"a": OK, "b": ALARM}, True),
    ('ALARM("arn:aws:cloudwatch:us-east-1:123456789012:alarm:a")', {"a": ALARM}, True),
    ("TRUE AND NOT FALSE", {}, True),
])
def test_composite_rules(rule: str, states: dict[str, str], value: bool) -> None:
    predicate, _ = alarms.parse_rule(composite(rule))
    assert predicate(states) is value


@pytest.mark.parametrize("rule", ['ALARM("a") AND', "ALARM(a) OK(b)", "(ALARM(a)",
                                  "MAYBE(a)"])
def test_a_composite_rule_that_does_not_parse_names_the_alarm(rule: str) -> None:
    with pytest.raises(PlanError, match=r"^C: AlarmRule "):
        alarms.parse_rule(composite(rule))


def test_the_templates_scanner_silent_composite() -> None:
    """Quiet before the scanner's first invocation; ALARM after five silent minutes once it
    has run; OK again with the next invocation."""
    template = template_copy()
    scanner = logical_id(template, "FunctionsScanner")
    names = LocalNames(functions={k: k for k, r in template["Resources"].items()
                                  if r["Type"] == "AWS::Lambda::Function"},
                       queues={k: k for k, r in template["Resources"].items()
                               if r["Type"] == "AWS::SQS::Queue"})
    store = MetricStore()
    evaluator = AlarmEvaluator.from_template(template, store, names)
    silent = logical_id(template, "MonitoringScannerSilent")
    assert silent in {c.logical_id for c in evaluator.composites}
    for minute in range(10):  # never ran: silent input ALARM, never-ran input INSUFFICIENT
        evaluator.evaluate(T0 + timedelta(minutes=minute))
    assert evaluator.state[silent] == OK
    assert evaluator.state[logical_id(template, "MonitoringScannerSilentInput")] == ALARM
    for minute in range(10, 15):  # it runs each minute
        record_invocation(store, scanner, T0 + timedelta(minutes=minute, seconds=1),
                          duration_ms=40, error=False)
        evaluator.evaluate(T0 + timedelta(minutes=minute + 1))
    assert evaluator.state[silent] == OK
    assert evaluator.state[logical_id(template, "MonitoringScannerNeverRanInput")] == OK
    fired_at = None
    for minute in range(15, 25):  # then stops
        evaluator.evaluate(T0 + timedelta(minutes=minute + 1))
        if fired_at is None and evaluator.state[silent] == ALARM:
            fired_at = minute + 1
    assert fired_at == 20  # five complete silent minutes: 15..19
    record_invocation(store, scanner, T0 + timedelta(minutes=25, seconds=1), duration_ms=40,
                      error=False)
    evaluator.evaluate(T0 + timedelta(minutes=26))
    assert evaluator.state[silent] == OK
    assert [(t.new, t.at) for t in evaluator.transitions if t.alarm == silent] == [
        (OK, T0), (ALARM, T0 + timedelta(minutes=20)), (OK, T0 + timedelta(minutes=26))]


def test_a_dimension_without_a_local_name_names_the_alarm() -> None:
    template = template_copy()
    with pytest.raises(PlanError, match=r"Dimensions\[0\]\.Value names the queue Queues"):
        AlarmEvaluator.from_template(template, MetricStore(), NO_NAMES)


# ---------------------------------------------------------------- EMF

def test_the_services_emf_records_become_datapoints() -> None:
    from reminders.observability import EmfMetrics

    metrics = EmfMetrics()
    out = io.StringIO()
    with redirect_stdout(out):
        metrics.put("OldestOverdueSeconds", 42, "Seconds")
        metrics.put("Leased", 7)
        metrics.flush()
        metrics.put("SendConfigErrors", 2, dimensions={"channel": "email"})
    store = MetricStore()
    at = T0 + timedelta(seconds=5)
    given = sum(feed_emf(store, line, at) for line in out.getvalue().splitlines())
    assert given == 3
    base = {"service": "reminders"}
    window = (T0, T0 + timedelta(minutes=1))
    assert store.values(MetricKey.of("Reminders", "OldestOverdueSeconds", base), *window) == [42]
    assert store.values(MetricKey.of("Reminders", "Leased", base), *window) == [7]
    assert store.values(MetricKey.of("Reminders", "SendConfigErrors",
                                     {**base, "channel": "email"}), *window) == [2]


def test_a_log_line_is_no_datapoint_and_a_broken_record_is_refused() -> None:
    store = MetricStore()
    assert feed_emf(store, '{"level": "INFO", "message": "leased"}') == 0
    assert feed_emf(store, "not json") == 0
    record = {"_aws": {"Timestamp": 1_772_442_000_000, "CloudWatchMetrics": [
        {"Namespace": "Reminders", "Dimensions": [["service"]],
         "Metrics": [{"Name": "Sent", "Unit": "Count"}]}]}, "service": "reminders", "Sent": [1, 2]}
    assert feed_emf(store, json.dumps(record)) == 2
    assert store.values(MetricKey.of("Reminders", "Sent", {"service": "reminders"}),
                        datetime(2026, 3, 2, 9, 0, tzinfo=UTC),
                        datetime(2026, 3, 2, 9, 1, tzinfo=UTC)) == [1, 2]
    del record["Sent"]
    with pytest.raises(EmfError, match="names 'Sent', which the record does not hold"):
        feed_emf(store, json.dumps(record))
