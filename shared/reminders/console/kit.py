"""What a route module of the console is given by :func:`reminders.console.app.create_app`:
the context, and the app's own ways to render a page, run a read, run a checked POST and take
a form's reason, so that every page keeps the app's rules (one statement timeout, one error
line, the CSRF and origin checks, the command line's reason rule)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from reminders.console.context import ConsoleContext

Work = Callable[[Any], dict[str, Any]]
FormWork = Callable[[Any, FormData], dict[str, Any]]


@dataclass(frozen=True)
class Kit:
    ctx: ConsoleContext
    # read(request, work, template): work(conn) off the event loop, in a read transaction
    read: Callable[[Request, Work, str], Awaitable[Response]]
    # posted(request, work, template): the form checked (CSRF, origin), then work(conn, form)
    posted: Callable[[Request, FormWork, str], Awaitable[Response]]
    # reason_of(form): the required reason, by the command line's rule and message
    reason_of: Callable[[FormData], str]
