"""The retry policy: every limit the adapter keeps, and how it is configured.

A :class:`Policy` is frozen. The adapter builds its policy once, when it is constructed, from
explicit arguments, then ``REQUESTS_RETRYAFTER_<FIELD>`` environment variables, then defaults.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, Mapping, Optional

from .errors import ConfigurationError

__all__ = ["ENV_PREFIX", "Policy"]

log = logging.getLogger(__name__)

#: Prefix of the environment variables that configure the adapter.
ENV_PREFIX = "REQUESTS_RETRYAFTER_"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Policy:
    """How the adapter retries and paces. Every field can also be set by an environment variable
    ``REQUESTS_RETRYAFTER_<FIELD>`` (e.g. ``REQUESTS_RETRYAFTER_MAX_ATTEMPTS=8``); fields you pass
    explicitly win over the environment.

    Attributes:
        max_attempts: requests per call, the first included (1 means never retry).
        deadline: seconds a call may spend in all, sleeps included; each request's timeout is
            capped by what is left.
        min_sleep: the floor of any wait after a 429/503, whatever the header says.
        max_sleep: the ceiling of one sleep. A trusted wait longer than this holds the host.
        backoff_base: seconds; own backoff is ``uniform(0, min(backoff_cap, base * 2**n))``.
        backoff_cap: the largest own backoff, in seconds.
        max_hold: the longest a host is held, in seconds, whatever it asks.
        plausible_wait: for a host whose header is not yet trusted, the largest header value
            obeyed as it is; a larger one is probed with own backoff until evidence decides.
        max_concurrency: requests in flight to one host at once, from this adapter.
        pace: whether to pace requests below each host's learned limit.
        utilization: the fraction of a rate to use when pacing evenly (a rate a server states,
            before any window is learned). A learned window is used in full: its burst is
            what the host let through.
        window: observations per host the category is judged on (a rolling window).
        sync_interval: seconds between re-reads of a shared store for other workers' news.
        connect_retries: attempts (within ``max_attempts``) allowed after connection errors.
    """

    max_attempts: int = 6
    deadline: float = 600.0
    min_sleep: float = 1.0
    max_sleep: float = 300.0
    backoff_base: float = 1.0
    backoff_cap: float = 120.0
    max_hold: float = 86400.0
    plausible_wait: float = 60.0
    max_concurrency: int = 8
    pace: bool = True
    utilization: float = 0.95
    window: int = 8
    sync_interval: float = 2.0
    connect_retries: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", "int") and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or (isinstance(value, float) and not math.isfinite(value))
            ):
                raise ConfigurationError(f"Policy.{f.name} must be a finite number, not {value!r}")
            if f.type == "bool" and not isinstance(value, bool):
                raise ConfigurationError(f"Policy.{f.name} must be True or False, not {value!r}")
        checks = [
            (self.max_attempts >= 1, "max_attempts must be at least 1"),
            (self.deadline > 0, "deadline must be positive"),
            (self.min_sleep >= 0, "min_sleep must not be negative"),
            (self.max_sleep >= self.min_sleep, "max_sleep must be at least min_sleep"),
            (self.backoff_base > 0, "backoff_base must be positive"),
            (self.backoff_cap >= self.backoff_base, "backoff_cap must be at least backoff_base"),
            (self.max_hold >= self.max_sleep, "max_hold must be at least max_sleep"),
            (self.plausible_wait >= 0, "plausible_wait must not be negative"),
            (self.max_concurrency >= 1, "max_concurrency must be at least 1"),
            (0 < self.utilization <= 1, "utilization must be in (0, 1]"),
            (self.window >= 2, "window must be at least 2"),
            (self.sync_interval >= 0, "sync_interval must not be negative"),
            (self.connect_retries >= 0, "connect_retries must not be negative"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigurationError(message)

    @property
    def explicit_fields(self) -> FrozenSet[str]:
        """The fields given explicitly when this policy was built (they beat the environment)."""
        return getattr(self, "_explicit", frozenset())

    def replace(self, **changes: Any) -> Policy:
        """Return a copy with ``changes`` applied (and counted as explicit)."""
        new = dataclasses.replace(self, **changes)
        object.__setattr__(new, "_explicit", self.explicit_fields | frozenset(changes))
        return new

    @classmethod
    def env_var(cls, name: str) -> str:
        """The environment variable for field ``name``."""
        return ENV_PREFIX + name.upper()

    @classmethod
    def from_env(
        cls,
        environ: Optional[Mapping[str, str]] = None,
        *,
        base: Optional[Policy] = None,
        **overrides: Any,
    ) -> Policy:
        """Build a policy: ``overrides``, then ``base``'s explicit fields, then
        ``REQUESTS_RETRYAFTER_*`` variables of ``environ`` (default :data:`os.environ`), then
        ``base``'s other fields or the defaults.

        Raises:
            ConfigurationError: a variable has a bad value; the message names it.
        """
        env = os.environ if environ is None else environ
        values: Dict[str, Any] = {}
        explicit = set(overrides)
        for f in fields(cls):
            if f.name in overrides:
                values[f.name] = overrides[f.name]
            elif base is not None and f.name in base.explicit_fields:
                values[f.name] = getattr(base, f.name)
                explicit.add(f.name)
            elif cls.env_var(f.name) in env:
                values[f.name] = _convert(cls.env_var(f.name), env[cls.env_var(f.name)], f.type)
            elif base is not None:
                values[f.name] = getattr(base, f.name)
        known = {cls.env_var(f.name) for f in fields(cls)} | {ENV_PREFIX + "STORE"}
        for name in env:
            if name.startswith(ENV_PREFIX) and name not in known and "_TEST_" not in name:
                log.warning("%s is not a setting of requests-retryafter; ignored", name)
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigurationError(f"unknown policy field(s): {', '.join(sorted(unknown))}")
        try:
            policy = cls(**values)
        except ConfigurationError as exc:
            named = [cls.env_var(k) for k in values if k not in explicit and k in str(exc)]
            if named:
                raise ConfigurationError(f"{named[0]}: {exc}") from None
            raise
        object.__setattr__(policy, "_explicit", frozenset(explicit))
        return policy


def _convert(var: str, raw: str, type_name: Any) -> Any:
    text = raw.strip()
    try:
        if type_name == "bool":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError("expected one of 1/0, true/false, yes/no, on/off")
        if type_name == "int":
            return int(text)
        value = float(text)
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return value
    except ValueError as exc:
        raise ConfigurationError(f"{var}={raw!r} is not valid: {exc}") from None


if not TYPE_CHECKING:
    _dataclass_init = Policy.__init__

    @functools.wraps(_dataclass_init)
    def _init(self: Policy, *args: Any, **kwargs: Any) -> None:
        _dataclass_init(self, *args, **kwargs)
        names = [f.name for f in fields(Policy)][: len(args)] + list(kwargs)
        object.__setattr__(self, "_explicit", frozenset(names))

    Policy.__init__ = _init
