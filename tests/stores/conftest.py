"""Fixtures shared by the store tests: the Redis server, when there is one."""

from __future__ import annotations

import os
import uuid
from typing import Any, Iterator

import pytest

REDIS_URL_VAR = "REQUESTS_RETRYAFTER_TEST_REDIS_URL"


def with_query(url: str, **params: str) -> str:
    """Add query parameters to a store spec."""
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in params.items())


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test server's URL. Skips when none is configured; fails (does not skip) when one is
    configured but does not answer, so that a broken CI setup cannot pass silently."""
    url = os.environ.get(REDIS_URL_VAR)
    if not url:
        pytest.skip(
            f"{REDIS_URL_VAR} is not set; start a server with "
            "`source .ci/redis.sh; start_redis` to run the Redis store tests"
        )
    try:
        import redis
    except ImportError:
        pytest.fail(f"{REDIS_URL_VAR} is set but the redis package is not installed")
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        pytest.fail(f"{REDIS_URL_VAR} is set but the server does not answer: {exc}", pytrace=False)
    finally:
        client.close()
    return url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    import redis

    prefix = f"rra-test:{uuid.uuid4().hex}:"
    yield prefix
    client: Any = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
