"""Every page of the console, once each, on the traffic of ``tests/console_traffic.py``: what
``make screenshots`` photographs (docs/console-<name>.png) and what the browser tests read for
words that must never show (``None``, ``{}``, microseconds). A new page is one line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode


def tick_two_rows(page: Any) -> None:
    for box in page.locator("input.select").all()[:2]:
        box.check()


def open_first_parked(page: Any) -> None:
    with page.expect_navigation():
        page.locator("tr.parked-row a").first.click()


def open_first_schedule(page: Any) -> None:
    with page.expect_navigation():
        page.locator("td.key a").first.click()


def give_a_reason(page: Any) -> None:
    page.fill("input[name=reason]", "globex fixed their endpoint (ticket 4711)")


@dataclass(frozen=True)
class Page:
    """``name``: the screenshot's (docs/console-<name>.png); ``path``: what the browser opens;
    ``then``: what it does there first (tick rows, follow a link, fill a form), if anything."""

    name: str
    path: str
    then: Callable[[Any], None] | None = None


PAGES = (
    Page("overview", "/"),
    Page("overview-tenant", "/?tenant=globex"),
    Page("deliveries", "/deliveries?tenant=globex&state=dead", tick_two_rows),
    Page("attention", "/attention"),
    Page("delivery", "/attention?tenant=globex&state=dead", open_first_parked),
    Page("bulk-confirm", "/actions/bulk?" + urlencode(
        {"tenant": "globex", "state": "dead", "as": "retry", "limit": 100}), give_a_reason),
    Page("tenant-confirm", "/actions/tenant?tenant=initech&pause=0", give_a_reason),
    Page("deliveries-by-change", "/deliveries?sort=updated"),
    Page("tenants", "/tenants"),
    Page("schedules", "/schedules"),
    Page("schedule", "/schedules", open_first_schedule),
    Page("kinds", "/kinds"),
    Page("endpoints", "/endpoints"),
    Page("opt-outs", "/opt-outs"),
)
