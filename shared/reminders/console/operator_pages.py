"""The console's Kinds, Endpoints and Opt-outs pages and a tenant's limits: each list is the
command line's ``... list --json``, and each change calls the function its command calls
(:mod:`reminders.settings_commands`, ``operator.set_tenant_limits``), its fields parsed by
the command's own parsers (so a bad value is refused with the command's message, naming its
flag), behind a confirmation with a required reason, recorded with who and why.

An endpoint's secret is never shown, and never typed here: an endpoint is added, or its secret
rotated, with the command line (which reads the secret from a file or the environment); here
it is removed, or a rotation in progress is finished."""

from __future__ import annotations

import argparse
from typing import Any

from starlette.datastructures import FormData, QueryParams
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from reminders import operator, settings_commands
from reminders.console.kit import Kit
from reminders.console.params import query as _query
from reminders.console.params import text
from reminders.errors import InvalidInput

CHANNELS = ("webhook", "email", "sms")
LIST_CAP = 1000
# ``kinds set``'s flags, as the form's fields (blank: the flag left out, its value kept).
KIND_TEXT_FIELDS = ("stale_after", "backoff_base", "backoff_cap", "retention", "spread")
KIND_NUMBER_FIELDS = ("max_attempts", "redrive_budget", "priority")
ENDPOINT_ACTIONS = ("remove", "finish")


def _text(params: QueryParams | FormData, name: str) -> str | None:

    return text(params, name)


def _whole(text: str | None, flag: str) -> int | None:
    """As argparse's ``type=int`` for the flag, with the flag named."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"{flag}: expected a whole number, got {text!r}") from None


def kind_args(form: FormData, name: str) -> argparse.Namespace:
    """The form as the parsed flags of ``kinds set NAME`` (a field left blank: its flag left
    out). Send windows: one per line."""
    values: dict[str, Any] = {f: _text(form, f) for f in KIND_TEXT_FIELDS}
    for f in KIND_NUMBER_FIELDS:
        values[f] = _whole(_text(form, f), "--" + f.replace("_", "-"))
    windows = _text(form, "send_window")
    values["send_window"] = ([w.strip() for w in windows.splitlines() if w.strip()]
                             if windows else None)
    return argparse.Namespace(name=name, **values)


def _tenant_limit(text: str | None, flag: str) -> Any:
    """As ``tenants set``'s flag: a whole number or 'default'; blank keeps it."""
    from reminders import cli_tenants

    if text is None:
        return operator.KEEP
    try:
        return cli_tenants._limit(flag)(text)
    except argparse.ArgumentTypeError as exc:
        raise InvalidInput(str(exc)) from None


def routes(kit: Kit) -> list[Route]:

    ctx = kit.ctx

    # ---------------------------------------------------------------- kinds

    async def kinds_page(request: Request) -> Response:
        def work(conn: Any) -> dict[str, Any]:
            return {"title": "Kinds", "kinds": settings_commands.kinds(conn)}

        return await kit.read(request, work, "kinds.html")

    async def kind_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            name = _text(params, "name")
            current = next((k for k in settings_commands.kinds(conn) if k["name"] == name),
                           None)
            return {"title": "Confirm: kinds set", "name": name, "current": current}

        return await kit.read(request, work, "confirm_kind.html")

    async def kind_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            from reminders.cli.endpoints_kinds import kind_set_options

            name = _text(form, "name")
            if name is None:
                raise InvalidInput("name: give the kind's name, e.g. trip")
            options = kind_set_options(kind_args(form, name))
            data = settings_commands.set_kind(conn, name=name, now=ctx.now(), who=ctx.actor,
                                              via="console", reason=kit.reason_of(form),
                                              **options)
            return {"title": "Done", "what": f"kind {name} set" + (
                "" if data["changed"] else " (it already was)"), "result": data,
                "links": [("the kinds", "/kinds")]}

        return await kit.posted(request, work, "done.html")

    # ---------------------------------------------------------------- endpoints

    async def endpoints_page(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            tenant = _text(params, "tenant")
            return {"title": "Endpoints", "tenant": tenant,
                    "endpoints": operator.endpoints(conn, tenant=tenant, limit=LIST_CAP),
                    "cap": LIST_CAP}

        return await kit.read(request, work, "endpoints.html")

    def endpoint_named(params: QueryParams | FormData) -> tuple[str, str | None, str]:
        url, tenant, do = _text(params, "url"), _text(params, "tenant"), _text(params, "do")
        if url is None:
            raise InvalidInput("an endpoint is named by its URL (and its tenant, if any)")
        if do not in ENDPOINT_ACTIONS:
            raise InvalidInput(f"do: one of {', '.join(ENDPOINT_ACTIONS)}, got {do!r}")
        return url, tenant, do

    async def endpoint_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            url, tenant, do = endpoint_named(params)
            found = [e for e in operator.endpoints(conn, tenant=tenant, limit=LIST_CAP)
                     if e["url"] == url and e["tenant"] == tenant]
            if not found:
                from reminders.errors import NotFound

                whose = f"tenant {tenant}" if tenant else "every tenant"
                raise NotFound(f"no endpoint {url} registered for {whose}")
            return {"title": f"Confirm: {do}", "e": found[0], "do": do}

        return await kit.read(request, work, "confirm_endpoint.html")

    async def endpoint_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            url, tenant, do = endpoint_named(form)
            reason = kit.reason_of(form)
            if do == "remove":
                settings_commands.remove_endpoint(conn, url=url, tenant=tenant, now=ctx.now(),
                                                  who=ctx.actor, via="console", reason=reason)
                what = f"endpoint removed: {url}"
            else:
                settings_commands.finish_rotation(conn, url=url, tenant=tenant, now=ctx.now(),
                                                  who=ctx.actor, via="console", reason=reason)
                what = f"rotation finished: {url} signs with the new secret only"
            return {"title": "Done", "what": what, "result": {},
                    "links": [("the endpoints", "/endpoints")]}

        return await kit.posted(request, work, "done.html")

    # ---------------------------------------------------------------- opt-outs

    async def opt_outs_page(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            filters = {"tenant": _text(params, "tenant"), "channel": _text(params, "channel"),
                       "recipient": _text(params, "recipient")}
            if filters["channel"] is not None and filters["channel"] not in CHANNELS:
                raise InvalidInput(f"channel: one of {', '.join(CHANNELS)}, "
                                   f"got {filters['channel']!r}")
            return {"title": "Opt-outs", "filters": filters, "cap": LIST_CAP,
                    "opt_outs": operator.opt_outs(conn, limit=LIST_CAP, **filters)}

        return await kit.read(request, work, "opt_outs.html")

    def opt_named(params: QueryParams | FormData) -> tuple[str, str, str, bool]:
        tenant, recipient = _text(params, "tenant"), _text(params, "recipient")
        channel, out = _text(params, "channel"), _text(params, "out")
        if tenant is None or recipient is None:
            raise InvalidInput("an opt-out is named by tenant, recipient and channel")
        if channel not in CHANNELS:
            raise InvalidInput(f"channel: one of {', '.join(CHANNELS)}, got {channel!r}")
        if out not in ("0", "1"):
            raise InvalidInput("out=1 (opt out) or out=0 (opt back in)")
        return tenant, recipient, channel, out == "1"

    async def opt_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            from reminders.operator_commands import plain_text

            tenant, recipient, channel, out = opt_named(params)
            plain_text(recipient, "recipient")
            return {"title": "Confirm: " + ("opt-out" if out else "opt-in"),
                    "tenant": tenant, "recipient": recipient, "channel": channel, "out": out}

        return await kit.read(request, work, "confirm_opt.html")

    async def opt_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            tenant, recipient, channel, out = opt_named(form)
            data = settings_commands.set_opt_out(
                conn, tenant=tenant, recipient=recipient, channel=channel, opted_out=out,
                now=ctx.now(), who=ctx.actor, via="console", reason=kit.reason_of(form),
                field="recipient")
            verb = "opted out of" if out else "opted in to"
            return {"title": "Done", "what": f"{recipient} {verb} {channel}" + (
                "" if data["changed"] else " (already)"), "result": data,
                "links": [("the opt-outs", "/opt-outs?" + _query({"tenant": tenant}))]}

        return await kit.posted(request, work, "done.html")

    # ---------------------------------------------------------------- a tenant's limits

    async def limits_confirm(request: Request) -> Response:
        params = request.query_params

        def work(conn: Any) -> dict[str, Any]:
            tenant = _text(params, "tenant")
            listed = operator.tenants(conn, limit=LIST_CAP)
            if tenant is None:
                current = None
            else:
                current = next((t for t in listed if t["tenant"] == tenant), None)
                if current is None:
                    operator.tenant(conn, tenant=tenant)  # its NotFound, as the command's
            return {"title": "Confirm: tenants set", "tenant": tenant, "current": current}

        return await kit.read(request, work, "confirm_limits.html")

    async def limits_run(request: Request) -> Response:
        def work(conn: Any, form: FormData) -> dict[str, Any]:
            tenant = _text(form, "tenant")
            limits = {name: _tenant_limit(_text(form, name), "--" + name.replace("_", "-"))
                      for name in operator.LIMITS}
            if all(v is operator.KEEP for v in limits.values()):
                raise InvalidInput("tenants set: give --max-pending, --schedules-per-minute "
                                   "or both")
            data = operator.set_tenant_limits(conn, tenant=tenant, now=ctx.now(),
                                              actor=ctx.actor, via="console",
                                              reason=kit.reason_of(form), **limits)
            who = f"tenant {tenant}" if tenant else "the default"
            return {"title": "Done", "what": f"{who}: limits set" + (
                "" if data["changed"] else " (already)"), "result": data,
                "links": [("the tenants", "/tenants")]}

        return await kit.posted(request, work, "done.html")

    return [
        Route("/kinds", kinds_page),
        Route("/actions/kind", kind_confirm, methods=["GET"]),
        Route("/actions/kind", kind_run, methods=["POST"]),
        Route("/endpoints", endpoints_page),
        Route("/actions/endpoint", endpoint_confirm, methods=["GET"]),
        Route("/actions/endpoint", endpoint_run, methods=["POST"]),
        Route("/opt-outs", opt_outs_page),
        Route("/actions/opt", opt_confirm, methods=["GET"]),
        Route("/actions/opt", opt_run, methods=["POST"]),
        Route("/actions/tenant-limits", limits_confirm, methods=["GET"]),
        Route("/actions/tenant-limits", limits_run, methods=["POST"]),
    ]
