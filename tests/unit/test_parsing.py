"""``parse_retry_after`` and ``parse_rate_limit``: strict RFC 9110 parsing, as tables.

``NOW`` is Tue, 14 Nov 2023 22:13:20 GMT; the dates below are written relative to it.
"""

from __future__ import annotations

import random
import time
from typing import Optional

import pytest
from requests.structures import CaseInsensitiveDict

from requests_retryafter import parse_rate_limit, parse_retry_after
from requests_retryafter.parsing import MAX_DELTA_SECONDS, ParsedRetryAfter

NOW = 1_700_000_000.0
FAR_FUTURE = 253402300799.0  # Fri, 31 Dec 9999 23:59:59 GMT

# (value, seconds, form): values that give a wait.
USABLE = [
    ("0", 0.0, "delta"),
    ("1", 1.0, "delta"),
    ("30", 30.0, "delta"),
    ("120", 120.0, "delta"),
    ("030", 30.0, "delta"),
    ("00000", 0.0, "delta"),
    (" 30 ", 30.0, "delta"),
    ("\t45\t", 45.0, "delta"),
    ("3600", 3600.0, "delta"),
    ("86400", 86400.0, "delta"),
    (str(MAX_DELTA_SECONDS), float(MAX_DELTA_SECONDS), "delta"),
    # the three HTTP-date forms, 30 s ahead
    ("Tue, 14 Nov 2023 22:13:50 GMT", 30.0, "date"),
    ("Tuesday, 14-Nov-23 22:13:50 GMT", 30.0, "date"),
    ("Tue Nov 14 22:13:50 2023", 30.0, "date"),
    # asctime pads a one-digit day with a space
    ("Sat Dec  2 22:13:20 2023", 18 * 86400.0, "date"),
    ("Wed, 15 Nov 2023 22:13:20 GMT", 86400.0, "date"),
    (" Tue, 14 Nov 2023 22:13:50 GMT\t", 30.0, "date"),
    # now, and the past: 0
    ("Tue, 14 Nov 2023 22:13:20 GMT", 0.0, "date"),
    ("Tue, 14 Nov 2023 22:13:19 GMT", 0.0, "date"),
    ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0, "date"),
    ("Sunday, 06-Nov-94 08:49:37 GMT", 0.0, "date"),
    ("Sun Nov  6 08:49:37 1994", 0.0, "date"),
    ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0, "date"),
    # RFC 850 two-digit years: more than 50 years ahead means the past century
    ("Wednesday, 14-Nov-74 22:13:20 GMT", 0.0, "date"),
    ("Monday, 14-Nov-72 22:13:20 GMT", 3246387200.0 - NOW, "date"),
]

# (value, words the reason must contain): values that give no wait.
UNUSABLE = [
    ("", "empty"),
    ("   ", "empty"),
    ("\t", "empty"),
    ("1.5", ""),
    ("1.0", ""),
    ("0.5", ""),
    ("-5", ""),
    ("-1", ""),
    ("+1", ""),
    ("banana", ""),
    ("30s", ""),
    ("30 60", ""),
    ("1e3", ""),
    ("0x1e", ""),
    ("1_000", ""),
    ("inf", ""),
    ("NaN", ""),
    ("30, 60", "several"),
    ("30,60", "several"),
    ("30,", "several"),
    ("Tue, 14 Nov 2023 22:13:50 GMT, 30", "several"),
    ("Tue, 14 Nov 2023 22:13:50 GMT, Tue, 14 Nov 2023 22:13:55 GMT", "several"),
    ("\u0661\u0662", "non-ASCII"),  # Arabic-Indic digits
    ("\xb2", "non-ASCII"),  # superscript two
    ("\uff13\uff10", "non-ASCII"),  # fullwidth digits
    ("3\u0660", "non-ASCII"),
    ("2147483648", "too large"),
    ("99999999999", "too large"),
    ("9" * 400, "too large"),
    ("Fri, 31 Dec 9999 23:59:50 GMT", "too far ahead"),
    # dates that are not one of the three forms, or not a date at all
    ("tue, 14 nov 2023 22:13:50 gmt", ""),
    ("Tue, 14 Nov 2023 22:13:50", ""),
    ("Tue, 4 Nov 2023 22:13:50 GMT", ""),
    ("Tue,  14 Nov 2023 22:13:50 GMT", ""),
    ("Tue, 31 Feb 2023 22:13:50 GMT", ""),
    ("Tue, 14 Nov 2023 25:13:50 GMT", ""),
    ("Tue, 14 Foo 2023 22:13:50 GMT", ""),
    ("Tuesday, 14-Nov-2023 22:13:50 GMT", ""),
    ("Tue Nov 14 22:13:50 23", ""),
    ("2023-11-14T22:13:50Z", ""),
]

MALFORMED_DATES_WITH_COMMA = [
    "Tue, 14 Nov 2023 22:13:50 UTC",
    "Tue, 14 Nov 2023 22:13:50 +0000",
    "Tue, 14 Nov 2023 22:13:50 GMT+1",
]


def test_table_is_big_enough():
    assert len(USABLE) + len(UNUSABLE) + len(MALFORMED_DATES_WITH_COMMA) >= 40


@pytest.mark.parametrize(("value", "seconds", "form"), USABLE)
def test_usable_values(value: str, seconds: float, form: str):
    parsed = parse_retry_after(value, now=NOW)
    assert parsed == ParsedRetryAfter(pytest.approx(seconds), form)
    assert parsed.usable
    assert parsed.reason == ""


@pytest.mark.parametrize(("value", "words"), UNUSABLE)
def test_unusable_values(value: str, words: str):
    parsed = parse_retry_after(value, now=NOW)
    assert parsed.seconds is None
    assert parsed.form is None
    assert not parsed.usable
    assert parsed.reason
    assert words.lower() in parsed.reason.lower()


@pytest.mark.parametrize("value", MALFORMED_DATES_WITH_COMMA)
def test_malformed_dates_are_unusable(value: str):
    parsed = parse_retry_after(value, now=NOW)
    assert parsed.seconds is None
    assert parsed.reason


@pytest.mark.parametrize("value", MALFORMED_DATES_WITH_COMMA)
def test_reason_for_a_malformed_date_is_not_several_values(value: str):
    # One date with the wrong zone is not "several values": the logged reason would mislead
    # an operator reading why the header was ignored.
    parsed = parse_retry_after(value, now=NOW)
    assert "several" not in parsed.reason


def test_epoch_seconds_are_read_as_a_delta():
    # Some servers send an epoch timestamp; RFC 9110 reads digits as delta-seconds.
    parsed = parse_retry_after("1700000030", now=NOW)
    assert parsed.seconds == 1_700_000_030.0
    assert parsed.form == "delta"


def test_leading_zeros_do_not_make_a_value_too_large():
    # delta-seconds is 1*DIGIT: fourteen characters can still be thirty seconds.
    parsed = parse_retry_after("00000000000030", now=NOW)
    assert parsed.seconds == 30.0


def test_absent_header():
    parsed = parse_retry_after(None, now=NOW)
    assert parsed.seconds is None
    assert parsed.form is None
    assert parsed.reason == "absent"


def test_bytes_are_read_as_latin1():
    assert parse_retry_after(b"30", now=NOW).seconds == 30.0  # type: ignore[arg-type]
    assert parse_retry_after(b"\xb2", now=NOW).seconds is None  # type: ignore[arg-type]


def test_leap_second_is_accepted():
    parsed = parse_retry_after("Tue, 14 Nov 2023 22:13:60 GMT", now=NOW)
    assert parsed.form == "date"
    assert parsed.seconds is not None
    assert 39.0 <= parsed.seconds <= 40.0


def test_dates_are_relative_to_now():
    value = "Tue, 14 Nov 2023 22:13:50 GMT"
    assert parse_retry_after(value, now=NOW - 70).seconds == 100.0
    assert parse_retry_after(value, now=NOW + 29.5).seconds == 0.5
    assert parse_retry_after(value, now=NOW + 3600).seconds == 0.0


def test_rfc850_century_follows_now():
    # RFC 9110 §5.6.7: a two-digit year is the nearest year with those digits that is not
    # more than 50 years in the future. Read now, "14-Nov-23" is 2023.
    value = "Tuesday, 14-Nov-23 22:13:50 GMT"
    assert parse_retry_after(value, now=NOW).seconds == 30.0
    # Read on 1 Jan 1990 it is also 2023 (33 years ahead), not 1923.
    in_1990 = 631152000.0
    assert parse_retry_after(value, now=in_1990).seconds == NOW + 30 - in_1990
    # Read on 1 Jan 2080 it is 2123 (43 years ahead), not 2023.
    in_2080 = 3471292800.0
    in_2123 = 4855673630.0  # 14 Nov 2123 22:13:50 GMT
    assert parse_retry_after(value, now=in_2080).seconds == in_2123 - in_2080


@pytest.mark.parametrize(("value", "seconds", "form"), [r for r in USABLE if r[2] == "date"])
def test_dates_do_not_depend_on_the_local_time_zone(
    local_tz: str, value: str, seconds: float, form: str
):
    # Local time really differs from UTC here (NOW is 22:13 UTC) ...
    assert (time.localtime(NOW).tm_hour == 22) == (local_tz == "UTC0")
    # ... and the parse does not.
    parsed = parse_retry_after(value, now=NOW)
    assert parsed.seconds == pytest.approx(seconds)
    assert parsed.form == "date"


def test_never_raises_on_arbitrary_text():
    rng = random.Random(0)
    alphabet = "0123456789 ,:-+.\t\xb2\u0661eEGMTNovTue\x00\x7f\u00ff\u2028\ud7ff"
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        parsed = parse_retry_after(value, now=NOW)
        assert parsed.seconds is None or parsed.seconds >= 0
        assert parsed.usable == (parsed.reason == "")


# -- parse_rate_limit ------------------------------------------------------------------------


def _limit(headers: dict, now: float = NOW):
    # Field names are case-insensitive, as in a response's headers.
    return parse_rate_limit(CaseInsensitiveDict(headers), now=now)


@pytest.mark.parametrize(
    ("headers", "limit", "remaining", "reset", "window"),
    [
        ({}, None, None, None, None),
        ({"X-RateLimit-Limit": "60"}, 60, None, None, None),
        ({"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "30"}, None, 0, 30.0, None),
        ({"X-RateLimit-Reset": str(int(NOW) + 45)}, None, None, 45.0, None),
        ({"X-RateLimit-Reset": str(int(NOW) - 45)}, None, None, 0.0, None),
        (
            {"RateLimit-Limit": "100", "RateLimit-Remaining": "5", "RateLimit-Reset": "10"},
            100,
            5,
            10.0,
            None,
        ),
        ({"RateLimit-Policy": "100;w=60"}, 100, None, None, 60.0),
        (
            {"RateLimit-Policy": '"default";q=100;w=60', "RateLimit": '"default";r=0;t=12'},
            100,
            0,
            12.0,
            60.0,
        ),
        # draft-7: one combined dictionary field, and the policy
        (
            {"RateLimit": "limit=5, remaining=0, reset=1", "RateLimit-Policy": "5;w=1"},
            5,
            0,
            1.0,
            1.0,
        ),
        ({"RateLimit": "remaining=3,reset=7,limit=10"}, 10, 3, 7.0, None),
        ({"RateLimit": "limit=banana, remaining=2"}, None, 2, None, None),
        # draft-8 and later: structured fields with a policy name and parameters
        (
            {
                "RateLimit-Policy": '"20-in-10sec";q=20;w=10;pk=:cGFydGl0aW9uS2V5:',
                "RateLimit": '"20-in-10sec";r=0;t=10',
            },
            20,
            0,
            10.0,
            10.0,
        ),
        # draft-6 beside X-RateLimit-*: the draft's fields win
        (
            {"RateLimit-Limit": "10", "X-RateLimit-Limit": "99", "RateLimit-Policy": "10;w=1"},
            10,
            None,
            None,
            1.0,
        ),
        ({"X-RateLimit-Limit": "banana"}, None, None, None, None),
        ({"X-RateLimit-Limit": "60, 100"}, 60, None, None, None),
        # below zero: over the limit where one is stated (a limiter counting how far over, a
        # count one low), else perhaps "no limit", as some servers say it
        ({"X-RateLimit-Remaining": "-1"}, None, None, None, None),
        ({"X-RateLimit-Remaining": "-1", "X-RateLimit-Limit": "-1"}, None, None, None, None),
        ({"X-RateLimit-Remaining": "-1", "X-RateLimit-Limit": "5"}, 5, 0, None, None),
        ({"X-RateLimit-Remaining": "-3.0", "X-RateLimit-Limit": "5"}, 5, 0, None, None),
        ({"RateLimit-Remaining": "-2", "RateLimit-Policy": "5;w=1"}, 5, 0, None, 1.0),
        ({"X-RateLimit-Remaining": "-2", "RateLimit": "limit=5"}, 5, 0, None, None),
        ({"X-RateLimit-Remaining": "-0"}, None, 0, None, None),
        ({"X-RateLimit-Remaining": "--1", "X-RateLimit-Limit": "5"}, 5, None, None, None),
        ({"X-RateLimit-Remaining": "-", "X-RateLimit-Limit": "5"}, 5, None, None, None),
        # decimals, as some servers send them: Reddit's counts, Discord's epoch reset
        (
            {"X-Ratelimit-Remaining": "598.0", "X-Ratelimit-Reset": "338"},
            None,
            598,
            338.0,
            None,
        ),
        ({"X-RateLimit-Remaining": "0.5", "X-RateLimit-Limit": "100.0"}, 100, 0, None, None),
        # (a decimal reset is rounded up, as servers round theirs: see StatedLimits)
        ({"X-RateLimit-Reset": f"{NOW + 1.25:.3f}"}, None, None, 2.0, None),
        ({"RateLimit-Reset": "0.75"}, None, None, 1.0, None),
        ({"X-RateLimit-Reset": "1.5.5"}, None, None, None, None),
        ({"X-RateLimit-Reset": ".5"}, None, None, None, None),
        ({"X-RateLimit-Remaining": "1e3"}, None, None, None, None),
        # read from the digits: no float rounds 21 of them
        ({"X-RateLimit-Remaining": "999999999999.999999999"}, None, 999999999999, None, None),
        ({"X-RateLimit-Reset": "1700000000.000000001"}, None, None, 1.0, None),
        # draft-8's fields are integers: a decimal is no value, not its whole part
        ({"RateLimit": '"p";r=0.0;t=1.5', "RateLimit-Policy": '"p";q=5.5;w=1.5'}, *[None] * 4),
        # as Twitter and Okta spell them
        (
            {
                "x-rate-limit-limit": "900",
                "x-rate-limit-remaining": "0",
                "x-rate-limit-reset": str(int(NOW) + 40),
            },
            900,
            0,
            40.0,
            None,
        ),
        ({"X-RateLimit-Limit": "60", "X-Rate-Limit-Limit": "900"}, 60, None, None, None),
        ({"X-RateLimit-Limit": "banana", "X-Rate-Limit-Limit": "900"}, 900, None, None, None),
        # a limit of 0 states nothing (the next field that states one is read)
        ({"X-RateLimit-Limit": "0"}, None, None, None, None),
        ({"X-RateLimit-Limit": "0", "RateLimit": "limit=5"}, 5, None, None, None),
    ],
)
def test_parse_rate_limit(headers, limit, remaining, reset, window):
    info = _limit(headers)
    assert (info.limit, info.remaining, info.reset_after, info.window) == (
        limit,
        remaining,
        reset,
        window,
    )
    assert info.empty == (limit is remaining is reset is window is None)


@pytest.mark.parametrize(
    "value", ["", "x" * 10_000, "1" * 100, ";;;", "q=;w=", "\xb2", "\u0661", "0;w=0"]
)
def test_parse_rate_limit_never_raises(value: str):
    names = (
        "RateLimit",
        "RateLimit-Policy",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    )
    headers = dict.fromkeys(names, value)
    info = _limit(headers)
    assert info.window is None or info.window > 0
    assert info.reset_after is None or info.reset_after >= 0


def test_parse_retry_after_optional_type_is_accepted():
    value: Optional[str] = None
    assert parse_retry_after(value, now=NOW).usable is False
