"""The one way cdmpp stamps manifests, saved models and per-device caches with the time."""

from __future__ import annotations

import datetime


def now_iso() -> str:
    """The current time in UTC, ISO 8601 to the second (e.g. 2026-11-23T09:30:00+00:00)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
