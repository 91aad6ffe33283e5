"""The twin's CloudWatch metrics: a store of datapoints keyed by (namespace, metric name,
dimensions), stamped on the injected clock, and the feeders that fill it.

- :func:`feed_emf`: the Embedded Metric Format records the functions print on stdout
  (Powertools Metrics, :class:`reminders.observability.EmfMetrics`), as CloudWatch Logs
  extracts them;
- :func:`record_invocation` / :func:`record_async_dropped`: the AWS/Lambda metrics Lambda
  publishes for every invocation, called by whatever invokes a function;
- :func:`sample_queues`: the AWS/SQS metrics SQS publishes every minute, sampled from moto.

:data:`FED` lists, per AWS namespace, the metric names and dimension names these feeders
produce (the alarms' coverage check reads it).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reminders.clock import Clock

LAMBDA = "AWS/Lambda"
SQS = "AWS/SQS"
LAMBDA_METRICS = ("Invocations", "Errors", "Throttles", "Duration", "AsyncEventsDropped")
SQS_METRICS = ("ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible",
               "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed")
# What the feeders below emit in AWS's namespaces: metric names, and the dimension names.
FED: Mapping[str, tuple[tuple[str, ...], frozenset[str]]] = {
    LAMBDA: (LAMBDA_METRICS, frozenset({"FunctionName"})),
    SQS: (SQS_METRICS, frozenset({"QueueName"})),
}
EMF_LINE_LIMIT = 1_000_000  # characters of one log line looked at


class EmfError(ValueError):
    """A log line that claims to be an EMF record (it has ``_aws``) and is not a valid one."""


@dataclass(frozen=True)
class MetricKey:
    namespace: str
    name: str
    dimensions: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, namespace: str, name: str, dimensions: Mapping[str, str] | None = None
           ) -> MetricKey:
        return cls(namespace, name, frozenset((dimensions or {}).items()))

    def dimension_names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.dimensions)


@dataclass(frozen=True)
class Datapoint:
    at: datetime
    value: float
    unit: str = "None"


class MetricStore:
    """Datapoints by metric, as CloudWatch holds them (each value a sample; the alarms
    aggregate them per period). Safe to feed from several threads."""

    def __init__(self) -> None:
        self._points: dict[MetricKey, list[Datapoint]] = {}
        self._lock = threading.Lock()

    def put(self, key: MetricKey, at: datetime, value: float, unit: str = "None") -> None:
        if at.tzinfo is None:
            raise ValueError(f"{key.name}: a datapoint's instant must carry a zone")
        with self._lock:
            self._points.setdefault(key, []).append(Datapoint(at.astimezone(UTC), value, unit))

    def values(self, key: MetricKey, start: datetime, end: datetime) -> list[float]:
        """The samples of ``key`` stamped in [start, end)."""
        with self._lock:
            return [p.value for p in self._points.get(key, []) if start <= p.at < end]

    def keys(self) -> list[MetricKey]:
        with self._lock:
            return list(self._points)

    def points(self) -> list[tuple[MetricKey, Datapoint]]:
        """Every datapoint with its metric, in the order each metric got them."""
        with self._lock:
            return [(key, p) for key, found in self._points.items() for p in found]

    def instants(self) -> list[datetime]:
        """Every datapoint's instant, sorted."""
        with self._lock:
            return sorted(p.at for found in self._points.values() for p in found)

    def drop_before(self, instant: datetime) -> int:
        """Forget the datapoints stamped before ``instant`` (no alarm looks back that far);
        return how many."""
        dropped = 0
        with self._lock:
            for key in list(self._points):
                kept = [p for p in self._points[key] if p.at >= instant]
                dropped += len(self._points[key]) - len(kept)
                if kept:
                    self._points[key] = kept
                else:
                    del self._points[key]
        return dropped


class StoreMetrics:
    """The service's metrics port (reminders.observability.Metrics) writing into a store, as
    EmfMetrics would once CloudWatch read its records: for handlers run in this process."""

    def __init__(self, store: MetricStore, clock: Clock, namespace: str = "Reminders",
                 service: str = "reminders") -> None:
        self.store, self.clock, self.namespace, self.service = store, clock, namespace, service

    def put(self, name: str, value: float, unit: str = "Count",
            dimensions: dict[str, str] | None = None) -> None:
        self.store.put(MetricKey.of(self.namespace, name,
                                    {"service": self.service, **(dimensions or {})}),
                       self.clock.now(), value, unit)

    def flush(self) -> None:
        return None


def feed_emf(store: MetricStore, line: str, at: datetime | None = None) -> int:
    """Put the metrics of one stdout line, if it is an EMF record, into ``store``; return how
    many datapoints it gave (0 for a line that is not EMF). Each metric is put once per
    dimension set of its directive. ``at`` stamps the datapoints (the injected clock's instant
    of the invocation); without it, the record's own ``_aws.Timestamp``."""
    stripped = line.strip()
    if not stripped.startswith("{") or '"_aws"' not in stripped[:EMF_LINE_LIMIT]:
        return 0
    try:
        record = json.loads(stripped)
    except ValueError:
        return 0  # a log line that mentions _aws, not a record
    if not isinstance(record, dict) or "_aws" not in record:
        return 0
    meta = record["_aws"]
    if not isinstance(meta, dict) or not isinstance(meta.get("CloudWatchMetrics"), list):
        raise EmfError("_aws.CloudWatchMetrics must be a list")
    if at is None:
        stamp = meta.get("Timestamp")
        if not isinstance(stamp, int | float) or isinstance(stamp, bool):
            raise EmfError(f"_aws.Timestamp must be milliseconds since the epoch, got {stamp!r}")
        at = datetime.fromtimestamp(stamp / 1000, UTC)
    given = 0
    for i, directive in enumerate(meta["CloudWatchMetrics"]):
        where = f"_aws.CloudWatchMetrics[{i}]"
        if not isinstance(directive, dict):
            raise EmfError(f"{where} must be an object")
        namespace = directive.get("Namespace")
        if not isinstance(namespace, str) or not namespace:
            raise EmfError(f"{where}.Namespace must be a string")
        dimension_sets = directive.get("Dimensions", [[]])
        if not isinstance(dimension_sets, list) or not all(
                isinstance(s, list) and all(isinstance(d, str) for d in s)
                for s in dimension_sets):
            raise EmfError(f"{where}.Dimensions must be a list of lists of names")
        for j, definition in enumerate(directive.get("Metrics", [])):
            name = definition.get("Name") if isinstance(definition, dict) else None
            if not isinstance(name, str) or name not in record:
                raise EmfError(f"{where}.Metrics[{j}] names {name!r}, which the record "
                               "does not hold")
            raw = record[name]
            values = raw if isinstance(raw, list) else [raw]
            if not values or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                     for v in values):
                raise EmfError(f"{name} must be a number or a list of numbers, got {raw!r}")
            unit = str(definition.get("Unit", "None"))
            for names in dimension_sets:
                missing = [d for d in names if not isinstance(record.get(d), str)]
                if missing:
                    raise EmfError(f"{where}: dimension {missing[0]!r} has no string value")
                key = MetricKey.of(namespace, name, {d: record[d] for d in names})
                for value in values:
                    store.put(key, at, float(value), unit)
                    given += 1
    return given


def feed_emf_lines(store: MetricStore, lines: Iterable[str], at: datetime | None = None) -> int:
    return sum(feed_emf(store, line, at) for line in lines)


def record_invocation(store: MetricStore, function_name: str, at: datetime, *,
                      duration_ms: float, error: bool, throttled: bool = False) -> None:
    """What Lambda publishes for one invocation request: a throttled one counts in Throttles
    only (it never ran); one that ran counts in Invocations, its Duration, and in Errors when
    it raised or timed out."""
    dims = {"FunctionName": function_name}
    if throttled:
        store.put(MetricKey.of(LAMBDA, "Throttles", dims), at, 1, "Count")
        return
    store.put(MetricKey.of(LAMBDA, "Invocations", dims), at, 1, "Count")
    store.put(MetricKey.of(LAMBDA, "Errors", dims), at, 1 if error else 0, "Count")
    store.put(MetricKey.of(LAMBDA, "Duration", dims), at, duration_ms, "Milliseconds")


def record_async_received(store: MetricStore, function_name: str, at: datetime) -> None:
    """An asynchronous event Lambda accepted (queued) for the function."""
    store.put(MetricKey.of(LAMBDA, "AsyncEventsReceived", {"FunctionName": function_name}), at,
              1, "Count")


def record_async_dropped(store: MetricStore, function_name: str, at: datetime) -> None:
    """An asynchronous event Lambda gave up on (retries spent, or older than its maximum
    event age); it counts whether or not an OnFailure destination then got its record."""
    store.put(MetricKey.of(LAMBDA, "AsyncEventsDropped", {"FunctionName": function_name}), at,
              1, "Count")


def oldest_sent(endpoint_url: str) -> dict[str, int | None]:
    """Each queue's oldest message's SentTimestamp (milliseconds), None for an empty queue, as
    the local moto server reports it (reminders.local.moto_server.OLDEST_PATH)."""
    from reminders.local.moto_server import OLDEST_PATH

    with urllib.request.urlopen(f"{endpoint_url}{OLDEST_PATH}", timeout=10) as answer:
        found: dict[str, int | None] = json.loads(answer.read())
    return found


def sample_queues(store: MetricStore, sqs: Any, queues: Mapping[str, str], at: datetime, *,
                  oldest: Mapping[str, int | None], now_ms: int) -> None:
    """One minute's AWS/SQS datapoints for ``queues`` (queue name -> URL): the counts from
    GetQueueAttributes, and ApproximateAgeOfOldestMessage from ``oldest`` (queue name -> the
    oldest message's SentTimestamp, see :func:`oldest_sent`): SQS has no attribute for it.
    The age is measured on moto's own clock (``now_ms``, the wall clock moto stamps messages
    with); the datapoints are stamped ``at``, on the injected clock. An empty queue's age is
    0, as SQS reports it."""
    for name, url in queues.items():
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        dims = {"QueueName": name}
        for metric, attribute in (
                ("ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessages"),
                ("ApproximateNumberOfMessagesNotVisible",
                 "ApproximateNumberOfMessagesNotVisible"),
                ("ApproximateNumberOfMessagesDelayed", "ApproximateNumberOfMessagesDelayed")):
            store.put(MetricKey.of(SQS, metric, dims), at, float(attrs[attribute]), "Count")
        sent = oldest.get(name)
        age = 0.0 if sent is None else max(0.0, (now_ms - sent) / 1000)
        store.put(MetricKey.of(SQS, "ApproximateAgeOfOldestMessage", dims), at, age, "Seconds")
