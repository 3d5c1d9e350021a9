"""Where cdmpp keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/cdmpp`, else `~/.cache/cdmpp`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cdmpp"


def default_store_dir() -> Path:
    """The shared feature store: `$XDG_CACHE_HOME/cdmpp/features`, else
    `~/.cache/cdmpp/features`."""
    return cache_root() / "features"


def device_dir(device_id: str, root: str | Path | None = None) -> Path:
    """`<cache>/devices/<device_id>`: where a device's own data lives."""
    return Path(root or cache_root()) / "devices" / device_id
