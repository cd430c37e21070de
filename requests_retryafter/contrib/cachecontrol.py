"""Compose :class:`~requests_retryafter.RetryAfterAdapter` with CacheControl's caching adapter.

A session can mount one adapter per prefix, so a cache and a retry adapter cannot simply be
mounted side by side. :class:`CachingRetryAfterAdapter` is both: CacheControl's
``send()`` runs first and answers from the cache when it can; only a cache miss reaches
:meth:`RetryAfterAdapter.send <requests_retryafter.RetryAfterAdapter.send>`, so a cache hit
never touches the wire, never waits for pacing and never spends the host's rate budget.
A 429 or 503 is retried before CacheControl sees a final answer, and is never cached (only
the statuses CacheControl caches, 200/203/300/301/308, are)::

    from requests_retryafter.contrib.cachecontrol import caching_session

    session = caching_session(store="json:///var/lib/ingest/hosts.json")
    session.get("https://data.example.gov/api/permits")   # fetched (paced, retried)
    session.get("https://data.example.gov/api/permits")   # from the cache, if cacheable

Needs ``pip install requests-retryafter[cachecontrol]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Collection, Optional

import requests

from ..adapter import RetryAfterAdapter

try:
    from cachecontrol.adapter import CacheControlAdapter
except ImportError as exc:  # pragma: no cover - exercised with cachecontrol hidden
    raise ImportError(
        "requests_retryafter.contrib.cachecontrol needs CacheControl: "
        "pip install requests-retryafter[cachecontrol]"
    ) from exc

if TYPE_CHECKING:
    from cachecontrol.cache import BaseCache
    from cachecontrol.controller import CacheController
    from cachecontrol.heuristics import BaseHeuristic
    from cachecontrol.serialize import Serializer

__all__ = ["CachingRetryAfterAdapter", "caching_session"]


# CacheControlAdapter.send takes one extra optional argument (cacheable_methods): compatible
# at runtime, but mypy reports the two bases' signatures as different.
class CachingRetryAfterAdapter(CacheControlAdapter, RetryAfterAdapter):  # type: ignore[misc]
    """CacheControl's cache in front of :class:`~requests_retryafter.RetryAfterAdapter`.

    The method resolution order is ``CachingRetryAfterAdapter -> CacheControlAdapter ->
    RetryAfterAdapter -> HTTPAdapter``: the cache is checked first, a miss goes through the
    retry loop, and each response that comes back from the wire is offered to the cache by
    CacheControl's ``build_response`` (which refuses 429 and 503).

    Args:
        cache: a CacheControl cache (default: an in-memory ``DictCache``).
        cache_etags: revalidate with ``ETag``/``If-None-Match`` (CacheControl's default).
        heuristic: a CacheControl heuristic for responses without freshness headers.
        serializer: a CacheControl serializer.
        controller_class: a CacheControl controller class.
        cacheable_methods: methods to cache (default ``("GET",)``).
        **retryafter_kwargs: :class:`~requests_retryafter.RetryAfterAdapter`'s arguments
            (``policy``, ``store``, ``clock``, ``on_decision``, ...) and
            :class:`~requests.adapters.HTTPAdapter`'s (``pool_maxsize``, ...).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        cache: Optional[BaseCache] = None,
        *,
        cache_etags: bool = True,
        heuristic: Optional[BaseHeuristic] = None,
        serializer: Optional[Serializer] = None,
        controller_class: Optional[type[CacheController]] = None,
        cacheable_methods: Optional[Collection[str]] = None,
        **retryafter_kwargs: Any,
    ) -> None:
        super().__init__(
            cache,
            cache_etags=cache_etags,
            controller_class=controller_class,
            serializer=serializer,
            heuristic=heuristic,
            cacheable_methods=cacheable_methods,
            **retryafter_kwargs,
        )

    def __repr__(self) -> str:
        return f"CachingRetryAfterAdapter(cache={self.cache!r}, policy={self.policy!r})"


def caching_session(
    cache: Optional[BaseCache] = None,
    *,
    session: Optional[requests.Session] = None,
    cache_etags: bool = True,
    heuristic: Optional[BaseHeuristic] = None,
    **retryafter_kwargs: Any,
) -> requests.Session:
    """Return ``session`` (or a new :class:`requests.Session`) with one
    :class:`CachingRetryAfterAdapter` mounted for ``http://`` and ``https://``.

    Arguments are those of :class:`CachingRetryAfterAdapter`.

    .. versionadded:: 0.1.0
    """
    adapter = CachingRetryAfterAdapter(
        cache, cache_etags=cache_etags, heuristic=heuristic, **retryafter_kwargs
    )
    session = requests.Session() if session is None else session
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
