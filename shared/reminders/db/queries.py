"""Loads the named SQL blocks of queries.sql (``-- name: xyz`` starts a block)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)


@cache
def _all() -> dict[str, str]:
    text = resources.files("reminders.db").joinpath("queries.sql").read_text()
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise RuntimeError(f"queries.sql names {name!r} twice")
        blocks[name] = body.strip().rstrip(";")
    return blocks


def query(name: str) -> str:
    try:
        return _all()[name]
    except KeyError:
        raise KeyError(f"queries.sql has no block named {name!r}") from None


def names() -> list[str]:
    return sorted(_all())
