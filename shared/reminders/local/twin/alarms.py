"""The template's CloudWatch alarms, evaluated from the twin's metric store as CloudWatch would.

A metric alarm, at an evaluation instant ``t``, looks at its last ``EvaluationPeriods``
complete periods (aligned to the epoch, as CloudWatch aligns them; the period still running at
``t`` is not one of them), aggregates each period's samples with its statistic, and compares
each datapoint with the threshold. Missing datapoints are treated as the alarm says:

- ``breaching`` / ``notBreaching``: a missing period counts as breaching / not breaching, and
  the alarm is ALARM when at least ``DatapointsToAlarm`` (M) of the N periods breach, else OK;
- ``missing`` (the default) / ``ignore``: missing periods are left out. With none present,
  ``missing`` goes to INSUFFICIENT_DATA and ``ignore`` keeps the current state; with some
  present, the alarm is ALARM when at least min(M, present) of them breach, else OK.

Simplifications, where CloudWatch does more: it looks back beyond the N periods for datapoints
when some are missing (here exactly N periods are read); percentiles are nearest-rank over the
raw samples (CloudWatch estimates them, and honours EvaluateLowSampleCountPercentile, which is
not read here); an alarm starts in INSUFFICIENT_DATA and is evaluated when :meth:`evaluate` is
called (CloudWatch evaluates every minute). Metric math (``Metrics``) and the anomaly-band
operators are refused with an error naming the alarm: the template uses neither.

A composite alarm is ALARM while its rule is true and OK while it is false (INSUFFICIENT_DATA
until its first evaluation); its rule may use ALARM(), OK(), INSUFFICIENT_DATA(), TRUE, FALSE,
AND, OR, NOT and parentheses, each alarm named by its ARN or name; composites are evaluated
after the metric alarms, in template order.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reminders.local.twin.metrics import MetricKey, MetricStore
from reminders.local.twin.template import (
    PlanError,
    boolean,
    integer,
    number,
    of_type,
    properties,
    required,
    resources,
    shown,
    text,
)

ALARM, OK, INSUFFICIENT = "ALARM", "OK", "INSUFFICIENT_DATA"
STATISTICS = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
COMPARISONS: Mapping[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}
BAND_COMPARISONS = ("LessThanLowerOrGreaterThanUpperThreshold",
                    "LessThanLowerThreshold", "GreaterThanUpperThreshold")
MISSING_TREATMENTS = ("missing", "ignore", "breaching", "notBreaching")
_PERCENTILE = re.compile(r"^p(\d{1,2}(\.\d{1,2})?|100)$")


@dataclass(frozen=True)
class Dimension:
    """A dimension as the template states it: a literal value, or the name of one of its
    functions or queues (``kind`` "function" / "queue", ``value`` the logical id)."""

    name: str
    kind: str
    value: str


@dataclass(frozen=True)
class MetricAlarmSpec:
    logical_id: str
    name: str
    namespace: str
    metric_name: str
    dimensions: tuple[Dimension, ...]
    statistic: str                 # one of STATISTICS, or a percentile "p99"
    period: int                    # seconds
    threshold: float
    comparison: str
    evaluation_periods: int
    datapoints_to_alarm: int
    treat_missing_data: str = "missing"
    actions_enabled: bool = True


@dataclass(frozen=True)
class CompositeAlarmSpec:
    logical_id: str
    name: str
    rule: str                      # the AlarmRule, alarms named by logical id
    actions_enabled: bool = True


@dataclass(frozen=True)
class LocalNames:
    """What the template's function and queue references are called on this machine (the
    FunctionName and QueueName dimensions' values), by logical id."""

    functions: Mapping[str, str]
    queues: Mapping[str, str]


@dataclass(frozen=True)
class Transition:
    at: datetime
    alarm: str                     # the alarm's logical id
    old: str
    new: str
    reason: str


def read_alarms(template: Mapping[str, Any]) -> tuple[MetricAlarmSpec, ...]:
    return tuple(read_alarm(template, logical_id, resource) for logical_id, resource
                 in of_type(template, "AWS::CloudWatch::Alarm").items())


def read_alarm(template: Mapping[str, Any], logical_id: str,
               resource: Mapping[str, Any]) -> MetricAlarmSpec:
    props = properties(logical_id, resource)
    if "Metrics" in props:
        raise PlanError(logical_id, "Metrics", "(metric math) is not evaluated by the twin")
    comparison = text(logical_id, "ComparisonOperator",
                      required(logical_id, props, "ComparisonOperator"),
                      (*COMPARISONS, *BAND_COMPARISONS))
    if comparison in BAND_COMPARISONS:
        raise PlanError(logical_id, "ComparisonOperator", f"{comparison} (an anomaly band) is "
                        "not evaluated by the twin")
    if "Statistic" in props and "ExtendedStatistic" in props:
        raise PlanError(logical_id, "ExtendedStatistic", "cannot be given with Statistic")
    if "ExtendedStatistic" in props:
        statistic = text(logical_id, "ExtendedStatistic", props["ExtendedStatistic"])
        if not _PERCENTILE.match(statistic):
            raise PlanError(logical_id, "ExtendedStatistic", f"must be a percentile p0-p100 "
                            f"(the twin evaluates no other), got {shown(statistic)}")
    else:
        statistic = text(logical_id, "Statistic", required(logical_id, props, "Statistic"),
                         STATISTICS)
    period = integer(logical_id, "Period", required(logical_id, props, "Period"), 10, 86_400)
    if period not in (10, 20, 30) and period % 60:
        raise PlanError(logical_id, "Period", f"must be 10, 20, 30 or a multiple of 60, got "
                                              f"{period}")
    periods = integer(logical_id, "EvaluationPeriods",
                      required(logical_id, props, "EvaluationPeriods"), 1, 100_000)
    if period * periods > 7 * 86_400:
        raise PlanError(logical_id, "EvaluationPeriods", f"{periods} periods of {period}s "
                        "exceed the seven days an alarm may look back")
    to_alarm = integer(logical_id, "DatapointsToAlarm", props.get("DatapointsToAlarm", periods),
                       1, periods)
    dims = props.get("Dimensions", [])
    if not isinstance(dims, list) or len(dims) > 30:
        raise PlanError(logical_id, "Dimensions", f"must be a list of at most 30, got "
                                                  f"{shown(dims)}")
    return MetricAlarmSpec(
        logical_id=logical_id,
        name=str(props.get("AlarmName") or logical_id),
        namespace=text(logical_id, "Namespace", required(logical_id, props, "Namespace")),
        metric_name=text(logical_id, "MetricName", required(logical_id, props, "MetricName")),
        dimensions=tuple(_dimension(template, logical_id, i, d) for i, d in enumerate(dims)),
        statistic=statistic, period=period,
        threshold=number(logical_id, "Threshold", required(logical_id, props, "Threshold")),
        comparison=comparison, evaluation_periods=periods, datapoints_to_alarm=to_alarm,
        treat_missing_data=text(logical_id, "TreatMissingData",
                                props.get("TreatMissingData", "missing"), MISSING_TREATMENTS),
        actions_enabled=boolean(logical_id, "ActionsEnabled", props.get("ActionsEnabled", True)))


def _dimension(template: Mapping[str, Any], logical_id: str, i: int, given: Any) -> Dimension:
    where = f"Dimensions[{i}]"
    if not isinstance(given, Mapping) or not isinstance(given.get("Name"), str):
        raise PlanError(logical_id, f"{where}.Name", f"must be a string, got {shown(given)}")
    name, value = given["Name"], given.get("Value")
    if isinstance(value, str) and value:
        return Dimension(name, "literal", value)
    target, kind = None, None
    if isinstance(value, Mapping) and set(value) == {"Ref"}:
        target, kind = value["Ref"], "function"
    elif isinstance(value, Mapping) and set(value) == {"Fn::GetAtt"} \
            and isinstance(value["Fn::GetAtt"], list) and len(value["Fn::GetAtt"]) == 2 \
            and value["Fn::GetAtt"][1] == "QueueName":
        target, kind = value["Fn::GetAtt"][0], "queue"
    expected = {"function": "AWS::Lambda::Function", "queue": "AWS::SQS::Queue"}
    if kind is None or not isinstance(target, str):
        raise PlanError(logical_id, f"{where}.Value", "must be a string, a Ref to a function "
                        f"or a queue's QueueName, got {shown(value, 120)}")
    found = resources(template).get(target)
    if found is None or found.get("Type") != expected[kind]:
        what = "nothing" if found is None else f"a {found.get('Type')}"
        raise PlanError(logical_id, f"{where}.Value", f"names {target}, which is {what}, not "
                        f"a {expected[kind]} of the template")
    return Dimension(name, kind, target)


def read_composites(template: Mapping[str, Any]) -> tuple[CompositeAlarmSpec, ...]:
    alarm_ids = set(of_type(template, "AWS::CloudWatch::Alarm")) | set(
        of_type(template, "AWS::CloudWatch::CompositeAlarm"))
    found = []
    for logical_id, resource in of_type(template, "AWS::CloudWatch::CompositeAlarm").items():
        props = properties(logical_id, resource)
        rule = _rule_text(logical_id, required(logical_id, props, "AlarmRule"), alarm_ids)
        composite = CompositeAlarmSpec(
            logical_id=logical_id, name=str(props.get("AlarmName") or logical_id), rule=rule,
            actions_enabled=boolean(logical_id, "ActionsEnabled",
                                    props.get("ActionsEnabled", True)))
        parse_rule(composite)  # refuse a rule that does not parse, naming the alarm
        found.append(composite)
    return tuple(found)


def _rule_text(logical_id: str, rule: Any, alarm_ids: set[str]) -> str:
    """The AlarmRule with every ``Fn::GetAtt [alarm, Arn]`` replaced by the alarm's logical
    id."""
    if isinstance(rule, str):
        return rule
    if isinstance(rule, Mapping) and set(rule) == {"Fn::GetAtt"}:
        target, attribute = rule["Fn::GetAtt"]
        if attribute != "Arn" or target not in alarm_ids:
            raise PlanError(logical_id, "AlarmRule", f"names {target}.{attribute}, which is "
                                                     "not an alarm's ARN of the template")
        return str(target)
    if isinstance(rule, Mapping) and set(rule) == {"Fn::Join"}:
        separator, parts = rule["Fn::Join"]
        return str(separator).join(_rule_text(logical_id, p, alarm_ids) for p in parts)
    raise PlanError(logical_id, "AlarmRule", f"must be a string or an Fn::Join of alarm ARNs, "
                                             f"got {shown(rule, 120)}")


# ---------------------------------------------------------------- composite rules

_TOKEN = re.compile(r'\s*(?:(ALARM|OK|INSUFFICIENT_DATA)\s*\(\s*("([^"]*)"|[^)\s]+)\s*\)'
                    r'|(AND|OR|NOT|TRUE|FALSE)\b|(\()|(\)))')
Rule = Callable[[Mapping[str, str]], bool]


def parse_rule(composite: CompositeAlarmSpec) -> tuple[Rule, set[str]]:
    """The composite's rule as a predicate over alarm states by name, and the names it reads.
    NOT binds tighter than AND, AND tighter than OR."""
    tokens: list[tuple[str, str]] = []
    position, source = 0, composite.rule
    while position < len(source):
        if source[position:].strip() == "":
            break
        match = _TOKEN.match(source, position)
        if not match:
            raise PlanError(composite.logical_id, "AlarmRule",
                            f"cannot be read at {source[position:position + 40]!r}")
        if match.group(1):
            name = match.group(3) if match.group(3) is not None else match.group(2)
            tokens.append((match.group(1), _alarm_name(name)))
        elif match.group(4):
            tokens.append((match.group(4), ""))
        else:
            tokens.append(("(" if match.group(5) else ")", ""))
        position = match.end()
    names = {value for kind, value in tokens if kind in (ALARM, OK, INSUFFICIENT)}
    at = 0

    def peek() -> str | None:
        return tokens[at][0] if at < len(tokens) else None

    def take(kind: str) -> tuple[str, str]:
        nonlocal at
        if peek() != kind:
            raise PlanError(composite.logical_id, "AlarmRule",
                            f"expected {kind} at token {at + 1}, got {peek()}")
        at += 1
        return tokens[at - 1]

    def primary() -> Rule:
        kind = peek()
        if kind == "NOT":
            take("NOT")
            inner = primary()
            return lambda s: not inner(s)
        if kind == "(":
            take("(")
            inner = disjunction()
            take(")")
            return inner
        if kind in ("TRUE", "FALSE"):
            take(kind)
            return _constant(kind == "TRUE")
        if kind in (ALARM, OK, INSUFFICIENT):
            _, name = take(kind)
            return _in_state(name, kind)
        raise PlanError(composite.logical_id, "AlarmRule",
                        f"expected a state function, NOT or ( at token {at + 1}, got {kind}")

    def conjunction() -> Rule:
        parts = [primary()]
        while peek() == "AND":
            take("AND")
            parts.append(primary())
        return lambda s: all(p(s) for p in parts)

    def disjunction() -> Rule:
        parts = [conjunction()]
        while peek() == "OR":
            take("OR")
            parts.append(conjunction())
        return lambda s: any(p(s) for p in parts)

    rule = disjunction()
    if at != len(tokens):
        raise PlanError(composite.logical_id, "AlarmRule", f"has more after token {at}")
    return rule, names


def _constant(value: bool) -> Rule:
    return lambda states: value


def _in_state(name: str, state: str) -> Rule:
    return lambda states: states.get(name, INSUFFICIENT) == state


def _alarm_name(reference: str) -> str:
    """An alarm named by its ARN (``arn:aws:cloudwatch:region:account:alarm:NAME``) or name."""
    return reference.split(":alarm:", 1)[1] if ":alarm:" in reference else reference


# ---------------------------------------------------------------- evaluation

def aggregate(statistic: str, values: Sequence[float]) -> float | None:
    """One period's datapoint from its samples (None: no samples, a missing datapoint)."""
    if not values:
        return None
    if statistic == "SampleCount":
        return float(len(values))
    if statistic == "Sum":
        return float(sum(values))
    if statistic == "Average":
        return sum(values) / len(values)
    if statistic == "Minimum":
        return min(values)
    if statistic == "Maximum":
        return max(values)
    match = _PERCENTILE.match(statistic)
    if not match:
        raise ValueError(f"unknown statistic {statistic!r}")
    ordered = sorted(values)  # nearest rank
    rank = max(1, math.ceil(float(statistic[1:]) / 100 * len(ordered)))
    return ordered[rank - 1]


def metric_key(alarm: MetricAlarmSpec, names: LocalNames) -> MetricKey:
    """The metric ``alarm`` watches, its dimensions resolved to their local values."""
    dims: dict[str, str] = {}
    for i, dim in enumerate(alarm.dimensions):
        if dim.kind == "literal":
            dims[dim.name] = dim.value
            continue
        known = names.functions if dim.kind == "function" else names.queues
        if dim.value not in known:
            raise PlanError(alarm.logical_id, f"Dimensions[{i}].Value",
                            f"names the {dim.kind} {dim.value}, which has no local name")
        dims[dim.name] = known[dim.value]
    return MetricKey.of(alarm.namespace, alarm.metric_name, dims)


def decide(alarm: MetricAlarmSpec, datapoints: Sequence[float | None], current: str
           ) -> tuple[str, str]:
    """The state the alarm goes to from its N datapoints (oldest first; None: missing), and
    why, as CloudWatch words it."""
    compare = COMPARISONS[alarm.comparison]
    treat, m = alarm.treat_missing_data, alarm.datapoints_to_alarm
    states: list[bool | None] = [None if v is None else compare(v, alarm.threshold)
                                 for v in datapoints]
    if treat in ("breaching", "notBreaching"):
        states = [treat == "breaching" if s is None else s for s in states]
    present = [s for s in states if s is not None]
    shown_points = "[" + ", ".join("missing" if v is None else f"{v:g}"
                                   for v in datapoints) + "]"
    if not present:
        if treat == "ignore":
            return current, f"no datapoints in {len(states)} periods (missing data ignored)"
        return INSUFFICIENT, f"no datapoints in {len(states)} periods"
    needed = m if treat in ("breaching", "notBreaching") else min(m, len(present))
    breaching = sum(present)
    relation = f"{alarm.comparison} {alarm.threshold:g}"
    if breaching >= needed:
        return ALARM, (f"Threshold Crossed: {breaching} of {len(present)} datapoints "
                       f"{shown_points} were {relation} (at least {needed} needed)")
    return OK, (f"Threshold not crossed: {breaching} of {len(present)} datapoints "
                f"{shown_points} were {relation} ({needed} needed)")


def datapoints(alarm: MetricAlarmSpec, store: MetricStore, key: MetricKey,
               at: datetime) -> list[float | None]:
    """The alarm's N datapoints at ``at``: one per complete period, oldest first."""
    period = timedelta(seconds=alarm.period)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    end = epoch + period * ((at.astimezone(UTC) - epoch) // period)
    found: list[float | None] = []
    for k in range(alarm.evaluation_periods, 0, -1):
        start = end - period * k
        found.append(aggregate(alarm.statistic, store.values(key, start, start + period)))
    return found


class AlarmEvaluator:
    """Every alarm of a template, with its state and its transitions on the injected clock."""

    def __init__(self, alarms: Sequence[MetricAlarmSpec],
                 composites: Sequence[CompositeAlarmSpec], store: MetricStore,
                 names: LocalNames) -> None:
        self.alarms = tuple(alarms)
        self.composites = tuple(composites)
        self.store = store
        self._keys = {a.logical_id: metric_key(a, names) for a in self.alarms}
        self._rules = {c.logical_id: parse_rule(c) for c in self.composites}
        known = {a.logical_id for a in self.alarms} | {a.name for a in self.alarms} | \
            {c.logical_id for c in self.composites} | {c.name for c in self.composites}
        for composite in self.composites:
            unknown = sorted(self._rules[composite.logical_id][1] - known)
            if unknown:
                raise PlanError(composite.logical_id, "AlarmRule",
                                f"names {unknown[0]}, which is not an alarm of the template")
        self.state: dict[str, str] = {a.logical_id: INSUFFICIENT for a in self.alarms}
        self.state.update({c.logical_id: INSUFFICIENT for c in self.composites})
        self.transitions: list[Transition] = []

    @classmethod
    def from_template(cls, template: Mapping[str, Any], store: MetricStore,
                      names: LocalNames) -> AlarmEvaluator:
        return cls(read_alarms(template), read_composites(template), store, names)

    def key(self, logical_id: str) -> MetricKey:
        return self._keys[logical_id]

    def evaluate(self, at: datetime) -> list[Transition]:
        """Evaluate every alarm at ``at``; return the transitions it made."""
        made: list[Transition] = []
        for alarm in self.alarms:
            points = datapoints(alarm, self.store, self._keys[alarm.logical_id], at)
            new, reason = decide(alarm, points, self.state[alarm.logical_id])
            made += self._move(alarm.logical_id, new, reason, at)
        by_name = dict(self.state)
        by_name.update({a.name: self.state[a.logical_id] for a in self.alarms})
        for composite in self.composites:
            rule, _ = self._rules[composite.logical_id]
            value = rule(by_name)
            new = ALARM if value else OK
            made += self._move(composite.logical_id, new, f"{composite.rule} is {value}", at)
            by_name[composite.logical_id] = by_name[composite.name] = new
        return made

    def _move(self, logical_id: str, new: str, reason: str, at: datetime) -> list[Transition]:
        old = self.state[logical_id]
        if old == new:
            return []
        self.state[logical_id] = new
        transition = Transition(at, logical_id, old, new, reason)
        self.transitions.append(transition)
        return [transition]

    def in_alarm(self) -> list[str]:
        return [logical_id for logical_id, state in self.state.items() if state == ALARM]

    def fired(self) -> list[Transition]:
        """Every transition into ALARM, in order."""
        return [t for t in self.transitions if t.new == ALARM]
