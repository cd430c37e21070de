"""The retry policy: every limit the adapter keeps, and how it is configured.

A :class:`Policy` is frozen. The adapter builds its policy once, when it is constructed, from
explicit arguments, then ``REQUESTS_RETRYAFTER_<FIELD>`` environment variables, then defaults.
Every value is checked against a sane range when it is read, so a bad setting is refused at
once with a :class:`~requests_retryafter.ConfigurationError` naming it, never on a request.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import sys
import warnings
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

from .errors import ConfigurationError

__all__ = ["ENV_PREFIX", "MAX_HOLD_SECONDS", "MAX_SECONDS", "Policy", "RetryAfterWarning"]

#: Prefix of the environment variables that configure the adapter.
ENV_PREFIX = "REQUESTS_RETRYAFTER_"

#: The largest value of a setting in seconds that can become a sleep, a socket timeout or a
#: lock wait (``deadline``, ``max_sleep``, ``backoff_cap``, ...): 10**6 s, about 11.6 days.
#: It stays well below the smallest limit of the C calls those become (``poll()`` and
#: Windows waits count milliseconds in 32 bits: 2**31 ms is about 24.8 days) and below
#: :data:`threading.TIMEOUT_MAX`, so no setting can make a request raise ``OverflowError``.
MAX_SECONDS = 1e6

#: The largest ``max_hold``: 31 days, so that a monthly quota's reset can be held for. A hold
#: is a time stamp compared with the clock, never a sleep or a timeout.
MAX_HOLD_SECONDS = 31 * 86400.0

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

#: Variables with the prefix that are this library's but not a policy field.
_OTHER_VARIABLES = frozenset({ENV_PREFIX + "STORE"})
#: Variables for this project's own test suite (e.g. ``REQUESTS_RETRYAFTER_TEST_REDIS_URL``).
_TEST_PREFIX = ENV_PREFIX + "TEST_"


class RetryAfterWarning(UserWarning):
    """A setting of requests-retryafter that is probably a mistake, such as a misspelt
    ``REQUESTS_RETRYAFTER_*`` variable, which is ignored.

    Filter it like any warning: ``warnings.simplefilter("error", RetryAfterWarning)`` makes
    it an error.
    """


@dataclass(frozen=True)
class Policy:
    """How the adapter retries and paces: a plain frozen value. ``Policy(max_attempts=8)`` is
    exactly what it says, the other fields at their defaults; the environment plays no part.
    :meth:`from_env` is the settings step that reads it: each field explicit, else its
    ``REQUESTS_RETRYAFTER_<FIELD>`` variable (e.g. ``REQUESTS_RETRYAFTER_MAX_ATTEMPTS=8``), else
    the default. An adapter built without a policy takes that step itself.

    Every field has a range, checked when the policy is built; a value outside it raises
    :class:`~requests_retryafter.ConfigurationError` naming the field (or the variable). A
    time is in seconds. Int fields take an :class:`int`, float fields an int or a finite
    float, and ``pace`` a :class:`bool`.

    Attributes:
        max_attempts: requests per call, the first included (1 means never retry). 1 to 1000:
            more is a loop, not a retry.
        deadline: seconds a call may spend in all, sleeps included; each request's timeout is
            capped by what is left. Above 0 and at most :data:`MAX_SECONDS` (what is left of
            it becomes socket timeouts and lock waits).
        min_sleep: the floor of any wait after a 429/503, whatever the header says. 0 to
            ``max_sleep``.
        max_sleep: the ceiling of one sleep. A trusted wait longer than this holds the host.
            ``min_sleep`` to :data:`MAX_SECONDS` (it is a sleep).
        backoff_base: seconds; own backoff is ``uniform(0, min(backoff_cap, base * 2**n))``.
            Above 0 and at most ``backoff_cap``.
        backoff_cap: the largest own backoff, in seconds. ``backoff_base`` to
            :data:`MAX_SECONDS` (it is a sleep).
        max_hold: the longest a host is held, in seconds, whatever it asks. ``max_sleep`` to
            :data:`MAX_HOLD_SECONDS` (31 days: a monthly quota's reset).
        plausible_wait: for a host whose header is not yet trusted, the largest header value
            obeyed as it is; a larger one is probed with own backoff until evidence decides.
            0 to :data:`MAX_SECONDS` (an obeyed header value is a sleep).
        max_concurrency: requests in flight to one host at once, from this adapter. 1 to 1000:
            more is no cap at all.
        pace: whether to pace requests below each host's learned limit.
        utilization: the fraction of a rate to use when pacing evenly (a rate a server states,
            before any window is learned; workers sharing a store pace the budget a host
            states at this fraction of it together). A learned window is used in full: its
            burst is what the host let through. Above 0 and at most 1.
        window: observations per host the category is judged on (a rolling window). 2 to
            10000: each is kept in memory and in the store, and judged on every episode.
        sync_interval: seconds between re-reads of a shared store for other workers' news
            (a worker also syncs with it before a send that follows a wait for the host's
            wait after a refusal, or a paced wait of ``min_sleep`` or longer). 0 to
            :data:`MAX_SECONDS`.
        connect_retries: attempts (within ``max_attempts``) allowed after connection errors.
            0 to 100.
    """

    max_attempts: int = 10
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
        for _name, message in _problems(self):
            raise ConfigurationError(f"Policy.{message}")

    def replace(self, **changes: Any) -> Policy:
        """Return a copy with ``changes`` applied (checked like any policy)."""
        _check_names(changes)
        return dataclasses.replace(self, **changes)

    @classmethod
    def env_var(cls, name: str) -> str:
        """The environment variable for field ``name``."""
        return ENV_PREFIX + name.upper()

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None, **explicit: Any) -> Policy:
        """Build a policy from settings: each field is what ``explicit`` gives, else the
        ``REQUESTS_RETRYAFTER_<FIELD>`` variable of ``environ`` (default :data:`os.environ`),
        else the default. This is the settings step the adapter takes when it is not given a
        :class:`Policy`: ``RetryAfterAdapter(max_attempts=3)`` is
        ``RetryAfterAdapter(policy=Policy.from_env(max_attempts=3))``.

        A variable with the prefix that is not a setting (a misspelt name) is ignored with a
        :class:`RetryAfterWarning` naming it and, when one is close, the setting meant.

        Raises:
            ConfigurationError: a variable or an explicit value has a bad value, or is outside
                its range; the message names the variable (or the field).
        """
        env = os.environ if environ is None else environ
        _check_names(explicit)
        _warn_unknown_variables(env)
        values: Dict[str, Any] = {}
        from_environment = set()
        for f in fields(cls):
            var = cls.env_var(f.name)
            if f.name in explicit:
                values[f.name] = explicit[f.name]
            elif var in env:
                values[f.name] = _convert(var, env[var], f.type)
                from_environment.add(f.name)
            else:
                values[f.name] = f.default
        for name, message in _problems(_Values(values)):
            involved = [n for n in _involved(name) if n in from_environment]
            if involved:
                var = cls.env_var(involved[0])
                raise ConfigurationError(f"{var}={env[var]!r}: {message}")
            raise ConfigurationError(f"Policy.{message}")
        return cls(**values)


_FIELD_NAMES: Tuple[str, ...] = tuple(f.name for f in fields(Policy))
_FIELD_TYPES: Dict[str, str] = {f.name: str(f.type) for f in fields(Policy)}

#: Each numeric field's range: (low, low included, high, high included). A bound given as a
#: field name is that field's value (``max_sleep`` is at least ``min_sleep``).
_RANGES: Dict[str, Tuple[Any, bool, Any, bool]] = {
    "max_attempts": (1, True, 1000, True),
    "deadline": (0, False, MAX_SECONDS, True),
    "min_sleep": (0, True, "max_sleep", True),
    "max_sleep": ("min_sleep", True, MAX_SECONDS, True),
    "backoff_base": (0, False, "backoff_cap", True),
    "backoff_cap": ("backoff_base", True, MAX_SECONDS, True),
    "max_hold": ("max_sleep", True, MAX_HOLD_SECONDS, True),
    "plausible_wait": (0, True, MAX_SECONDS, True),
    "max_concurrency": (1, True, 1000, True),
    "utilization": (0, False, 1, True),
    "window": (2, True, 10000, True),
    "sync_interval": (0, True, MAX_SECONDS, True),
    "connect_retries": (0, True, 100, True),
}


#: Why each absolute upper bound is what it is (shown in the error).
_WHY: Dict[str, str] = {
    "max_attempts": "more is a loop, not a retry",
    "deadline": "what is left of it becomes socket timeouts and lock waits",
    "max_sleep": "it is a sleep",
    "backoff_cap": "it is a sleep",
    "max_hold": "a monthly quota's reset",
    "plausible_wait": "a header value obeyed as it is becomes a sleep",
    "max_concurrency": "more is no cap at all",
    "window": "each observation is kept in memory and in the store, and judged on each episode",
    "sync_interval": "it is compared with monotonic intervals; more means never",
    "connect_retries": "more is a loop, not a retry",
}


class _Values:
    """Attribute access to a mapping of field values, to check them before building."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


def _involved(name: str) -> List[str]:
    """The fields a problem with ``name`` may be due to: itself, then those bounding it."""
    low, _, high, _ = _RANGES.get(name, (None, True, None, True))
    return [name] + [b for b in (low, high) if isinstance(b, str)]


def _problems(values: Any) -> Iterator[Tuple[str, str]]:
    """Yield ``(field, message)`` for each value of ``values`` (a policy, or any object with
    the fields as attributes) of the wrong type or outside its range, types first."""
    for name in _FIELD_NAMES:
        value = getattr(values, name)
        kind = _FIELD_TYPES[name]
        if kind == "bool":
            if not isinstance(value, bool):
                yield name, f"{name} must be True or False, not {_show(value)}"
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            what = "an integer" if kind == "int" else "a number"
            yield name, f"{name} must be {what}, not {_show(value)}"
        elif kind == "int" and not isinstance(value, int):
            yield name, f"{name} must be an integer, not {_show(value)}"
        elif isinstance(value, float) and not math.isfinite(value):
            yield name, f"{name} must be a finite number, not {_show(value)}"
    for name, (low, low_in, high, high_in) in _RANGES.items():
        value = getattr(values, name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue  # reported above
        for bound, included, above in ((low, low_in, True), (high, high_in, False)):
            limit = getattr(values, bound) if isinstance(bound, str) else bound
            if not isinstance(limit, (int, float)) or isinstance(limit, bool):
                continue
            if above:
                ok = value >= limit if included else value > limit
            else:
                ok = value <= limit if included else value < limit
            if not ok:
                yield name, _range_message(name, value, bound, limit, included, above)
                break


def _range_message(
    name: str, value: Any, bound: Any, limit: Any, included: bool, above: bool
) -> str:
    relation = (
        ("at least" if included else "more than")
        if above
        else ("at most" if included else "less than")
    )
    if isinstance(bound, str):
        what = f"{bound} ({limit!r})"
    else:
        what = f"{limit:g}"
        if bound in (MAX_SECONDS, MAX_HOLD_SECONDS):
            what += f" s ({limit / 86400:.1f} days)"
    why = f": {_WHY[name]}" if not above and not isinstance(bound, str) and name in _WHY else ""
    return f"{name} must be {relation} {what}, not {_show(value)}{why}"


def _show(value: Any) -> str:
    """``repr(value)``, shortened (an int of 400 digits is not worth printing)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


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


def _warn_unknown_variables(env: Mapping[str, str]) -> None:
    """Warn about each ``REQUESTS_RETRYAFTER_*`` variable (in any case) that is not a setting."""
    known = {Policy.env_var(name) for name in _FIELD_NAMES} | _OTHER_VARIABLES
    suffixes = sorted(name[len(ENV_PREFIX) :] for name in known)
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or name in known or name.startswith(_TEST_PREFIX):
            continue
        if upper in known:
            hint = f"; did you mean {upper}? (names are case-sensitive)"
        else:
            close = difflib.get_close_matches(upper[len(ENV_PREFIX) :], suffixes, n=1)
            hint = f"; did you mean {ENV_PREFIX}{close[0]}?" if close else ""
        warnings.warn(
            f"{name} is not a setting of requests-retryafter and is ignored{hint}",
            RetryAfterWarning,
            stacklevel=_caller_stacklevel(),
        )


def _check_names(values: Mapping[str, Any]) -> None:
    """Refuse names that are not policy fields."""
    unknown = sorted(set(values) - set(_FIELD_NAMES))
    if unknown:
        raise ConfigurationError(f"unknown policy field(s): {', '.join(unknown)}")


def resolve(
    policy: Optional[Policy], environ: Mapping[str, str], explicit: Mapping[str, Any]
) -> Policy:
    """An adapter's policy: ``policy`` with the ``explicit`` fields applied, or, without a
    policy, :meth:`Policy.from_env` of ``environ`` and them. A policy given is complete: the
    ``REQUESTS_RETRYAFTER_<FIELD>`` variables set in ``environ`` are not read for it, and a
    :class:`RetryAfterWarning` names them (an operator who set one should know)."""
    if policy is None:
        return Policy.from_env(environ, **explicit)
    ignored = [
        Policy.env_var(name)
        for name in _FIELD_NAMES
        if Policy.env_var(name) in environ and name not in explicit
    ]
    if ignored:
        warnings.warn(
            f"{', '.join(ignored)} ignored: the adapter was given a Policy, which is complete; "
            f"build it with Policy.from_env() to let the environment set the fields it does "
            f"not give",
            RetryAfterWarning,
            stacklevel=_caller_stacklevel(),
        )
    return policy.replace(**explicit) if explicit else policy


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package, so that a warning points at
    the user's code that built the adapter or the policy."""
    package = __name__.rpartition(".")[0]
    frame = sys._getframe(1)
    level = 1
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module != package and not module.startswith(package + "."):
            return level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
