"""The alarms of the in-process local pipeline (``reminders tick``/``work``, the demo, the
drills, the tests): what CloudWatch would have received from it, fed into a
:class:`~reminders.local.twin.metrics.MetricStore`, and an
:class:`~reminders.local.twin.board.AlarmBoard` evaluating the template's alarms from it.

- the service's own metrics: the handlers' ``rt.metrics`` is a
  :class:`~reminders.local.twin.metrics.StoreMetrics` on the injected clock;
- AWS/Lambda: :meth:`AlarmWatch.invoked` for each invocation the local event source and the
  scanner tick make (:func:`reminders.local.pipeline.tick`, ``work``);
- AWS/SQS: :meth:`AlarmWatch.minute` samples every queue of the template once per simulated
  minute, then the board evaluates up to that minute.

A queue message's age is measured on the simulated clock. moto stamps ``SentTimestamp`` on
the wall clock, which runs seconds while the simulated one runs minutes; each sample keeps the
pair (wall instant, simulated instant), and a message is taken to have been sent at the
simulated instant of the first sample taken after it (every message of a simulated minute was
sent before that minute's sample). So a message sent during the 09:00 round and still there
at 09:12 is 720 s old, as SQS would report it.
"""

from __future__ import annotations

import bisect
import fcntl
import functools
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from reminders.clock import Clock, iso, parse_instant
from reminders.local.event_source import Observer
from reminders.local.twin import metrics
from reminders.local.twin.alarms import LocalNames, Transition
from reminders.local.twin.board import AlarmBoard, board_for, local_names, queue_prefix
from reminders.local.twin.metrics import MetricKey, MetricStore, StoreMetrics

# A sample's wall instant against moto's stamps (milliseconds), for the rounding between them.
STAMP_SLACK_MS = 5


@dataclass
class SimulatedAges:
    """Maps moto's wall-clock SentTimestamps to simulated instants (see the module text)."""

    walls: list[int] = field(default_factory=list)    # each sample's wall clock, ms
    simulated: list[int] = field(default_factory=list)  # its simulated instant, ms

    def mark(self, at: datetime, wall_ms: int | None = None) -> None:
        self.walls.append(int(time.time() * 1000) if wall_ms is None else wall_ms)
        self.simulated.append(int(at.timestamp() * 1000))

    def sent_at(self, wall_ms: int) -> int:
        """The simulated instant (ms) of a message moto stamped ``wall_ms``."""
        i = bisect.bisect_left(self.walls, wall_ms - STAMP_SLACK_MS)
        return self.simulated[min(i, len(self.simulated) - 1)]


class AlarmWatch:
    """The template's alarms over the local pipeline: feed with :meth:`invoked` and
    :attr:`metrics`, then call :meth:`minute` once per simulated minute."""

    def __init__(self, template: Mapping[str, Any], clock: Clock, *, endpoint_url: str,
                 sqs: Any, queues: Mapping[str, str], names: LocalNames,
                 store: MetricStore | None = None, simulated: bool = True) -> None:
        self.store = store or MetricStore()
        self.clock = clock
        self.board: AlarmBoard = board_for(template, self.store, names)
        self.metrics = StoreMetrics(self.store, clock)
        self.endpoint_url = endpoint_url
        self.sqs = sqs
        self.queues = dict(queues)  # queue name -> URL
        # None: the clock is the wall clock (``reminders tick`` on a running stack), and a
        # message's age is moto's own.
        self.ages: SimulatedAges | None = SimulatedAges() if simulated else None

    @classmethod
    def for_local_queues(cls, template: Mapping[str, Any], clock: Clock, *, endpoint_url: str,
                         sqs: Any, deliveries_url: str, store: MetricStore | None = None,
                         simulated: bool = True) -> AlarmWatch:
        """A watch over the queues ``stack.prepare_aws`` made from ``template`` beside
        ``deliveries_url`` (the same prefix)."""
        names = local_names(template, queue_prefix(deliveries_url))
        base = deliveries_url.rstrip("/").rsplit("/", 1)[0]
        queues = {name: f"{base}/{name}" for name in names.queues.values()}
        return cls(template, clock, endpoint_url=endpoint_url, sqs=sqs, queues=queues,
                   names=names, store=store, simulated=simulated)

    def invoked(self, function_name: str, seconds: float, error: bool) -> None:
        """One invocation of ``function_name``, as Lambda counts it, at the clock's instant."""
        metrics.record_invocation(self.store, function_name, self.clock.now(),
                                  duration_ms=seconds * 1000, error=error)

    def minute(self) -> list[Transition]:
        """This simulated minute's queue datapoints, then the alarms evaluated up to it."""
        at = self.clock.now()
        self.sample(at)
        return self.board.advance(at)

    def sample(self, at: datetime) -> None:
        stamps = metrics.oldest_sent(self.endpoint_url)
        if self.ages is None:
            metrics.sample_queues(self.store, self.sqs, self.queues, at, oldest=stamps,
                                  now_ms=int(time.time() * 1000))
            return
        self.ages.mark(at)
        ages = self.ages
        oldest = {name: None if stamps.get(name) is None else
                  ages.sent_at(int(stamps[name] or 0)) for name in self.queues}
        metrics.sample_queues(self.store, self.sqs, self.queues, at, oldest=oldest,
                              now_ms=int(at.timestamp() * 1000))


@functools.cache
def _template() -> tuple[Any, str | None]:
    from reminders.local.roles import SELF_PUBLISHING, TemplateError, synthesized_template

    try:
        return synthesized_template(SELF_PUBLISHING), None
    except TemplateError as exc:
        return None, str(exc)


def watch_template() -> tuple[Any, str | None]:
    """The template whose alarms the local pipeline is watched by (the variant the local stack
    runs, whose scanner publishes itself), and None with why when there is none (the CDK is
    not installed, as after `make demo`'s set-up). One template a process: not to be changed."""
    return _template()


# ---------------------------------------------------------------- the local stack's board

ALARMS_FILE = "alarms.json"
KEPT_TRANSITIONS = 200


def alarms_path(home: Path) -> Path:
    """Where ``reminders tick`` and ``reminders work`` keep the local stack's alarms."""
    return home / ALARMS_FILE


def save(watch: AlarmWatch, path: Path) -> None:
    """The board's states and transitions, and the datapoints its alarms still look back on,
    written whole (a temporary file renamed over the old one)."""
    board = watch.board
    if board.evaluated is not None:
        watch.store.drop_before(board.evaluated - board.lookback)
    state = board.snapshot(transitions=KEPT_TRANSITIONS)
    state["points"] = [[k.namespace, k.name, dict(k.dimensions), iso(p.at), p.value, p.unit]
                       for k, p in watch.store.points()]
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def load(watch: AlarmWatch, path: Path) -> None:
    """Restore what :func:`save` wrote (nothing when there is no file, or an unreadable one:
    the board starts afresh)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if not isinstance(saved, dict):
        return
    watch.board.restore(saved)
    for namespace, name, dims, at, value, unit in saved.get("points", []):
        watch.store.put(MetricKey.of(namespace, name, dims), parse_instant(at, "at"),
                        float(value), unit)


@contextmanager
def persisted(watch: AlarmWatch, path: Path) -> Iterator[Observer]:
    """Run a command's invocations with ``watch`` (told of them through the observer this
    yields), then, holding the file's lock: what earlier commands saved, this command's
    datapoints added, this minute's queue sample, the alarms evaluated up to now, written
    back. Two commands at once take turns at the end. A command that fails is recorded too
    (its errors are what an alarm counts); a failure to record then does not hide its own."""
    try:
        yield watch.invoked
    except BaseException:
        with suppress(Exception):
            _record(watch, path)
        raise
    _record(watch, path)


def _record(watch: AlarmWatch, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fresh = watch.store.points()
            watch.store.drop_before(datetime.max.replace(tzinfo=UTC))
            load(watch, path)
            for key, point in fresh:
                watch.store.put(key, point.at, point.value, point.unit)
            watch.minute()
            save(watch, path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_state(path: Path) -> dict[str, Any] | None:
    """The local stack's alarms as the last command left them: when they were evaluated, the
    ones in ALARM that page, and the latest transitions; None when none was saved."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    alarms = [a for a in saved.get("alarms", []) if isinstance(a, dict)]
    return {"evaluated_at": saved.get("evaluated_at"),
            "in_alarm": [{k: a.get(k) for k in ("name", "since", "reason")}
                         for a in alarms if a.get("state") == "ALARM" and a.get("pages")],
            "alarms": len(alarms),
            "transitions": [t for t in saved.get("transitions", [])
                            if isinstance(t, dict)][-20:]}
