"""Worker processes for the shared-pacing test (importable by the spawn start method)."""

from __future__ import annotations

import time
from typing import List, Tuple

import requests

from requests_retryafter import Policy, RetryAfterAdapter, RetryAfterError


def crawl(url: str, store: str, seconds: float) -> List[Tuple[float, int]]:
    """Fetch ``url`` in a loop for ``seconds`` of real time through a shared store.

    Returns (time, status) for every call; a call the adapter gave up on counts as 0.
    """
    adapter = RetryAfterAdapter(
        policy=Policy(sync_interval=0.2, deadline=30.0), store=store, environ={}
    )
    session = requests.Session()
    session.mount("http://", adapter)
    calls: List[Tuple[float, int]] = []
    end = time.time() + seconds
    try:
        while time.time() < end:
            try:
                status = session.get(url, timeout=5).status_code
            except RetryAfterError:
                status = 0
            calls.append((time.time(), status))
    finally:
        session.close()
    return calls
