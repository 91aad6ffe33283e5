"""Loads the named SQL blocks of a .sql file in this package (``-- name: xyz`` starts a block).

``queries.sql`` holds every statement the service runs; ``checks.sql`` holds what only looks at
the service from outside (the invariant checker and the fault drills)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
SERVICE = "queries.sql"
CHECKS = "checks.sql"


@cache
def _all(source: str = SERVICE) -> dict[str, str]:
    text = resources.files("reminders.db").joinpath(source).read_text()
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise RuntimeError(f"{source} names {name!r} twice")
        blocks[name] = body.strip().rstrip(";")
    return blocks


def query(name: str, source: str = SERVICE) -> str:
    try:
        return _all(source)[name]
    except KeyError:
        raise KeyError(f"{source} has no block named {name!r}") from None


def names(source: str = SERVICE) -> list[str]:
    return sorted(_all(source))
