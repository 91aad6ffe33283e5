"""The console's pages and actions (Starlette, Jinja2 templates; one script of its own,
static/live.js, refreshes the overview's live region in place: nothing inline, no build step).

Every read and every action goes through :mod:`reminders.operator`, as the command line's do.
Actions are two steps: a GET shows what would change (a bulk action's count and keys, from a
dry run) and a form with a required reason; the POST does it. Every POST carries this
process's CSRF token and, when the browser sends one, an Origin of this console; the Host
header must name this machine, so a page elsewhere can neither post here nor read a page
through a name rebound to 127.0.0.1.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, QueryParams
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from reminders import db, operator
from reminders.cli_format import duration
from reminders.console import live, story, timefmt
from reminders.console.context import (
    ACCESS_COOKIE,
    ACCESS_PARAMETER,
    Access,
    ConsoleContext,
    allowed_hosts,
)
from reminders.console.params import limit as _limit
from reminders.console.params import query as _query
from reminders.console.params import text as _text
from reminders.errors import DatabaseUnavailable, InvalidInput, NotFound, RemindersError
from reminders.reasons import MAX_REASON_LENGTH, checked_reason

HERE = Path(__file__).resolve().parent
CHANNELS = ("webhook", "email", "sms")
PAGE_SIZES = (25, 50, 100, 200)
BULK_LIMIT_MAX = 1000
FILTERS = ("state", "tenant", "kind", "channel", "recipient", "due_from", "due_to")
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; script-src 'self'; "
                                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _instant(text: str | None, field: str) -> datetime | None:
    """An ISO-8601 instant; without an offset it is read as UTC (the page says so)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise InvalidInput(f"{field}: not an ISO-8601 instant: {text!r} "
                           "(e.g. 2027-03-01T09:00:00Z)") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def _cursor(text: str | None) -> tuple[datetime, int] | None:
    if text is None:
        return None
    stamp, _, ident = text.rpartition("/")
    if not stamp or not ident.isdigit():
        raise InvalidInput(f"after: not a page cursor: {text!r}")
    value = _instant(stamp, "after")
    assert value is not None
    return value, int(ident)


def _filters(params: QueryParams | FormData, *, states: tuple[str, ...]) -> dict[str, Any]:
    state = _text(params, "state")
    if state is not None and state not in states:
        raise InvalidInput(f"state: one of {', '.join(states)}, got {state!r}")
    channel = _text(params, "channel")
    if channel is not None and channel not in CHANNELS:
        raise InvalidInput(f"channel: one of {', '.join(CHANNELS)}, got {channel!r}")
    return {"state": state, "tenant": _text(params, "tenant"), "kind": _text(params, "kind"),
            "channel": channel, "recipient": _text(params, "recipient"),
            "due_from": _instant(_text(params, "due_from"), "due from"),
            "due_to": _instant(_text(params, "due_to"), "due to")}


class AccessGate:
    """Refuses what may not use the console before any page runs: without the proxy's header
    (behind an authenticating proxy), or without the access token's cookie (on a non-loopback
    address). The token itself, given once in the URL printed at start, is exchanged for an
    HttpOnly, SameSite=Strict cookie and taken out of the address bar."""

    def __init__(self, app: Any, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or (self.access.token is None
                                        and self.access.proxy_header is None):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if self.access.proxy_header is not None:
            if request.headers.get(self.access.proxy_header, "").strip():
                await self.app(scope, receive, send)
                return
            await _refused(scope, receive, send, 403, f"no {self.access.proxy_header} header: "
                           "this console answers only through its authenticating proxy")
            return
        token = self.access.token
        assert token is not None
        if hmac.compare_digest(request.cookies.get(ACCESS_COOKIE, ""), token):
            await self.app(scope, receive, send)
            return
        given = request.query_params.get(ACCESS_PARAMETER)
        if given is not None and hmac.compare_digest(given, token):
            rest = [(k, v) for k, v in request.query_params.multi_items()
                    if k != ACCESS_PARAMETER]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = Response(status_code=303, headers={"Location": target, **SECURITY_HEADERS})
            response.set_cookie(ACCESS_COOKIE, token, httponly=True, samesite="strict",
                                path="/")
            await response(scope, receive, send)
            return
        await _refused(scope, receive, send, 401, "open the console with the URL it printed "
                       "when it started (its access token)")


async def _refused(scope: Any, receive: Any, send: Any, code: int, why: str) -> None:
    from html import escape

    response = Response(f"<!doctype html><title>Refused</title><p>{escape(why)}</p>",
                        status_code=code, media_type="text/html", headers=SECURITY_HEADERS)
    await response(scope, receive, send)


def create_app(ctx: ConsoleContext, *, hosts: list[str] | None = None,
               access: Access | None = None) -> Starlette:
    token = secrets.token_urlsafe(32)  # this process's: a console restarted needs a reload
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    env = templates.env
    env.globals.update(csrf_token=token, refresh_seconds=ctx.refresh_seconds,
                       states=operator.STATES, parked_states=operator.PARKED_STATES,
                       bulk_states=operator.BULK_STATES, channels=CHANNELS,
                       targets=operator.RECONCILE_TARGETS, actor=ctx.actor,
                       page_sizes=PAGE_SIZES, max_reason_length=MAX_REASON_LENGTH)
    env.filters["duration"] = lambda v: duration(v, none="-")
    env.filters["query"] = _query
    env.filters["when"] = timefmt.when
    env.filters["instant"] = lambda v: timefmt.absolute(v) if v else ""
    env.filters["detail"] = timefmt.detail
    env.globals["bulk_limit"] = BULK_LIMIT_MAX

    def page(request: Request, name: str, context: dict[str, Any],
             status_code: int = 200) -> Response:
        response = templates.TemplateResponse(request, name, context, status_code=status_code)
        response.headers.update(SECURITY_HEADERS)
        return response

    def failure(request: Request, exc: BaseException) -> Response:
        if isinstance(exc, NotFound):
            code = 404
        elif isinstance(exc, DatabaseUnavailable):
            code = 503
        elif isinstance(exc, RemindersError):
            code = 400
        else:
            code = 500
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if code == 500:
            first = f"{type(exc).__name__}: {first}"
        return page(request, "error.html", {"title": "Error", "message": first}, code)

    def fetch(work: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """``work(conn)`` on a connection of its own, under the console's read timeout."""
        with ctx.connect() as conn:
            if ctx.read_timeout_ms is None:
                return work(conn)
            with db.transaction(conn):
                db.execute(conn, "transaction_statement_timeout",
                           {"value": f"{ctx.read_timeout_ms}ms"})
                return work(conn)

    async def read(request: Request, work: Callable[[Any], dict[str, Any]],
                   name: str) -> Response:
        """Run ``work(conn)`` off the event loop on a connection of its own; render ``name``."""
        try:
            context = await run_in_threadpool(fetch, work)
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)
        return page(request, name, context)

    def figures_of(tenant: str | None) -> dict[str, Any]:
        return fetch(lambda conn: live.figures(ctx, conn, tenant=tenant))

    shared = live.SharedFigures(figures_of, seconds=ctx.refresh_seconds, clock=ctx.monotonic)

    def check_post(request: Request, form: FormData) -> None:
        sent = form.get("csrf")
        if not isinstance(sent, str) or not hmac.compare_digest(sent, token):
            raise Forbidden("the form is stale or came from elsewhere (no valid CSRF token): "
                            "reload the page and try again")
        origin = request.headers.get("origin")
        if (origin is not None and origin != "null"
                and urlsplit(origin).netloc != request.headers.get("host")):
            raise Forbidden(f"a form posted from another origin ({origin}) is refused")
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            raise Forbidden("a form posted from another site is refused")

    def reason_of(form: FormData) -> str:
        """Every action needs a reason, by the command line's rule (and its message)."""
        value = form.get("reason")
        return checked_reason(value if isinstance(value, str) else None, required=True)

    async def posted(request: Request, work: Callable[[Any, FormData], dict[str, Any]],
                     name: str) -> Response:
        try:
            form = await request.form(max_files=0, max_fields=2 * BULK_LIMIT_MAX + 50)
            check_post(request, form)
        except Forbidden as exc:
            return page(request, "error.html", {"title": "Refused", "message": str(exc)}, 403)
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)

        def run() -> dict[str, Any]:
            with ctx.connect() as conn:
                return work(conn, form)

        try:
            context = await run_in_threadpool(run)
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)
        return page(request, name, context)

    # ------------------------------------------------------------------ pages

    async def overview(request: Request) -> Response:
        """Read afresh (a reload shows the figures of now), and shared with the live regions
        of every open overview for the rest of the period."""
        try:
            tenant = _text(request.query_params, "tenant")
            context = await run_in_threadpool(figures_of, tenant)
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)
        shared.put(tenant, context)
        return page(request, "overview.html", dict(context))

    async def live_region(request: Request) -> Response:
        """The overview's live region alone, for static/live.js to put in place: the figures
        of this refresh period, read once for every open page (live.SharedFigures)."""
        try:
            tenant = _text(request.query_params, "tenant")
            context = await run_in_threadpool(shared.get, tenant)
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)
        return page(request, "live.html", dict(context))

    async def attention(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            filters = _filters(params, states=operator.PARKED_STATES)
            limit = _limit(_text(params, "limit"), "limit", 50, 500)
            after = _cursor(_text(params, "after"))
            rows, more = operator.attention(conn, limit=limit, after=after, **filters)
            following = (f"{rows[-1]['due_at']}/{rows[-1]['id']}" if rows and more else None)
            return {"title": "Attention", "rows": rows, "more": more, "filters": filters,
                    "limit": limit, "next_cursor": following, "paged": after is not None,
                    "now": ctx.now()}

        return await read(request, work, "attention.html")

    async def browse(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            filters = _filters(params, states=operator.STATES)
            sort = _text(params, "sort") or "due"
            if sort not in operator.SORTS:
                raise InvalidInput(f"sort: one of {', '.join(operator.SORTS)}, got {sort!r}")
            limit = _limit(_text(params, "limit"), "limit", 50, max(PAGE_SIZES))
            after = _cursor(_text(params, "after"))
            schedule = _text(params, "schedule")
            rows, more = operator.deliveries(conn, limit=limit, after=after, sort=sort,
                                             schedule=schedule, **filters)
            following = operator.cursor_of(rows[-1], sort) if rows and more else None
            selectable = (filters["state"] in operator.BULK_STATES
                          and bool(filters["tenant"] or filters["kind"]))
            return {"title": "Deliveries", "rows": rows, "more": more, "filters": filters,
                    "limit": limit, "sort": sort, "next_cursor": following,
                    "schedule": schedule,
                    "paged": after is not None, "selectable": selectable,
                    "now": ctx.now()}

        return await read(request, work, "deliveries.html")

    async def settings(request: Request) -> Response:
        def work(conn: Any) -> dict[str, Any]:
            cap = 1000
            return {"title": "Tenants", "cap": cap, "now": ctx.now(),
                    "tenants": operator.tenants(conn, limit=cap),
                    "endpoints": operator.endpoints(conn, tenant=None, limit=cap),
                    "opt_outs": operator.opt_outs(conn, tenant=None, channel=None,
                                                  recipient=None, limit=cap)}

        return await read(request, work, "settings.html")

    async def goto(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            text = _text(params, "q") or ""
            found = operator.find(conn, text=text, tenant=_text(params, "tenant"))
            if not found:
                raise NotFound(f"no delivery, schedule or webhook-id {text!r}")
            return {"title": "Go to", "q": text, "found": found}

        try:
            context = await run_in_threadpool(_in_transaction(work))
        except Exception as exc:  # noqa: BLE001 - one line on the page, never a traceback
            return failure(request, exc)
        found = context["found"]
        if len(found) == 1 and found[0]["what"] == "delivery":
            target = "/delivery?" + _query({"tenant": found[0]["tenant"],
                                            "key": found[0]["key"]})
            return Response(status_code=303, headers={"Location": target, **SECURITY_HEADERS})
        if len(found) == 1:  # a schedule: its page, which links to all its deliveries
            target = "/schedule?" + _query({"tenant": found[0]["tenant"],
                                            "key": found[0]["key"]})
            return Response(status_code=303, headers={"Location": target, **SECURITY_HEADERS})
        return page(request, "goto.html", context)

    def _in_transaction(work: Callable[[Any], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            with ctx.connect() as conn:
                return work(conn)
        return run

    async def delivery(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            key, tenant = _text(params, "key"), _text(params, "tenant")
            if key is None or tenant is None:
                raise InvalidInput("a delivery is named by key and tenant")
            data = operator.show(conn, key=key, tenant=tenant)
            if "deliveries" in data:
                raise NotFound(f"{key!r} is a schedule key; pick one of its deliveries on "
                               "the Attention page or with `reminders show`")
            payload = operator.payload_of(conn, key=key, tenant=tenant)
            return {"title": f"Delivery {key}", "d": data, "now": ctx.now(),
                    "payload": story.payload_view(payload),
                    "requests": story.webhook_requests(data, payload),
                    "timeline": story.timeline(data)}

        return await read(request, work, "delivery.html")

    # ------------------------------------------------------------------ actions

    async def reconcile_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            key, tenant = _text(params, "key"), _text(params, "tenant")
            target = _text(params, "as")
            if key is None or tenant is None:
                raise InvalidInput("a delivery is named by key and tenant")
            if target not in operator.RECONCILE_TARGETS:
                raise InvalidInput(f"as: one of {', '.join(operator.RECONCILE_TARGETS)}")
            data = operator.show(conn, key=key, tenant=tenant)
            return {"title": "Confirm: reconcile", "d": data, "target": target}

        return await read(request, work, "confirm_reconcile.html")

    async def reconcile_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            key, tenant = _text(form, "key"), _text(form, "tenant")
            target = _text(form, "as")
            if key is None or tenant is None or target is None:
                raise InvalidInput("a delivery is named by key and tenant, and `as` is needed")
            result = operator.reconcile(conn, key=key, tenant=tenant, target=target,
                                        reason=reason_of(form), note=f"console, by {ctx.actor}",
                                        now=ctx.now(), who=ctx.actor)
            return {"title": "Done", "what": f"reconciled {key} as {target}",
                    "result": result, "links": [("the delivery", "/delivery?" + _query(
                        {"tenant": tenant, "key": key}))]}

        return await posted(request, work, "done.html")

    async def bulk_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            filters = _filters(params, states=operator.BULK_STATES)
            target = _text(params, "as") or "retry"
            limit = _limit(_text(params, "limit"), "limit", 100, BULK_LIMIT_MAX)
            data = operator.reconcile_bulk(conn, target=target, reason="(counting)",
                                           limit=limit, now=ctx.now(), actor=ctx.actor,
                                           via="console", dry_run=True, **filters)
            return {"title": "Confirm: bulk reconcile", "filters": filters, "target": target,
                    "limit": limit, "data": data}

        return await read(request, work, "confirm_bulk.html")

    async def bulk_selected(request: Request) -> Response:
        """The rows ticked on the Deliveries page: the confirmation lists exactly those (a
        dry run of only those keys) and names each one that no longer matches, with why."""

        def work(conn: Any, form: FormData) -> dict[str, Any]:
            filters = _filters(form, states=operator.BULK_STATES)
            target = _text(form, "as") or "retry"
            keys = [k for k in form.getlist("keys") if isinstance(k, str)]
            if not keys:
                raise InvalidInput("no delivery selected: tick the rows to act on")
            if len(keys) > BULK_LIMIT_MAX:
                raise InvalidInput(f"{len(keys)} selected, at most {BULK_LIMIT_MAX} at once")
            data = operator.reconcile_bulk(conn, target=target, reason="(counting)",
                                           limit=len(keys), now=ctx.now(), actor=ctx.actor,
                                           via="console", dry_run=True, only_keys=keys,
                                           **filters)
            return {"title": "Confirm: bulk reconcile", "filters": filters, "target": target,
                    "limit": len(keys), "data": data, "selected": True}

        return await posted(request, work, "confirm_bulk.html")

    async def bulk_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            filters = _filters(form, states=operator.BULK_STATES)
            target = _text(form, "as") or ""
            limit = _limit(_text(form, "limit"), "limit", 100, BULK_LIMIT_MAX)
            keys = [k for k in form.getlist("keys") if isinstance(k, str)]
            expected = _limit(_text(form, "count"), "count", 0, BULK_LIMIT_MAX) if keys else 0
            if len(keys) != expected:
                raise InvalidInput("the form lost some of the deliveries it counted; "
                                   "count again")
            data = operator.reconcile_bulk(conn, target=target, reason=reason_of(form),
                                           limit=limit, now=ctx.now(), actor=ctx.actor,
                                           via="console", only_keys=keys, **filters)
            left = data.get("not_acted_on", [])
            what = (f"reconciled {len(data['reconciled'])} of the {len(keys)} counted "
                    f"{filters['state']} deliveries as {target}")
            if left:
                what += f"; {len(left)} not acted on (each named below with why)"
            return {"title": "Done", "what": what, "result": data, "links": [
                ("the attention list", "/attention?" + _query(
                    {k: v for k, v in filters.items() if k != "state"}))]}

        return await posted(request, work, "done.html")

    async def tenant_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            tenant = _text(params, "tenant")
            pause = _text(params, "pause")
            if tenant is None or pause not in ("0", "1"):
                raise InvalidInput("name a tenant, and pause=1 or pause=0")
            return {"title": "Confirm: " + ("pause" if pause == "1" else "resume"),
                    "tenant": operator.tenant(conn, tenant=tenant), "pause": pause == "1"}

        return await read(request, work, "confirm_tenant.html")

    async def tenant_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            tenant = _text(form, "tenant")
            pause = _text(form, "pause")
            if tenant is None or pause not in ("0", "1"):
                raise InvalidInput("name a tenant, and pause=1 or pause=0")
            result = operator.set_tenant_paused(conn, tenant=tenant, paused=pause == "1",
                                                now=ctx.now(), actor=ctx.actor, via="console",
                                                reason=reason_of(form))
            verb = "paused" if pause == "1" else "resumed"
            return {"title": "Done", "what": f"tenant {tenant} {verb}" + (
                "" if result["changed"] else " (it already was)"), "result": result,
                "links": [("the overview", "/")]}

        return await posted(request, work, "done.html")

    routes = [
        Route("/", overview),
        Route("/live", live_region),
        Route("/attention", attention),
        Route("/delivery", delivery),
        Route("/deliveries", browse),
        Route("/go", goto),
        Route("/tenants", settings),
        Route("/actions/reconcile", reconcile_confirm, methods=["GET"]),
        Route("/actions/reconcile", reconcile_run, methods=["POST"]),
        Route("/actions/bulk", bulk_confirm, methods=["GET"]),
        Route("/actions/bulk", bulk_run, methods=["POST"]),
        Route("/actions/bulk/selected", bulk_selected, methods=["POST"]),
        Route("/actions/tenant", tenant_confirm, methods=["GET"]),
        Route("/actions/tenant", tenant_run, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    # The pages in modules of their own (schedules; kinds, endpoints, opt-outs, limits).
    from reminders.console import operator_pages, schedule_pages
    from reminders.console.kit import Kit

    kit = Kit(ctx=ctx, read=read, posted=posted, reason_of=reason_of)
    routes[-1:-1] = [*schedule_pages.routes(kit), *operator_pages.routes(kit)]
    middleware = [Middleware(TrustedHostMiddleware,
                             allowed_hosts=hosts or allowed_hosts("127.0.0.1")),
                  Middleware(AccessGate, access=access or Access())]
    return Starlette(routes=routes, middleware=middleware)


class Forbidden(Exception):
    """A POST that did not come from this console's own page."""
