"""Reading a page's query and form values, and writing a query string: shared by every page
module of the console (app, schedule_pages, operator_pages), so each imports it and none
imports another."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from starlette.datastructures import FormData, QueryParams

from reminders.errors import InvalidInput


def text(params: QueryParams | FormData, name: str) -> str | None:
    value = params.get(name)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


def limit(text: str | None, field: str, default: int, high: int) -> int:
    if text is None:
        return default
    if not text.isdigit() or not 1 <= int(text) <= high:
        raise InvalidInput(f"{field}: a whole number from 1 to {high}, got {text!r}")
    return int(text)


def query(values: dict[str, Any]) -> str:
    clean = {k: (v.isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v)
             for k, v in values.items() if v not in (None, "")}
    return urlencode(clean)
