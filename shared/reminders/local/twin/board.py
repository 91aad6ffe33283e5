"""The template's alarms on the injected clock: an :class:`AlarmBoard` evaluates every alarm
of the template each simulated minute from a :class:`~reminders.local.twin.metrics.MetricStore`,
keeps their states and transitions, and answers "which alarms are in ALARM" and "which
transitions happened in [t0, t1]".

Whatever feeds the store (the in-process local pipeline through
:mod:`reminders.local.twin.watch`, or the twin's function processes) the board only reads it:
:func:`board_for` takes the template, the store and the local names, nothing else.

Minutes in which no alarm's window holds a datapoint are not evaluated one by one: with no
datapoint an alarm's next state is the same however often it is evaluated (missing data
treated as breaching, not breaching, ignored or insufficient), so the board jumps over them
and a clock that leaps three days costs no more than a few minutes of evaluation.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from reminders.clock import iso
from reminders.local.twin.alarms import (
    ALARM,
    AlarmEvaluator,
    LocalNames,
    Transition,
    read_alarms,
    read_composites,
)
from reminders.local.twin.metrics import MetricStore
from reminders.local.twin.resources import local_queue_name
from reminders.local.twin.template import of_type

MINUTE = timedelta(minutes=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# The service's functions by the name the local pipeline gives them (the FunctionName
# dimension of what it records), from the template's logical ids.
_SERVICE_FUNCTION = re.compile(r"^Functions(Scanner|Consumer|Redrive|Ops|Publisher|Migrate)"
                               r"[0-9A-F]{8}$")
_HASH = re.compile(r"[0-9A-F]{8}$")


def short_name(logical_id: str) -> str:
    """``MonitoringDeliveriesQueueAge5944C2E2`` as docs/operating.md names it:
    ``DeliveriesQueueAge``."""
    bare = _HASH.sub("", logical_id)
    return bare.removeprefix("Monitoring") or logical_id


def local_names(template: Mapping[str, Any], queue_prefix: str) -> LocalNames:
    """The FunctionName and QueueName values the local pipeline's metrics carry: the service's
    functions by their short name (``scanner``, ``consumer``, ...), any other function by its
    logical id (nothing local runs it, so nothing is recorded for it), and every queue by the
    name :func:`reminders.local.twin.resources.create_queues` gave it under ``queue_prefix``."""
    functions = {}
    for logical_id in of_type(template, "AWS::Lambda::Function"):
        match = _SERVICE_FUNCTION.match(logical_id)
        functions[logical_id] = match.group(1).lower() if match else logical_id
    queues = {logical_id: local_queue_name(queue_prefix, logical_id)
              for logical_id in of_type(template, "AWS::SQS::Queue")}
    return LocalNames(functions=functions, queues=queues)


def queue_prefix(deliveries_url: str) -> str:
    """The prefix the local queues were made with, from the deliveries queue's URL."""
    name = deliveries_url.rstrip("/").rsplit("/", 1)[-1]
    if not name.endswith("-deliveries"):
        raise ValueError(f"expected a local deliveries queue (PREFIX-deliveries), got {name!r}")
    return name.removesuffix("-deliveries")


def floor_minute(at: datetime) -> datetime:
    return EPOCH + MINUTE * ((at.astimezone(UTC) - EPOCH) // MINUTE)


@dataclass(frozen=True)
class AlarmState:
    logical_id: str
    name: str            # as docs/operating.md names it
    state: str
    since: datetime | None
    reason: str
    pages: bool          # its actions are enabled (a composite's inputs page nobody)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "logical_id": self.logical_id, "state": self.state,
                "since": None if self.since is None else iso(self.since),
                "reason": self.reason, "pages": self.pages}


def transition_json(t: Transition) -> dict[str, Any]:
    return {"at": iso(t.at), "alarm": short_name(t.alarm), "logical_id": t.alarm,
            "old": t.old, "new": t.new, "reason": t.reason}


class AlarmBoard:
    """Every alarm of a template, evaluated once per minute of the injected clock."""

    def __init__(self, evaluator: AlarmEvaluator) -> None:
        self.evaluator = evaluator
        self.store = evaluator.store
        self.evaluated: datetime | None = None   # the last minute evaluated
        self._reasons: dict[str, str] = {}
        self._since: dict[str, datetime] = {}
        self._pages = {a.logical_id: a.actions_enabled for a in evaluator.alarms}
        self._pages.update({c.logical_id: c.actions_enabled for c in evaluator.composites})
        periods = [timedelta(seconds=a.period) for a in evaluator.alarms] or [MINUTE]
        # How far back any alarm's window reaches from the minute it is evaluated at.
        self.lookback = max(timedelta(seconds=a.period * a.evaluation_periods)
                            for a in evaluator.alarms) + max(periods) if evaluator.alarms \
            else MINUTE

    # --- evaluation ------------------------------------------------------------------------

    def advance(self, now: datetime) -> list[Transition]:
        """Evaluate every minute boundary after the last one evaluated, up to ``now`` (the
        first call: ``now``'s minute alone); return the transitions made."""
        target = floor_minute(now)
        if self.evaluated is not None and target <= self.evaluated:
            return []
        at = target if self.evaluated is None else self.evaluated + MINUTE
        instants = self.store.instants()
        made: list[Transition] = []
        held = False  # the minute before was evaluated with empty windows: states hold
        while at <= target:
            quiet = not _any_between(instants, at - self.lookback, at)
            if quiet and held:  # on to the first minute whose window holds a datapoint
                following = bisect.bisect_left(instants, at)
                if following == len(instants):
                    break
                at = floor_minute(instants[following]) + MINUTE
                held = False
                continue
            made += self._evaluate(at)
            held = quiet
            at += MINUTE
        self.evaluated = target
        return made

    def _evaluate(self, at: datetime) -> list[Transition]:
        made = self.evaluator.evaluate(at)
        for t in made:
            self._since[t.alarm] = t.at
            self._reasons[t.alarm] = t.reason
        return made

    # --- answers ---------------------------------------------------------------------------

    def states(self) -> list[AlarmState]:
        return [AlarmState(logical_id, short_name(logical_id), state,
                           self._since.get(logical_id), self._reasons.get(logical_id, ""),
                           self._pages.get(logical_id, True))
                for logical_id, state in self.evaluator.state.items()]

    def in_alarm(self, *, inputs: bool = False) -> list[AlarmState]:
        """The alarms in ALARM now; a composite's inputs (no actions) only with ``inputs``."""
        return [s for s in self.states() if s.state == ALARM and (inputs or s.pages)]

    def transitions(self, start: datetime | None = None, end: datetime | None = None
                    ) -> list[Transition]:
        """The transitions made in [start, end] (either end open when None), in order."""
        return [t for t in self.evaluator.transitions
                if (start is None or t.at >= start) and (end is None or t.at <= end)]

    def fired(self, start: datetime | None = None, end: datetime | None = None, *,
              inputs: bool = False) -> list[Transition]:
        """The transitions into ALARM in [start, end], of alarms that page (and, with
        ``inputs``, of a composite's inputs too)."""
        return [t for t in self.transitions(start, end)
                if t.new == ALARM and (inputs or self._pages.get(t.alarm, True))]

    def first_fired(self, name: str, start: datetime | None = None) -> datetime | None:
        """When the alarm called ``name`` (the documented name or logical id) first went to ALARM at
        or after ``start``."""
        for t in self.transitions(start):
            if t.new == ALARM and name in (t.alarm, short_name(t.alarm)):
                return t.at
        return None

    def state_of(self, name: str) -> str:
        for logical_id, state in self.evaluator.state.items():
            if name in (logical_id, short_name(logical_id)):
                return state
        raise KeyError(f"no alarm {name!r} in the template")

    # --- persistence -----------------------------------------------------------------------

    def snapshot(self, *, transitions: int = 200) -> dict[str, Any]:
        """The board's states and its latest transitions, as JSON."""
        return {"evaluated_at": None if self.evaluated is None else iso(self.evaluated),
                "alarms": [s.as_json() for s in self.states()],
                "transitions": [transition_json(t)
                                for t in self.evaluator.transitions[-transitions:]]}

    def restore(self, saved: Mapping[str, Any]) -> None:
        """States, reasons and transitions from a :meth:`snapshot` of a board of the same
        template (alarms it does not know are left out: the template changed)."""
        from reminders.clock import parse_instant

        known = self.evaluator.state
        for alarm in saved.get("alarms", []):
            logical_id = alarm.get("logical_id")
            if logical_id in known:
                known[logical_id] = str(alarm["state"])
                self._reasons[logical_id] = str(alarm.get("reason") or "")
                if alarm.get("since"):
                    self._since[logical_id] = parse_instant(alarm["since"], "since")
        self.evaluator.transitions[:] = [
            Transition(parse_instant(t["at"], "at"), t["logical_id"], t["old"], t["new"],
                       t["reason"])
            for t in saved.get("transitions", []) if t.get("logical_id") in known]
        if saved.get("evaluated_at"):
            self.evaluated = parse_instant(saved["evaluated_at"], "evaluated_at")


def _any_between(instants: list[datetime], start: datetime, end: datetime) -> bool:
    i = bisect.bisect_left(instants, start)
    return i < len(instants) and instants[i] < end


def board_for(template: Mapping[str, Any], store: MetricStore, names: LocalNames
              ) -> AlarmBoard:
    """A board of every metric and composite alarm of ``template``, reading ``store``."""
    return AlarmBoard(AlarmEvaluator(read_alarms(template), read_composites(template), store,
                                     names))


def alarm_summary(board: AlarmBoard) -> list[str]:
    """One line per time an alarm that pages went to ALARM, in order: its name, when, and
    when it was OK again (or that it still is in ALARM); one line saying none did."""
    transitions = board.transitions()
    paging = set(board.fired())
    lines = []
    for i, t in enumerate(transitions):
        if t not in paging:
            continue
        cleared = next((u.at for u in transitions[i + 1:]
                        if u.alarm == t.alarm and u.new != ALARM), None)
        tail = f", OK again at {iso(cleared)}" if cleared else ", still in ALARM"
        lines.append(f"{short_name(t.alarm)} fired at {iso(t.at)}{tail}")
    return lines or ["no alarm fired"]
