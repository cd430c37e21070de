"""Mount a :class:`~requests_retryafter.RetryAfterAdapter` on every :class:`requests.Session`
created from now on, so that a legacy script gets it without being edited.

This module is private; its two functions are the public surface::

    from requests_retryafter._install import install, uninstall

    install(store="json:///var/lib/ingest/hosts.json")
    run_legacy_job()          # every requests.get()/Session() in it goes through the adapter
    uninstall()               # flushes what was learned and restores requests as it was

Module-level ``requests.get()``/``requests.post()`` and friends create a ``Session`` for each
call, so they are covered too. One adapter is shared by every session, so pacing, the per-host
concurrency cap and what was learned hold across sessions (a script that calls
``requests.get()`` in a loop is paced like one that keeps a session).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Callable, Optional

import requests.sessions

from .adapter import RetryAfterAdapter

__all__ = ["install", "installed", "uninstall"]

log = logging.getLogger(__name__)

_lock = threading.RLock()
_original_init: Optional[Callable[..., None]] = None
_wrapper: Optional[Callable[..., None]] = None
_adapter: Optional[_InstalledAdapter] = None


class _InstalledAdapter(RetryAfterAdapter):
    """The adapter :func:`install` shares between sessions.

    Sessions come and go (``requests.get()`` closes its session after each call), so
    :meth:`close` only flushes what was learned to the store; :func:`uninstall` really closes
    the adapter and its pools.
    """

    def close(self) -> None:
        """Flush what was learned to the store; the adapter stays usable."""
        self.flush()

    def shutdown(self) -> None:
        """Close for good: flush, close the store (when opened from a spec) and the pools."""
        super().close()


def _mount(session: requests.sessions.Session) -> None:
    adapter = _adapter
    if adapter is not None:
        session.mount("https://", adapter)
        session.mount("http://", adapter)


def install(**adapter_kwargs: Any) -> RetryAfterAdapter:
    """Mount one shared :class:`~requests_retryafter.RetryAfterAdapter` on every
    :class:`requests.Session` created after this call (for ``http://`` and ``https://``).

    It patches ``requests.sessions.Session.__init__`` (the class behind ``requests.Session``,
    ``requests.session()`` and the module-level ``requests.get()`` etc.). Sessions that exist
    already are left alone, and a script that mounts adapters of its own after creating a
    session replaces ours for those prefixes, as it asked.

    Calling it again replaces the adapter (the old one is flushed and closed) and never wraps
    ``Session.__init__`` twice.

    Args:
        **adapter_kwargs: arguments for :class:`~requests_retryafter.RetryAfterAdapter`
            (``policy``, ``store``, ``clock``, ``on_decision``, ...).

    Returns:
        The adapter now mounted on new sessions.

    Raises:
        ConfigurationError: a bad argument or ``REQUESTS_RETRYAFTER_*`` variable.

    .. versionadded:: 0.1.0
    """
    global _adapter, _original_init, _wrapper
    adapter = _InstalledAdapter(**adapter_kwargs)
    with _lock:
        previous = _adapter
        _adapter = adapter
        if _original_init is None:
            original = requests.sessions.Session.__init__
            _original_init = original

            @functools.wraps(original)
            def __init__(self: requests.sessions.Session, *args: Any, **kwargs: Any) -> None:
                original(self, *args, **kwargs)
                _mount(self)

            _wrapper = __init__
            requests.sessions.Session.__init__ = __init__  # type: ignore[method-assign]
    if previous is not None:
        previous.shutdown()
    log.debug("installed on requests.Session")
    return adapter


def uninstall() -> None:
    """Undo :func:`install`: restore ``requests.Session.__init__``, then flush and close the
    shared adapter. Sessions created while installed keep the adapter mounted; close them
    before uninstalling. Safe to call when not installed.

    If something else patched ``Session.__init__`` after :func:`install`, that patch is kept
    (ours stays in the chain, doing nothing).

    .. versionadded:: 0.1.0
    """
    global _adapter, _original_init, _wrapper
    with _lock:
        adapter, _adapter = _adapter, None
        original, _original_init = _original_init, None
        wrapper, _wrapper = _wrapper, None
        if original is not None:
            if requests.sessions.Session.__init__ is wrapper:
                requests.sessions.Session.__init__ = original  # type: ignore[method-assign]
            else:
                log.warning("requests.Session.__init__ was patched again after install(); kept")
    if adapter is not None:
        adapter.shutdown()
        log.debug("uninstalled from requests.Session")


def installed() -> Optional[RetryAfterAdapter]:
    """Return the adapter :func:`install` mounts on new sessions, or ``None``."""
    return _adapter
