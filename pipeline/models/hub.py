"""Is the Hugging Face Hub reachable? Answered in seconds, so offline users get a clear message
instead of a long hang inside a download."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

DEFAULT_TIMEOUT_S = 3.0


class HubUnreachable(RuntimeError):
    """Raised when something needs the Hub and it can't be reached."""


def hub_offline_forced() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_reachable(timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when a TCP connection to the Hub endpoint opens within `timeout` seconds."""
    if hub_offline_forced():
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_hub(what: str, offline_hint: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
    """Fail fast, naming what needed the Hub and what works offline instead."""
    if not hub_reachable(timeout):
        reason = "offline mode is set (HF_HUB_OFFLINE)" if hub_offline_forced() else "no network connection to it"
        raise HubUnreachable(f"Can't reach the Hugging Face Hub to fetch {what} ({reason}). {offline_hint}")
