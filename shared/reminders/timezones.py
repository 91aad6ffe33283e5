"""IANA time zones, always read from the ``tzdata`` package.

The host's ``/usr/share/zoneinfo`` (what a bare ``zoneinfo.ZoneInfo("...")`` prefers) differs
between a laptop, a CI runner and the Lambda runtime, and it moves whenever the OS image does.
Every zone here is built from the ``tzdata`` wheel pinned with the code instead, so the same
release computes the same instants everywhere; :func:`tzdata_version` names the rules in use.

Zone objects are cached, so one name always gives the same object. A plain
``ZoneInfo.from_file`` object cannot be pickled or deep-copied (which ``dataclasses.asdict``
does to every value); :class:`TzdataZone` travels by name instead and comes back as the cached
zone.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from importlib import metadata, resources
from typing import Any
from zoneinfo import ZoneInfo

from reminders.errors import InvalidInput

__all__ = ["TzdataZone", "available_zones", "tzdata_package_version", "tzdata_version", "zone"]

_PACKAGE = "tzdata"
_MAX_NAME_LENGTH = 64
# IANA names are ASCII letters, digits, "_", "-" and "+" in "/"-separated parts ("Etc/GMT+5",
# "America/Port-au-Prince"); none contains a dot, so "..", "." and absolute paths cannot pass.
_NAME = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")
_TZIF_MAGIC = b"TZif"


class TzdataZone(ZoneInfo):
    """A zone read from the ``tzdata`` package; pickles and copies as its name."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (zone, (self.key,))


@cache
def available_zones() -> frozenset[str]:
    """Every zone name (canonical names and backward-compatible links) the package ships."""
    listing = resources.files(_PACKAGE).joinpath("zones")
    if listing.is_file():
        names = {line.strip() for line in listing.read_text(encoding="utf-8").splitlines()}
        return frozenset(name for name in names if name)
    # Older tzdata wheels have no "zones" index: walk the data directory instead.
    found: set[str] = set()
    root = resources.files(f"{_PACKAGE}.zoneinfo")
    stack = [("", root)]
    while stack:
        prefix, folder = stack.pop()
        for entry in folder.iterdir():
            name = f"{prefix}{entry.name}"
            if entry.is_dir():
                if not entry.name.startswith("__"):
                    stack.append((f"{name}/", entry))
            elif _NAME.fullmatch(name) and entry.read_bytes()[:4] == _TZIF_MAGIC:
                found.add(name)
    return frozenset(found)


@cache
def _case_insensitive_index() -> dict[str, str]:
    return {name.lower(): name for name in available_zones()}


def zone(name: str) -> TzdataZone:
    """The zone called ``name`` (exact IANA spelling), loaded from the ``tzdata`` package.

    Raises :class:`InvalidInput` ``unknown time zone 'X'`` for anything the package does not
    ship, including empty names, paths and wrong capitalisation (the message then suggests the
    right spelling).
    """
    if not isinstance(name, str):
        raise InvalidInput(f"unknown time zone {name!r}: a zone name must be a string")
    if (
        not name
        or len(name) > _MAX_NAME_LENGTH
        or not _NAME.fullmatch(name)
        or name not in available_zones()
    ):
        suggestion = _case_insensitive_index().get(name.lower())
        hint = f" (did you mean {suggestion!r}?)" if suggestion and suggestion != name else ""
        raise InvalidInput(f"unknown time zone {name!r}{hint}")
    return _load(name)


@cache
def _load(name: str) -> TzdataZone:
    resource = resources.files(f"{_PACKAGE}.zoneinfo").joinpath(*name.split("/"))
    try:
        with resource.open("rb") as handle:
            if handle.read(4) != _TZIF_MAGIC:
                raise InvalidInput(f"unknown time zone {name!r}: not a TZif file in tzdata")
            handle.seek(0)
            return TzdataZone.from_file(handle, key=name)
    except (OSError, ValueError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput(f"unknown time zone {name!r}: {exc}") from None


def tzdata_version() -> str:
    """The IANA release of the rules in use (e.g. ``"2025b"``).

    Falls back to the wheel's own version (e.g. ``"2025.2"``) if the package does not say.
    """
    module = importlib.import_module(_PACKAGE)
    iana = getattr(module, "IANA_VERSION", None)
    if isinstance(iana, str) and iana:
        return iana
    return metadata.version(_PACKAGE)


def tzdata_package_version() -> str:
    """The installed ``tzdata`` wheel version (e.g. ``"2025.2"``)."""
    return metadata.version(_PACKAGE)
