"""The console's Schedules list, a schedule's page, and its pause, resume, trigger and
backfill. Every read and write is :mod:`reminders.schedule_commands`' (the functions
``reminders schedules ...`` and the operations function call), so the console and the command
line leave the same rows and the same operator actions; the console's carry ``via console``,
the console user's name and a required reason."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import FormData, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reminders import schedule_commands as commands
from reminders.console.kit import Kit
from reminders.console.params import limit as _limit
from reminders.console.params import query as _query
from reminders.console.params import text as _text
from reminders.errors import InvalidInput

HOLDS = ("pause", "resume", "trigger")
PAGE_SIZES = (25, 50, 100, 200)
BACKFILL_DEFAULT = 100


def _named(params: QueryParams | FormData) -> tuple[str, str | None]:

    key, tenant = _text(params, "key"), _text(params, "tenant")
    if key is None:
        raise InvalidInput("a schedule is named by its key (and its tenant)")
    return key, tenant


def _window(params: QueryParams | FormData) -> tuple[str, str, int]:

    start, end = _text(params, "from"), _text(params, "to")
    if start is None or end is None:
        raise InvalidInput("backfill: give the window's start (from) and end (to), "
                           "ISO-8601 instants")
    return start, end, _limit(_text(params, "limit"), "limit", BACKFILL_DEFAULT,
                              commands.MAX_BACKFILL)


def schedule_link(tenant: str, key: str) -> str:

    return "/schedule?" + _query({"tenant": tenant, "key": key})


def routes(kit: Kit) -> list[Route]:
    ctx = kit.ctx

    async def schedules_list(request: Request) -> Response:

        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            tenant, state = _text(params, "tenant"), _text(params, "state")
            after = _text(params, "after")
            limit = _limit(_text(params, "limit"), "limit", 100, max(PAGE_SIZES))
            # one more than shown: whether another page follows, as the command line knows
            rows = commands.list_schedules(conn, limit=limit + 1, tenant=tenant, state=state,
                                           after=after).data
            more = len(rows) > limit
            rows = rows[:limit]
            following = (f"{rows[-1]['tenant']}/{rows[-1]['schedule_key']}"
                         if rows and more else None)
            return {"title": "Schedules", "rows": rows, "more": more, "limit": limit,
                    "filters": {"tenant": tenant, "state": state}, "next_cursor": following,
                    "paged": after is not None, "schedule_states": commands.STATES,
                    "page_sizes": PAGE_SIZES}

        return await kit.read(request, work, "schedules.html")

    async def schedule_page(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            key, tenant = _named(params)
            data = commands.show(conn, key=key, tenant=tenant, now=ctx.now()).data
            return {"title": f"Schedule {data['schedule_key']}", "s": data, "now": ctx.now()}

        return await kit.read(request, work, "schedule.html")

    async def hold_confirm(request: Request) -> Response:

        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            key, tenant = _named(params)
            do = _text(params, "do")
            if do not in HOLDS:
                raise InvalidInput(f"do: one of {', '.join(HOLDS)}, got {do!r}")
            data = commands.show(conn, key=key, tenant=tenant, now=ctx.now()).data
            return {"title": f"Confirm: {do}", "s": data, "do": do, "now": ctx.now()}

        return await kit.read(request, work, "confirm_schedule.html")

    async def hold_run(request: Request) -> Response:

        def work(conn: Any, form: FormData) -> dict[str, Any]:
            key, tenant = _named(form)
            do = _text(form, "do")
            if do not in HOLDS:
                raise InvalidInput(f"do: one of {', '.join(HOLDS)}, got {do!r}")
            reason = kit.reason_of(form)
            if do == "trigger":
                outcome = commands.trigger(conn, now=ctx.now(), key=key, tenant=tenant,
                                           who=ctx.actor, via="console", reason=reason)
            else:
                outcome = commands.hold(conn, now=ctx.now(), key=key, tenant=tenant,
                                        paused=do == "pause", who=ctx.actor, via="console",
                                        reason=reason)
            data = outcome.data
            return {"title": "Done", "what": (outcome.text or "").splitlines()[0],
                    "result": data, "made": data.get("triggered", []),
                    "links": [("the schedule", schedule_link(data["tenant"],
                                                             data["schedule_key"]))]}

        return await kit.posted(request, work, "done_schedule.html")

    async def backfill_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            key, tenant = _named(params)
            start, end, limit = _window(params)
            dry = commands.backfill(conn, now=ctx.now(), key=key, tenant=tenant, start=start,
                                    end=end, limit=limit, who=None, via="console",
                                    dry_run=True).data
            return {"title": "Confirm: backfill", "dry": dry, "limit": limit,
                    "given": {"from": start, "to": end}, "now": ctx.now()}

        return await kit.read(request, work, "confirm_backfill.html")

    async def backfill_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            key, tenant = _named(form)
            start, end, limit = _window(form)
            outcome = commands.backfill(conn, now=ctx.now(), key=key, tenant=tenant,
                                        start=start, end=end, limit=limit, who=ctx.actor,
                                        via="console", reason=kit.reason_of(form))
            data = outcome.data
            what = (f"backfilled {data['schedule_key']}: {len(data['made'])} deliveries made "
                    f"for {data['occurrences']} occurrences in the window (those that exist "
                    "are never made again)")
            if data["more"]:
                what += f"; more occurrences than the limit {limit}: run it again from the last"
            return {"title": "Done", "what": what, "result": data, "made": data["made"],
                    "links": [("the schedule", schedule_link(data["tenant"],
                                                             data["schedule_key"]))]}

        return await kit.posted(request, work, "done_schedule.html")

    return [
        Route("/schedules", schedules_list),
        Route("/schedule", schedule_page),
        Route("/actions/schedule", hold_confirm, methods=["GET"]),
        Route("/actions/schedule", hold_run, methods=["POST"]),
        Route("/actions/schedule/backfill", backfill_confirm, methods=["GET"]),
        Route("/actions/schedule/backfill", backfill_run, methods=["POST"]),
    ]
