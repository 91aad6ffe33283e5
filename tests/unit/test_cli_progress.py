"""The progress line: what is being done, the counts so far and the time left where known,
redrawn in place at most ten times a second, erased at the end; nothing at all unless both
stdout and stderr are terminals and ``--quiet`` is not given."""

from __future__ import annotations

import io

from reminders.cli.progress import Progress, wanted


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn(stream: io.StringIO) -> list[str]:
    return [part for part in stream.getvalue().split("\r\x1b[K") if part]


def test_the_time_left_is_estimated_from_the_pace_so_far() -> None:
    clock, out = Clock(), io.StringIO()
    with Progress("reconcile", enabled=True, stream=out, clock=clock) as shown:
        shown.show("reconciling", done=0, total=4)
        clock.now += 30
        shown.show("reconciling", done=1, total=4)
        clock.now += 30
        shown.show("reconciling", done=4, total=4)
    assert drawn(out) == ["reconcile: reconciling; 0 of 4",
                          "reconcile: reconciling; 1 of 4; about 1m30s left",
                          "reconcile: reconciling; 4 of 4"]
    assert out.getvalue().endswith("\r\x1b[K")  # erased when the work is over


def test_a_known_bound_is_shown_as_the_time_left() -> None:
    out = io.StringIO()
    Progress("work", enabled=True, stream=out, clock=Clock()).show("polling", left=59.6)
    assert drawn(out) == ["work: polling; about 1m left"]


def test_redraws_are_at_most_ten_a_second_unless_forced() -> None:
    clock, out = Clock(), io.StringIO()
    shown = Progress("work", enabled=True, stream=out, clock=clock)
    for n in range(50):
        shown.show(f"{n} records")
        clock.now += 0.01
    assert drawn(out) == ["work: 0 records", "work: 10 records", "work: 20 records",
                          "work: 30 records", "work: 40 records"]
    shown.show("done", force=True)
    assert drawn(out)[-1] == "work: done"


def test_disabled_it_writes_nothing() -> None:
    out = io.StringIO()
    with Progress("drill", enabled=False, stream=out) as shown:
        shown.show("running", done=1, total=8, force=True)
    assert out.getvalue() == ""


def test_shown_only_when_both_streams_are_terminals_and_not_quiet() -> None:
    tty, pipe = Terminal(), io.StringIO()
    assert wanted(False, tty, tty)
    assert not wanted(True, tty, tty)
    assert not wanted(False, pipe, tty)  # `reminders work | tee log`
    assert not wanted(False, tty, pipe)  # `reminders work 2>log`


def test_what_a_terminal_would_act_on_is_escaped_in_the_line() -> None:
    out = io.StringIO()
    Progress("backfill", enabled=True, stream=out, clock=Clock()).show("key \x1b]0;x\x07")
    assert drawn(out) == ["backfill: key \\x1b]0;x\\x07"]
