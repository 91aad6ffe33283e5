"""Recurring schedules: an RFC 5545 RRULE expanded on the local calendar of an IANA zone.

A :class:`Recurrence` is a rule (``FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0``), a zone name and a
naive local start (DTSTART). Occurrences are worked out in two steps:

1. The rule is expanded by :mod:`dateutil.rrule` with *naive local wall times* anchored at
   ``local_start``. Absent BYHOUR/BYMINUTE take ``local_start``'s hour/minute; the second is always
   ``local_start``'s. No instant is ever derived by adding 24 h or 7 x 24 h to another, so
   "Monday 09:00" stays 09:00 local across DST changes while its UTC hour moves.
2. Each nominal wall time is mapped to one UTC instant in the zone under the schedule's DST
   policy (RFC 5545 section 3.3.5 is the default):

   * gap (the wall time does not exist, clocks spring forward):
     ``"shift"`` reads it with the offset in force before the gap, i.e. moves it forward by the
     gap's length (New York 02:30 -> 03:30 EDT; Lord Howe, 30-minute gap, 02:15 -> 02:45);
     ``"skip"`` gives no occurrence for that wall time.
   * overlap (the wall time happens twice, clocks fall back):
     ``"first"`` takes the earlier instant (fold=0), ``"later"`` the later one (fold=1).

   A wall time is in a gap when neither fold maps to an instant whose wall time is itself, and
   in an overlap when both folds map back to it with different offsets. A fold reading that
   does not map back is ignored: zoneinfo can report a second offset that was never in force
   (America/Nuuk, 2023-10-28 23:00-24:00, reads as -01 with fold=0 though the clocks showed
   -02), and taking it would put the occurrence an hour early.

Series semantics (kept consistent everywhere):

* Occurrences strictly increase. One wall time never yields two occurrences. The recurrence set
  is a set of instants: if two slots land on the same instant (a shifted gap time meeting a real
  later wall time, e.g. 02:30 shifted onto 03:30, or Samoa's skipped 2011-12-30 shifted onto
  2011-12-31), they make one occurrence. If a shifted gap time lands after the instant of a later
  slot (02:45 -> 03:45 while 03:15 also matches), both are kept and emitted in instant order.
* COUNT counts the rule's local slots as dateutil produces them. A slot skipped under
  ``gap="skip"``, or merged into another on the same instant, still uses up its COUNT place, so
  COUNT=n gives at most n occurrences and never runs past the n-th slot of the rule.
* UNTIL is inclusive. ``UNTIL=...Z`` (the RFC 5545 form for a zoned DTSTART) is compared with
  each occurrence's UTC instant; a floating ``UNTIL=YYYYMMDDTHHMMSS`` with the nominal local
  wall time; a date-only ``UNTIL=YYYYMMDD`` keeps every slot on or before that local date.
* ``local_start`` itself is an occurrence only if it matches the rule (as in dateutil; RFC 5545
  leaves an unsynchronised DTSTART undefined).
* Work is bounded: at most :data:`MAX_LIMIT` occurrences per call, COUNT at most
  :data:`MAX_COUNT`, INTERVAL at most :data:`MAX_INTERVAL`, and a query looks at no more than
  :data:`SCAN_YEARS` years of local calendar past ``max(after, local_start)`` (for a COUNT series,
  past ``local_start``); anything later is treated as absent. :meth:`Recurrence.parse` rejects a
  rule with no occurrence in that window.

Compare :attr:`Occurrence.utc`, never :attr:`Occurrence.local`: aware datetimes sharing a tzinfo
compare by wall time ignoring ``fold``, and (PEP 495) an ambiguous wall time never compares equal
to an instant in another zone, so ``occurrence.local == occurrence.utc`` is False in an overlap.
"""

from __future__ import annotations

import contextlib
import heapq
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import Any, Final, Literal, cast, get_args
from zoneinfo import ZoneInfo

import dateutil.rrule as _dateutil
from dateutil.rrule import DAILY, MONTHLY, WEEKLY, YEARLY, weekday, weekdays
from dateutil.rrule import rrule as dateutil_rrule

from reminders.errors import InvalidInput
from reminders.timezones import zone

__all__ = [
    "MAX_COUNT",
    "MAX_INTERVAL",
    "MAX_LIMIT",
    "SCAN_YEARS",
    "GapPolicy",
    "Occurrence",
    "OverlapPolicy",
    "Recurrence",
    "preview",
]

GapPolicy = Literal["shift", "skip"]
OverlapPolicy = Literal["first", "later"]

MAX_LIMIT: Final = 1000
"""Most occurrences one call returns."""
MAX_COUNT: Final = 10_000
"""Largest COUNT accepted (a COUNT series is re-expanded from its start on every query)."""
MAX_INTERVAL: Final = 1000
"""Largest INTERVAL accepted."""
SCAN_YEARS: Final = 400
"""How far past ``max(after, local_start)`` a query looks, in local calendar years."""
MIN_START_YEAR: Final = 1900
MAX_START_YEAR: Final = 2999

MAX_PERIODS_WITHOUT_OCCURRENCE: Final = 5_000
"""Rule periods (days of a DAILY rule, weeks of a WEEKLY one, ...) one expansion examines in a
row without finding a slot before it gives up (:class:`ExpansionBound`). dateutil looks for a
match up to year 9999 when none comes: a never-matching rule cost 0.1-0.3 s of one CPU. 5,000
periods is 13.7 years of days (a DAILY rule on 29 February waits 8 years across 2100), 96
years of weeks, 416 years of months: a rule whose occurrences lie further apart than that (a
DAILY rule on a 29 February that is a Monday) is taken to have none left."""
DEADLINE_EVERY_PERIODS: Final = 256
"""How often (in periods) an expansion reads the clock for :func:`expansion_deadline`."""


class ExpansionBound(InvalidInput):
    """A rule examined MAX_PERIODS_WITHOUT_OCCURRENCE periods in a row without a slot."""


class ExpansionDeadline(Exception):
    """The caller's deadline (:func:`expansion_deadline`) passed inside an expansion. Not a
    :class:`RemindersError`: nothing is wrong with the rule, it is expanded again later."""


_DEADLINE: ContextVar[float | None] = ContextVar("reminders_expansion_deadline", default=None)


@contextlib.contextmanager
def expansion_deadline(deadline: float | None) -> Iterator[None]:
    """Expansions inside stop with :class:`ExpansionDeadline` once ``time.monotonic()``
    passes ``deadline`` (read every DEADLINE_EVERY_PERIODS periods, inside dateutil's own
    search): the scanner's steps before its drain end on time, however long one rule takes."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class _Guard:
    """What one expansion may still examine: periods without a slot, and the deadline."""

    __slots__ = ("deadline", "left", "period_name", "seen")

    def __init__(self, period_name: str) -> None:
        self.period_name = period_name
        self.left = MAX_PERIODS_WITHOUT_OCCURRENCE
        self.seen = 0  # periods examined in all
        self.deadline = _DEADLINE.get()

    def period(self) -> None:
        self.left -= 1
        self.seen += 1
        if self.left < 0:
            raise ExpansionBound(
                f"rrule: no occurrence in {MAX_PERIODS_WITHOUT_OCCURRENCE} {self.period_name}s "
                f"in a row (the expansion's bound): the rule has none the service can find")
        if (self.deadline is not None and self.seen % DEADLINE_EVERY_PERIODS == 0
                and time.monotonic() >= self.deadline):
            raise ExpansionDeadline("the expansion's deadline passed")


class _GuardedIterinfo(_dateutil._iterinfo):
    """dateutil's per-iteration state, counting each period it builds for a rule that carries
    a guard (``_reminders_guard``), the only place inside dateutil's search where it can be
    stopped. Rules without one (nobody else's) behave exactly as before."""

    def _period(self) -> None:
        guard = getattr(self.rrule, "_reminders_guard", None)
        if guard is not None:
            guard.period()

    def ydayset(self, year: int, month: int, day: int) -> Any:
        self._period()
        return super().ydayset(year, month, day)

    def mdayset(self, year: int, month: int, day: int) -> Any:
        self._period()
        return super().mdayset(year, month, day)

    def wdayset(self, year: int, month: int, day: int) -> Any:
        self._period()
        return super().wdayset(year, month, day)

    def ddayset(self, year: int, month: int, day: int) -> Any:
        self._period()
        return super().ddayset(year, month, day)


# dateutil's rrule._iter builds its state as the module's _iterinfo: the one hook into its
# search (2.9.0; tests/unit/test_recurrence_bound.py fails if a release moves it).
_dateutil._iterinfo = _GuardedIterinfo  # type: ignore[misc]


_Freq = Literal[0, 1, 2, 3]
_FREQS: Final[dict[str, _Freq]] = {
    "YEARLY": YEARLY,
    "MONTHLY": MONTHLY,
    "WEEKLY": WEEKLY,
    "DAILY": DAILY,
}
_PERIOD_NAMES: Final[dict[int, str]] = {
    YEARLY: "year",
    MONTHLY: "month",
    WEEKLY: "week",
    DAILY: "day",
}
_SUB_DAILY: Final = ("HOURLY", "MINUTELY", "SECONDLY")
_DAY_NAMES: Final = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_SUPPORTED_PARTS: Final = (
    "FREQ",
    "INTERVAL",
    "COUNT",
    "UNTIL",
    "WKST",
    "BYMONTH",
    "BYMONTHDAY",
    "BYDAY",
    "BYHOUR",
    "BYMINUTE",
    "BYSETPOS",
)
_KNOWN_UNSUPPORTED: Final = ("BYSECOND", "BYYEARDAY", "BYWEEKNO", "BYEASTER")
_PART = re.compile(r"([A-Z][A-Z0-9-]*)=(.*)")
_INTEGER = re.compile(r"[+-]?\d{1,6}")
_BYDAY = re.compile(r"([+-]?\d{1,2})?(MO|TU|WE|TH|FR|SA|SU)")
_UNTIL = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})(Z)?)?")
_DAYS_IN_MONTH: Final = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # leap-year maxima
# Any wall time is within a day of its UTC instant (offsets are below 24 h, gaps at most a day).
_SLACK: Final = timedelta(days=2)
# The Gregorian calendar (with weekdays) repeats exactly every 400 years.
_CYCLE_YEARS: Final = 400
_LAST_YEAR: Final = 9999


@dataclass(frozen=True)
class Occurrence:
    """One due instant of a schedule."""

    utc: datetime
    """Aware, in UTC."""
    local: datetime
    """Aware, in the schedule's zone: the wall time as it actually happens, with its offset."""


@dataclass(frozen=True)
class _Until:
    utc: datetime | None = None  # UNTIL=...Z, aware
    local: datetime | None = None  # floating UNTIL=YYYYMMDDTHHMMSS, naive
    day: date | None = None  # UNTIL=YYYYMMDD


@dataclass(frozen=True)
class _Rule:
    freq: _Freq
    interval: int
    wkst: int
    count: int | None
    until: _Until | None
    bymonth: tuple[int, ...] | None
    bymonthday: tuple[int, ...] | None
    byday: tuple[weekday, ...] | None
    byhour: tuple[int, ...] | None
    byminute: tuple[int, ...] | None
    bysetpos: tuple[int, ...] | None


@dataclass(frozen=True)
class Recurrence:
    """An RRULE anchored at a naive local start in a named IANA zone, with a DST policy.

    Build one with :meth:`parse` from user input; the constructor validates too (without the
    "produces at least one occurrence" check) and raises :class:`InvalidInput`.
    """

    rrule: str
    tz: str
    local_start: datetime
    gap: GapPolicy = "shift"
    overlap: OverlapPolicy = "first"
    _rule: _Rule = field(init=False, repr=False, compare=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled and copied as its public fields; the compiled parts are rebuilt and checked.
        return (Recurrence, (self.rrule, self.tz, self.local_start, self.gap, self.overlap))

    def __post_init__(self) -> None:
        if not isinstance(self.rrule, str):
            raise InvalidInput(f"rrule: must be a string, got {self.rrule!r}")
        rule = _parse_rule(self.rrule)
        if not isinstance(self.tz, str):
            raise InvalidInput(f"tz: must be an IANA zone name, got {self.tz!r}")
        try:
            tzinfo = zone(self.tz)
        except InvalidInput as exc:
            raise InvalidInput(f"tz: {exc}") from None
        _check_local_start(self.local_start)
        _check_choice("gap", self.gap, get_args(GapPolicy))
        _check_choice("overlap", self.overlap, get_args(OverlapPolicy))
        object.__setattr__(self, "_rule", rule)
        object.__setattr__(self, "_zone", tzinfo)

    @classmethod
    def parse(
        cls,
        rrule: str,
        tz: str,
        local_start: str | datetime,
        gap: str = "shift",
        overlap: str = "first",
    ) -> Recurrence:
        """Validate user input and build a recurrence that produces at least one occurrence.

        ``rrule`` may start with ``RRULE:``; ``local_start`` is a naive ISO-8601 local date-time
        (or a naive datetime). Raises :class:`InvalidInput` naming the bad field and value.
        """
        if not isinstance(rrule, str):
            raise InvalidInput(f"rrule: must be a string, got {rrule!r}")
        text = _normalise_rule_text(rrule)
        start = _parse_local_start(local_start)
        recurrence = cls(
            rrule=text,
            tz=tz.strip() if isinstance(tz, str) else tz,
            local_start=start,
            gap=cast(GapPolicy, _policy("gap", gap, get_args(GapPolicy))),
            overlap=cast(OverlapPolicy, _policy("overlap", overlap, get_args(OverlapPolicy))),
        )
        try:
            first = recurrence.first()
        except ExpansionBound:  # none within the periods the service looks through
            first = None
        if first is None:
            raise InvalidInput(
                f"rrule: {text!r} produces no occurrence from local_start "
                f"{start.isoformat()} within {SCAN_YEARS} years (check UNTIL, COUNT and BY* parts)"
            )
        return recurrence

    # -- queries -----------------------------------------------------------------------------

    def occurrences_after(self, after: datetime, limit: int) -> list[Occurrence]:
        """Up to ``limit`` occurrences strictly after the aware instant ``after``, ascending."""
        after_utc = _require_aware(after, "after")
        _check_limit(limit, "limit")
        if limit == 0:
            return []
        after_naive = after_utc.replace(tzinfo=None)
        if after_naive.year > _LAST_YEAR - 2 * SCAN_YEARS:
            return []
        lower = after_naive - _SLACK if after_naive.year > MIN_START_YEAR else self.local_start
        found: list[Occurrence] = []
        for occurrence in self._occurrences(lower):
            if occurrence.utc > after_utc:
                found.append(occurrence)
                if len(found) >= limit:
                    break
        return found

    def next_after(self, after: datetime) -> Occurrence | None:
        """The first occurrence strictly after ``after``; None once COUNT/UNTIL ended the series."""
        found = self.occurrences_after(after, 1)
        return found[0] if found else None

    def first(self) -> Occurrence | None:
        """The first occurrence at or after ``local_start``."""
        return next(self._occurrences(self.local_start), None)

    # -- machinery ---------------------------------------------------------------------------

    def _occurrences(self, lower: datetime) -> Iterator[Occurrence]:
        """Occurrences in strictly increasing instant order.

        Slots whose wall time is before ``lower`` (naive local) are not resolved; callers pass a
        ``lower`` at least a day before the first instant they care about.
        """
        rule = self._rule
        until = rule.until
        stop_local = until.local if until else None
        stop_day = until.day if until else None
        until_utc = until.utc if until else None
        stop_utc_wall = until_utc.replace(tzinfo=None) + _SLACK if until_utc else None
        pending: list[tuple[datetime, int, Occurrence]] = []
        last: datetime | None = None
        sequence = 0
        for nominal in self._expand(lower):
            if stop_local is not None and nominal > stop_local:
                break
            if stop_day is not None and nominal.date() > stop_day:
                break
            if stop_utc_wall is not None and nominal > stop_utc_wall:
                break
            if nominal < lower:
                continue
            occurrence, shifted = self._resolve(nominal)
            if occurrence is None or (until_utc is not None and occurrence.utc > until_utc):
                continue
            heapq.heappush(pending, (occurrence.utc, sequence, occurrence))
            sequence += 1
            if shifted:
                # A shifted gap time may land after slots still to come; hold it until a slot
                # that is not shifted (their instants only grow) shows nothing can precede it.
                continue
            while pending and pending[0][0] <= occurrence.utc:
                held = heapq.heappop(pending)[2]
                if last is None or held.utc > last:
                    last = held.utc
                    yield held
        while pending:
            held = heapq.heappop(pending)[2]
            if last is None or held.utc > last:
                last = held.utc
                yield held

    def _resolve(self, nominal: datetime) -> tuple[Occurrence | None, bool]:
        """Map a naive local wall time to its instant under the DST policy.

        Returns ``(occurrence, shifted)``; ``occurrence`` is None when a gap time is skipped.
        """
        tzinfo = self._zone
        by_fold: list[datetime] = []  # the instant each fold reading gives
        real: list[Occurrence] = []  # those whose wall time round-trips to the nominal one
        for fold in (0, 1):
            offset = nominal.replace(tzinfo=tzinfo, fold=fold).utcoffset()
            assert offset is not None
            instant = (nominal - offset).replace(tzinfo=UTC)
            if instant in by_fold:
                continue
            by_fold.append(instant)
            local = instant.astimezone(tzinfo)
            if local.replace(tzinfo=None) == nominal:
                real.append(Occurrence(utc=instant, local=local))
        if not real:  # gap
            if self.gap == "skip":
                return None, False
            # The offset before the gap is the smaller one, so it gives the later instant: the
            # wall time moved forward by the gap's length (RFC 5545 section 3.3.5).
            instant = max(by_fold)
            return Occurrence(utc=instant, local=instant.astimezone(tzinfo)), True
        real.sort(key=lambda occurrence: occurrence.utc)
        return (real[-1] if self.overlap == "later" else real[0]), False

    def _expand(self, lower: datetime) -> Iterator[datetime]:
        """The rule's nominal local wall times, ascending, up to the scan horizon.

        Without COUNT the expansion restarts at the beginning of the rule period that contains
        ``lower`` (same INTERVAL alignment, all defaults spelled out), so a query far from
        ``local_start`` does not replay the whole history, and looks SCAN_YEARS past ``lower``.
        With COUNT it starts at ``local_start``, because every slot counts, and stops
        SCAN_YEARS after it.

        dateutil keeps looking for a match until year 9999 when a rule has long stretches
        without one. The window is therefore moved by whole 400-year Gregorian cycles, which
        leave dates and weekdays unchanged, so that dateutil's own end of calendar falls at most
        400 years after our horizon; results are moved back.
        """
        rule = self._rule
        if rule.count is not None:
            # Every slot counts, so the expansion starts at local_start; the series is looked
            # at no further than SCAN_YEARS past local_start.
            start = self.local_start
            horizon = _add_years(self.local_start, SCAN_YEARS)
            if lower > horizon:
                return
        else:
            start = self._period_start(lower)
            horizon = _add_years(max(lower, self.local_start), SCAN_YEARS)
        offset = (_LAST_YEAR - horizon.year) // _CYCLE_YEARS * _CYCLE_YEARS
        expansion = _dateutil_rule(rule, self.local_start, _add_years(start, offset))
        guard = _Guard(_PERIOD_NAMES[rule.freq])
        expansion._reminders_guard = guard  # type: ignore[attr-defined]
        slots: Iterator[datetime] = iter(expansion)
        if rule.count is not None:
            # islice stops after the COUNT-th slot without making dateutil search for another.
            slots = islice(slots, rule.count)
        for slot in slots:
            guard.left = MAX_PERIODS_WITHOUT_OCCURRENCE  # a slot: the count starts again
            nominal = _add_years(slot, -offset)
            if nominal > horizon:
                return
            yield nominal

    def _period_start(self, lower: datetime) -> datetime:
        """Start of the latest rule period (INTERVAL-aligned) beginning at or before ``lower``."""
        start = self.local_start
        if lower <= start:
            return start
        rule = self._rule
        step = rule.interval
        if rule.freq == DAILY:
            periods = (lower.date() - start.date()).days // step
            first_day = start.date() + timedelta(days=periods * step)
        elif rule.freq == WEEKLY:
            week = start.date() - timedelta(days=(start.weekday() - rule.wkst) % 7)
            periods = (lower.date() - week).days // (7 * step)
            first_day = week + timedelta(days=7 * step * periods)
        elif rule.freq == MONTHLY:
            base = start.year * 12 + start.month - 1
            periods = (lower.year * 12 + lower.month - 1 - base) // step
            year, month = divmod(base + periods * step, 12)
            first_day = date(year, month + 1, 1)
        else:
            periods = (lower.year - start.year) // step
            first_day = date(start.year + periods * step, 1, 1)
        if periods <= 0:
            return start
        return datetime.combine(first_day, datetime.min.time())


def preview(rec: Recurrence, after: datetime, count: int) -> list[dict[str, str]]:
    """The next ``count`` occurrences after ``after`` as ``{"utc": ..., "local": ...}`` strings.

    ``utc`` is ISO-8601 with ``Z``; ``local`` is ISO-8601 with the zone's offset at that instant.
    """
    _check_limit(count, "count")
    return [
        {
            "utc": occurrence.utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "local": occurrence.local.isoformat(),
        }
        for occurrence in rec.occurrences_after(after, count)
    ]


# -- expansion helpers -----------------------------------------------------------------------


def _dateutil_rule(rule: _Rule, anchor: datetime, dtstart: datetime) -> dateutil_rrule:
    """A dateutil rule with every default dateutil would take from DTSTART taken from ``anchor``.

    Spelling the defaults out lets ``dtstart`` be any period start without changing the rule.
    """
    bymonth = rule.bymonth
    bymonthday = rule.bymonthday
    byday = rule.byday
    if bymonthday is None and byday is None:
        if rule.freq == YEARLY:
            if bymonth is None:
                bymonth = (anchor.month,)
            bymonthday = (anchor.day,)
        elif rule.freq == MONTHLY:
            bymonthday = (anchor.day,)
        elif rule.freq == WEEKLY:
            byday = (weekdays[anchor.weekday()],)
    return dateutil_rrule(
        rule.freq,
        dtstart=dtstart,
        interval=rule.interval,
        wkst=rule.wkst,
        bysetpos=rule.bysetpos,
        bymonth=bymonth,
        bymonthday=bymonthday,
        byweekday=byday,
        byhour=rule.byhour if rule.byhour is not None else (anchor.hour,),
        byminute=rule.byminute if rule.byminute is not None else (anchor.minute,),
        bysecond=(anchor.second,),
    )


def _add_years(value: datetime, years: int) -> datetime:
    """Move by whole years; only ever called with multiples of 400, so 29 February survives."""
    return value.replace(year=value.year + years) if years else value


# -- validation ------------------------------------------------------------------------------


def _normalise_rule_text(text: str) -> str:
    cleaned = text.strip()
    if cleaned.upper().startswith("RRULE:"):
        cleaned = cleaned[len("RRULE:") :].strip()
    return cleaned.upper()


def _parse_rule(text: str) -> _Rule:
    source = text.strip()
    upper = source.upper()
    if "DTSTART" in upper:
        raise InvalidInput(
            f"rrule: DTSTART must not appear in the rule text ({source!r}); "
            "pass the start as local_start"
        )
    if "\n" in source or "\r" in source:
        raise InvalidInput(f"rrule: must be a single RRULE line, got {source!r}")
    if upper.startswith("RRULE:"):
        upper = upper[len("RRULE:") :].strip()
    if ":" in upper:
        raise InvalidInput(f"rrule: only an RRULE value is accepted, got {source!r}")
    if not upper:
        raise InvalidInput("rrule: must not be empty")

    parts: dict[str, str] = {}
    for chunk in upper.split(";"):
        piece = chunk.strip()
        if not piece:
            continue
        match = _PART.fullmatch(piece)
        if match is None:
            raise InvalidInput(f"rrule: part {piece!r} is not NAME=VALUE")
        name, value = match.group(1), match.group(2).strip()
        if name in _KNOWN_UNSUPPORTED:
            raise InvalidInput(
                f"rrule: {name} is not supported (supported: {', '.join(_SUPPORTED_PARTS)})"
            )
        if name not in _SUPPORTED_PARTS:
            raise InvalidInput(
                f"rrule: unknown part {name!r} (supported: {', '.join(_SUPPORTED_PARTS)})"
            )
        if name in parts:
            raise InvalidInput(f"rrule: {name} is given more than once")
        if not value:
            raise InvalidInput(f"rrule: {name} has no value")
        parts[name] = value

    if "FREQ" not in parts:
        raise InvalidInput(f"rrule: FREQ is required, got {source!r}")
    freq_name = parts["FREQ"]
    if freq_name in _SUB_DAILY:
        raise InvalidInput(
            f"rrule: FREQ={freq_name} is not supported; the smallest frequency is DAILY"
        )
    if freq_name not in _FREQS:
        raise InvalidInput(f"rrule: FREQ={freq_name} is not one of DAILY, WEEKLY, MONTHLY, YEARLY")
    freq = _FREQS[freq_name]

    if "COUNT" in parts and "UNTIL" in parts:
        raise InvalidInput("rrule: COUNT and UNTIL must not both be given (RFC 5545)")

    interval = _single_int(parts, "INTERVAL", 1, MAX_INTERVAL) or 1
    count = _single_int(parts, "COUNT", 1, MAX_COUNT)
    until = _parse_until(parts["UNTIL"]) if "UNTIL" in parts else None
    wkst = _weekday_index(parts["WKST"], "WKST") if "WKST" in parts else 0
    bymonth = _int_list(parts, "BYMONTH", 1, 12)
    bymonthday = _int_list(parts, "BYMONTHDAY", 1, 31, allow_negative=True)
    byhour = _int_list(parts, "BYHOUR", 0, 23)
    byminute = _int_list(parts, "BYMINUTE", 0, 59)
    bysetpos = _int_list(parts, "BYSETPOS", 1, 366, allow_negative=True)
    byday = _parse_byday(parts["BYDAY"], freq, bymonth) if "BYDAY" in parts else None

    if bymonthday is not None and freq == WEEKLY:
        raise InvalidInput("rrule: BYMONTHDAY must not be used with FREQ=WEEKLY (RFC 5545)")
    if bysetpos is not None and not any(
        part in parts for part in ("BYMONTH", "BYMONTHDAY", "BYDAY", "BYHOUR", "BYMINUTE")
    ):
        raise InvalidInput("rrule: BYSETPOS needs another BY* part to select from (RFC 5545)")
    if bysetpos is not None:
        most = _most_slots_per_period(freq, bymonth, bymonthday, byday, byhour, byminute)
        if all(abs(position) > most for position in bysetpos):
            raise InvalidInput(
                f"rrule: BYSETPOS={parts['BYSETPOS']} never selects anything: each "
                f"{_PERIOD_NAMES[freq]} has at most {most} candidate(s)"
            )
    if bymonth is not None and bymonthday is not None:
        possible = any(
            abs(day) <= _DAYS_IN_MONTH[month - 1] for month in bymonth for day in bymonthday
        )
        if not possible:
            days, months = parts["BYMONTHDAY"], parts["BYMONTH"]
            raise InvalidInput(f"rrule: BYMONTHDAY={days} never occurs in BYMONTH={months}")

    return _Rule(
        freq=freq,
        interval=interval,
        wkst=wkst,
        count=count,
        until=until,
        bymonth=bymonth,
        bymonthday=bymonthday,
        byday=byday,
        byhour=byhour,
        byminute=byminute,
        bysetpos=bysetpos,
    )


def _most_slots_per_period(
    freq: _Freq,
    bymonth: tuple[int, ...] | None,
    bymonthday: tuple[int, ...] | None,
    byday: tuple[weekday, ...] | None,
    byhour: tuple[int, ...] | None,
    byminute: tuple[int, ...] | None,
) -> int:
    """An upper bound on the slots one FREQ period can hold (for the BYSETPOS check)."""
    times = len(byhour or (0,)) * len(byminute or (0,))
    if freq == DAILY:
        days = 1
    elif bymonthday is None and byday is None:  # dateutil's defaults: one day per month/week
        days = len(bymonth or (0,)) if freq == YEARLY else 1
    else:
        days = {WEEKLY: 7, MONTHLY: 31, YEARLY: 366}[freq]
    return days * times


def _single_int(parts: dict[str, str], name: str, low: int, high: int) -> int | None:
    if name not in parts:
        return None
    raw = parts[name]
    if not _INTEGER.fullmatch(raw) or not low <= int(raw) <= high:
        raise InvalidInput(f"rrule: {name}={raw} must be a whole number from {low} to {high}")
    return int(raw)


def _int_list(
    parts: dict[str, str], name: str, low: int, high: int, *, allow_negative: bool = False
) -> tuple[int, ...] | None:
    if name not in parts:
        return None
    raw = parts[name]
    values: list[int] = []
    for item in raw.split(","):
        token = item.strip()
        number = int(token) if _INTEGER.fullmatch(token) else None
        magnitude = abs(number) if number is not None and allow_negative else number
        if number is None or magnitude is None or not low <= magnitude <= high:
            allowed = f"{low}..{high}" + (f" or -{high}..-{low}" if allow_negative else "")
            raise InvalidInput(f"rrule: {name}={raw} has {token!r}; allowed values are {allowed}")
        values.append(number)
    return tuple(sorted(set(values)))


def _weekday_index(raw: str, name: str) -> int:
    if raw not in _DAY_NAMES:
        raise InvalidInput(f"rrule: {name}={raw} must be one of {', '.join(_DAY_NAMES)}")
    return _DAY_NAMES.index(raw)


def _parse_byday(raw: str, freq: _Freq, bymonth: tuple[int, ...] | None) -> tuple[weekday, ...]:
    within_month = freq == MONTHLY or (freq == YEARLY and bymonth is not None)
    max_ordinal = 5 if within_month else 53
    plain: list[int] = []
    numbered: list[weekday] = []
    for item in raw.split(","):
        token = item.strip()
        match = _BYDAY.fullmatch(token)
        if match is None:
            raise InvalidInput(f"rrule: BYDAY={raw} has {token!r}; expected e.g. MO, 1MO or -1FR")
        day = _DAY_NAMES.index(match.group(2))
        if match.group(1) is None:
            plain.append(day)
            continue
        ordinal = int(match.group(1))
        if freq not in (MONTHLY, YEARLY):
            raise InvalidInput(
                f"rrule: BYDAY={raw} has ordinal {token!r}, allowed only with MONTHLY or YEARLY"
            )
        if ordinal == 0 or abs(ordinal) > max_ordinal:
            raise InvalidInput(
                f"rrule: BYDAY={raw} has {token!r}; the ordinal must be 1..{max_ordinal} "
                f"or -{max_ordinal}..-1 here"
            )
        numbered.append(weekdays[day](ordinal))
    if not numbered:
        return tuple(weekdays[day] for day in sorted(set(plain)))
    # dateutil intersects plain and numbered weekdays; RFC 5545 means their union. Every
    # plain weekday is the union of all its ordinals, which dateutil combines correctly.
    expanded = list(numbered)
    for day in sorted(set(plain)):
        expanded.extend(weekdays[day](n) for n in range(1, max_ordinal + 1))
    return tuple(dict.fromkeys(expanded))


def _parse_until(raw: str) -> _Until:
    match = _UNTIL.fullmatch(raw)
    if match is None:
        raise InvalidInput(
            f"rrule: UNTIL={raw} must be YYYYMMDD, YYYYMMDDTHHMMSS or YYYYMMDDTHHMMSSZ"
        )
    year, month, day, hour, minute, second, utc = match.groups()
    try:
        if hour is None:
            return _Until(day=date(int(year), int(month), int(day)))
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second))
    except ValueError as exc:
        raise InvalidInput(f"rrule: UNTIL={raw} is not a valid date-time: {exc}") from None
    if utc:
        return _Until(utc=moment.replace(tzinfo=UTC))
    return _Until(local=moment)


def _parse_local_start(value: str | datetime) -> datetime:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str):
        raise InvalidInput(f"local_start: must be an ISO-8601 local date-time, got {value!r}")
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"local_start: not an ISO-8601 local date-time: {value!r} (e.g. 2027-03-29T09:00)"
        ) from None
    return parsed


def _check_local_start(value: object) -> None:
    if not isinstance(value, datetime):
        raise InvalidInput(f"local_start: must be a naive local datetime, got {value!r}")
    if value.tzinfo is not None:
        raise InvalidInput(
            f"local_start: must be a local wall time without an offset or zone, got "
            f"{value.isoformat()!r} (the zone comes from tz)"
        )
    if value.microsecond:
        raise InvalidInput(f"local_start: must be whole seconds, got {value.isoformat()!r}")
    if not MIN_START_YEAR <= value.year <= MAX_START_YEAR:
        raise InvalidInput(
            f"local_start: year must be {MIN_START_YEAR}..{MAX_START_YEAR}, "
            f"got {value.isoformat()!r}"
        )


def _policy(name: str, value: object, allowed: tuple[str, ...]) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    _check_choice(name, text, allowed)
    assert isinstance(text, str)
    return text


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        choices = " or ".join(repr(choice) for choice in allowed)
        raise InvalidInput(f"{name}: must be {choices}, got {value!r}")


def _check_limit(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LIMIT:
        raise InvalidInput(f"{name}: must be a whole number from 0 to {MAX_LIMIT}, got {value!r}")


def _require_aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name}: must be an aware datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(
            f"{name}: must carry a UTC offset or zone, got naive {value.isoformat()!r}"
        )
    return value.astimezone(UTC)


def first_due(rec: Recurrence, now: datetime, *, inclusive: bool = True) -> Occurrence | None:
    """A new series starts at its first occurrence at or after now; a re-ruled one strictly
    after now (what was due at this very instant went out under the old rule)."""
    return rec.next_after(now - timedelta(microseconds=1) if inclusive else now)
