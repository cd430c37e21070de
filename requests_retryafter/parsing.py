"""Strict parsing of ``Retry-After`` (RFC 9110 §10.2.3) and of stated rate limits.

Pure functions: no I/O, no clock of their own (the caller passes ``now``).
"""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Tuple

__all__ = [
    "ParsedRetryAfter",
    "RateLimitInfo",
    "date_offset",
    "parse_rate_limit",
    "parse_retry_after",
]

#: The largest delta-seconds taken as a number of seconds: beyond a signed 32-bit clock.
MAX_DELTA_SECONDS = 2**31 - 1

_OWS = " \t"
_DELTA = re.compile(r"[0-9]+", re.ASCII)
_WKDAY = r"(?P<wkday>Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_WEEKDAY = r"(?P<weekday>Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)"
_MONTH = r"(?P<month>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
_IMF_FIXDATE = re.compile(
    _WKDAY + r", (?P<day>[0-9]{2}) " + _MONTH + r" (?P<year>[0-9]{4}) " + _TIME + r" GMT",
    re.ASCII,
)
_RFC850 = re.compile(
    _WEEKDAY + r", (?P<day>[0-9]{2})-" + _MONTH + r"-(?P<year>[0-9]{2}) " + _TIME + r" GMT",
    re.ASCII,
)
_ASCTIME = re.compile(
    _WKDAY + r" " + _MONTH + r" (?P<day>[ 0-9][0-9]) " + _TIME + r" (?P<year>[0-9]{4})",
    re.ASCII,
)
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTHS = {name: number for number, name in enumerate(_MONTH_NAMES, 1)}


@dataclass(frozen=True)
class ParsedRetryAfter:
    """The outcome of parsing one ``Retry-After`` value.

    Attributes:
        seconds: the wait the header asks for (0 for a date in the past), or ``None`` when
            the value is unusable.
        form: ``"delta"``, ``"date"``, or ``None`` when unusable or absent.
        reason: why the value is unusable (``""`` when it is usable).
    """

    seconds: Optional[float]
    form: Optional[str]
    reason: str = ""

    @property
    def usable(self) -> bool:
        """Whether the header gave a wait."""
        return self.seconds is not None


ABSENT = ParsedRetryAfter(None, None, "absent")


def _unusable(reason: str) -> ParsedRetryAfter:
    return ParsedRetryAfter(None, None, reason)


def _rfc850_year(two_digits: int, now: float) -> int:
    # RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is in the past century.
    this_year = datetime.datetime.fromtimestamp(now, datetime.timezone.utc).year
    year = (this_year // 100) * 100 + two_digits
    if year > this_year + 50:
        year -= 100
    elif year <= this_year - 50:
        year += 100
    return year


def _parse_date(value: str, now: float) -> Optional[float]:
    for pattern in (_IMF_FIXDATE, _RFC850, _ASCTIME):
        match = pattern.fullmatch(value)
        if match is None:
            continue
        year = int(match["year"])
        if pattern is _RFC850:
            try:
                year = _rfc850_year(year, now)
            except (ValueError, OverflowError, OSError):  # a ``now`` beyond any calendar
                return None
        try:
            moment = datetime.datetime(
                year,
                _MONTHS[match["month"]],
                int(match["day"].strip()),
                int(match["hour"]),
                int(match["minute"]),
                # RFC 9110 allows a leap second (60); fold it into the next second.
                min(int(match["second"]), 59),
            )
        except ValueError:
            return None
        return float(calendar.timegm(moment.timetuple()))
    return None


def date_offset(headers: Mapping[str, str], now: float) -> Optional[float]:
    """How far the server's ``Date`` reads from ``now`` (this machine's clock, epoch
    seconds): ``Date - now``, or ``None`` when it is missing or malformed. A ``Date`` is
    truncated to a whole second and stamped before the answer's way here: a server whose
    clock is in step reads up to a second behind (more after a slow answer), never ahead.
    An answer a cache kept reads behind by as long as the cache kept it: its ``Age`` (RFC
    9111 §5.1), if stated, is added, up to reading in step (an ``Age`` explains a ``Date``
    behind, and never makes one read ahead).

    >>> from requests_retryafter.parsing import date_offset
    >>> date_offset({"Date": "Tue, 14 Nov 2023 22:14:20 GMT"}, 1_700_000_000.5)
    59.5
    >>> date_offset({"Date": "Tue, 14 Nov 2023 21:13:20 GMT", "Age": "3600"}, 1_700_000_000.5)
    -0.5
    """
    value = headers.get("Date")
    if not value or len(value) > 64:
        return None
    moment = _parse_date(value.strip(_OWS), now)
    if moment is None:
        return None
    offset = moment - now
    age = _first_int(headers.get("Age"))
    return min(offset + age, max(offset, 0.0)) if age else offset


def _is_list(text: str) -> bool:
    """Whether ``text`` is a comma-separated list of two or more values (or empty elements),
    each delta-seconds or an HTTP-date, as when a field is repeated and joined."""
    rest, items = text, 0
    while True:
        rest = rest.lstrip(_OWS)
        for pattern in (_IMF_FIXDATE, _RFC850, _ASCTIME, _DELTA):
            match = pattern.match(rest)
            if match:
                rest = rest[match.end() :]
                break
        items += 1
        rest = rest.lstrip(_OWS)
        if not rest:
            return items > 1
        if rest[0] != ",":
            return False
        rest = rest[1:]


def parse_retry_after(value: Optional[str], *, now: float) -> ParsedRetryAfter:
    """Parse a ``Retry-After`` field value strictly.

    Accepts ASCII delta-seconds and the three HTTP-date forms (IMF-fixdate, RFC 850, asctime).
    A date in the past means 0. Everything else (``1.5``, ``-5``, ``+1``, ``banana``,
    ``30, 60``, non-ASCII digits, an empty value, a number too large for a clock) is unusable:
    ``seconds`` is ``None`` and ``reason`` says why. Never raises.

    Args:
        value: the header value, or ``None`` when the header is absent.
        now: the current wall-clock time in epoch seconds, to resolve dates.

    >>> parse_retry_after("120", now=0).seconds
    120.0
    >>> parse_retry_after("1.5", now=0).reason
    'not delta-seconds or an HTTP-date'
    """
    if value is None:
        return ABSENT
    if not isinstance(value, str):
        try:
            value = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        except Exception:  # pragma: no cover - defensive: str() of an odd object
            return _unusable("not text")
    text = value.strip(_OWS)
    if not text:
        return _unusable("empty")
    if _DELTA.fullmatch(text):
        digits = text.lstrip("0") or "0"
        if len(digits) > 10 or int(digits) > MAX_DELTA_SECONDS:
            return _unusable("too large for any clock")
        return ParsedRetryAfter(float(int(digits)), "delta")
    if "," in text and _is_list(text):
        return _unusable("several values")
    moment = _parse_date(text, now)
    if moment is not None:
        if moment - now > MAX_DELTA_SECONDS:
            return _unusable("a date too far ahead for any clock")
        return ParsedRetryAfter(max(0.0, moment - now), "date")
    if any(c.isdigit() for c in text) and not text.isascii():
        return _unusable("non-ASCII characters")
    return _unusable("not delta-seconds or an HTTP-date")


@dataclass(frozen=True)
class RateLimitInfo:
    """What a server states about its own limit (evidence, never an order).

    Attributes:
        limit: requests allowed per window, when stated.
        remaining: requests left in the current window, when stated.
        reset_after: seconds until the window resets, when stated.
        window: the window length in seconds, when stated.
    """

    limit: Optional[int] = None
    remaining: Optional[int] = None
    reset_after: Optional[float] = None
    window: Optional[float] = None

    @property
    def empty(self) -> bool:
        """Whether nothing was stated."""
        return self == _NO_LIMIT


_NO_LIMIT = RateLimitInfo()
_INT = re.compile(r"[0-9]{1,12}", re.ASCII)
# (An integer, not the start of a decimal: ``t=1.5`` is no reset of 1 s.)
_PARAM = re.compile(r";\s*([a-z]+)\s*=\s*([0-9]{1,12})(?![0-9.])", re.ASCII)


def _first_int(value: Optional[str]) -> Optional[int]:
    if value is None:
        return None
    head = value.split(",")[0].strip(_OWS)
    return int(head) if _INT.fullmatch(head) else None


_NUMBER = re.compile(r"([0-9]{1,12})(?:\.([0-9]{1,9}))?", re.ASCII)


def _first_number(value: Optional[str]) -> Optional[Tuple[int, bool]]:
    """The first of a field's values as a number, an integer or a decimal, as some servers
    send their ``X-RateLimit-*`` (Reddit's ``X-Ratelimit-Remaining: 598.0``, Discord's epoch
    ``X-RateLimit-Reset: 1470173023.123``): ``(its whole part, whether a fraction is left)``,
    read from the digits (a float of 21 digits would round)."""
    if value is None:
        return None
    match = _NUMBER.fullmatch(value.split(",")[0].strip(_OWS))
    if match is None:
        return None
    return int(match.group(1)), bool((match.group(2) or "").strip("0"))


def _first_count(value: Optional[str]) -> Optional[int]:
    """The first of a field's values as a whole count (a decimal rounded down: ``598.0`` is
    598 requests, and half a request left is none)."""
    number = _first_number(value)
    return None if number is None else number[0]


def _first_signed_count(value: Optional[str]) -> Optional[int]:
    """:func:`_first_count`, where a count below zero reads as ``-1`` (some limiters state
    how far a client is over its limit: ``-1``, ``-2`` and so on)."""
    if value is None:
        return None
    head = value.split(",")[0].strip(_OWS)
    if not head.startswith("-"):
        return _first_count(head)
    number = _first_number(head[1:])
    if number is None:
        return None
    return 0 if number == (0, False) else -1  # ("-0" is none; "-0.5" is over)


def _first_reset(value: Optional[str]) -> Optional[int]:
    """The first of a field's values as a reset in whole seconds (a decimal rounded up, as
    most servers state theirs: the engine's bounds on a window take every stated reset for
    one rounded up)."""
    number = _first_number(value)
    return None if number is None else number[0] + number[1]


def _params(value: Optional[str]) -> Mapping[str, int]:
    if not value:
        return {}
    return {k: int(v) for k, v in _PARAM.findall(value.split(",")[0])}


_MEMBER = re.compile(r"\s*([a-z]+)\s*=\s*([0-9]{1,12})\s*", re.ASCII)


def _members(value: Optional[str]) -> Mapping[str, int]:
    """The ``key=integer`` members of a dictionary field (draft-7's combined ``RateLimit``)."""
    if not value or len(value) > 1000:
        return {}
    found: Dict[str, int] = {}
    for member in value.split(","):
        match = _MEMBER.fullmatch(member.split(";")[0])
        if match and match.group(1) not in found:
            found[match.group(1)] = int(match.group(2))
    return found


def parse_rate_limit(headers: Mapping[str, str], *, now: float) -> RateLimitInfo:
    """Read a server's stated limit from every generation of rate-limit fields servers send:
    ``X-RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` (or ``X-Rate-Limit-*``); the IETF
    draft-6 ``RateLimit-Limit`` / ``-Remaining`` / ``-Reset`` with
    ``RateLimit-Policy: 10;w=1``; draft-7's combined
    ``RateLimit: limit=5, remaining=0, reset=1``; and the structured fields of draft-8 and later
    (``RateLimit-Policy: "p";q=20;w=10`` with ``RateLimit: "p";r=0;t=10``). Where several
    generations are present, the draft fields win over ``X-RateLimit-*``. Malformed fields are
    ignored. Never raises.

    ``headers`` is a case-insensitive mapping, as a response's headers are.
    ``X-RateLimit-Reset`` is read as epoch seconds when it is larger than 10⁹, otherwise as
    seconds from now (``now``: the server's clock, where it is off from this machine's; see
    :func:`date_offset`). The separate fields (``X-RateLimit-*``, draft-6) may be decimals, as
    some servers send them: a count is rounded down, a reset up to a whole second.
    """
    get = headers.get

    def first(read: Callable[[Optional[str]], Optional[int]], *names: str) -> Optional[int]:
        # The first of the fields that reads (a garbled one does not hide the next).
        return next((n for n in (read(get(name)) for name in names) if n is not None), None)

    # X-RateLimit-*, or X-Rate-Limit-* as Twitter and Okta spell them
    limits = ("RateLimit-Limit", "X-RateLimit-Limit", "X-Rate-Limit-Limit")
    limit = first(lambda v: _first_count(v) or None, *limits)  # (a limit of 0 states nothing)
    remaining = first(
        _first_signed_count,
        "RateLimit-Remaining",
        "X-RateLimit-Remaining",
        "X-Rate-Limit-Remaining",
    )
    reset: Optional[float] = None
    raw_reset = first(_first_reset, "RateLimit-Reset", "X-RateLimit-Reset", "X-Rate-Limit-Reset")
    if raw_reset is not None:
        reset = max(0.0, raw_reset - now) if raw_reset > 1_000_000_000 else float(raw_reset)
    window: Optional[float] = None
    policy = _params(get("RateLimit-Policy"))
    if "q" in policy:
        limit = limit or policy["q"]
    elif get("RateLimit-Policy"):
        limit = limit or _first_int(get("RateLimit-Policy").split(";")[0])  # type: ignore[union-attr]
    if "w" in policy and policy["w"] > 0:
        window = float(policy["w"])
    current = _params(get("RateLimit"))
    if "r" in current and remaining is None:
        remaining = current["r"]
    if "t" in current and reset is None:
        reset = float(current["t"])
    combined = _members(get("RateLimit"))  # draft-7: "limit=5, remaining=0, reset=1"
    if limit is None and "limit" in combined:
        limit = combined["limit"]
    if remaining is None and "remaining" in combined:
        remaining = combined["remaining"]
    if reset is None and "reset" in combined:
        reset = float(combined["reset"])
    if remaining is not None and remaining < 0:
        # Below zero, beside a limit: over it, none remaining (rolling-rate-limiter states
        # -1, -2 and so on as it refuses; a count one low states -1 at its last place).
        # Without a limit, -1 may mean "no limit", as some servers say it: unread.
        remaining = 0 if limit else None
    if limit is None and remaining is None and reset is None and window is None:
        return _NO_LIMIT
    return RateLimitInfo(limit=limit, remaining=remaining, reset_after=reset, window=window)
