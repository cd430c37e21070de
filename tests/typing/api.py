"""Type-checks the public API as a user would write against it (mypy --strict; not run)."""

from __future__ import annotations

from typing import List, Optional

import requests

from requests_retryafter import (
    Clock,
    ConfigurationError,
    Decision,
    FakeClock,
    HostHeld,
    HostState,
    MemoryStore,
    Policy,
    RetryAfterAdapter,
    RetryAfterError,
    RetryDeadlineExceeded,
    RetryLimitExceeded,
    StateStore,
    SystemClock,
    host_key,
    mount,
    open_store,
    parse_retry_after,
)

policy: Policy = Policy(max_attempts=5, deadline=600.0, min_sleep=1.0, max_sleep=300.0)
stricter: Policy = policy.replace(max_attempts=2)
from_env: Policy = Policy.from_env({"REQUESTS_RETRYAFTER_DEADLINE": "30"}, max_attempts=5)

clock: FakeClock = FakeClock(start=1_700_000_000.0)
real: Clock = SystemClock()
also_a_clock: Clock = clock
decisions: List[Decision] = []

adapter: RetryAfterAdapter = RetryAfterAdapter(
    policy=policy,
    store="memory://",
    clock=clock,
    on_decision=decisions.append,
    environ={},
    seed=0,
    pool_maxsize=4,
)
as_http_adapter: requests.adapters.HTTPAdapter = adapter
store: StateStore = open_store("memory://")
same_store: StateStore = open_store(MemoryStore())
adapter_on_store = RetryAfterAdapter(store=store, clock=real)

session = requests.Session()
mounted: RetryAfterAdapter = mount(session, adapter)
mounted_new: RetryAfterAdapter = mount(session, clock=clock, environ={})

key: str = host_key("https://user:pw@api.example.org/v1?token=x")
state: Optional[HostState] = adapter.store.get(key)
if state is not None:
    category: str = state.category
    held_until: float = state.held_until
    text: str = state.to_json()
    again: HostState = HostState.from_json(text)

seconds: Optional[float] = parse_retry_after("120", now=clock.time()).seconds
slept: List[float] = clock.sleeps


def fetch(url: str) -> Optional[requests.Response]:
    try:
        return session.get(url, timeout=10)
    except HostHeld as exc:
        until: float = exc.until
        reason: str = exc.reason
        host: str = exc.host
        print(until, reason, host)
    except RetryDeadlineExceeded as exc:
        delay: float = exc.delay
        remaining: float = exc.remaining
        print(delay, remaining)
    except RetryLimitExceeded as exc:
        last: Optional[requests.Response] = exc.response
        print(last)
    except RetryAfterError as exc:
        base: requests.exceptions.RetryError = exc
        print(base)
    return None


def configure(raw: str) -> Optional[RetryAfterAdapter]:
    try:
        return RetryAfterAdapter(environ={"REQUESTS_RETRYAFTER_MAX_ATTEMPTS": raw})
    except ConfigurationError as exc:
        error: ValueError = exc
        print(error)
        return None


def on_decision(decision: Decision) -> None:
    event: str = decision.event
    wait: float = decision.wait
    header: Optional[float] = decision.header
    print(event, wait, header)


adapter.on_decision = on_decision
adapter.close()
adapter_on_store.close()
