"""Every kind of Retry-After value, sent by a real server on a 429 (or 503) before a 200.

The adapter must return the 200 and never raise; its one sleep is the header when the header is
trusted on first sight (1 to ``plausible_wait`` = 60 s, or a date that far ahead); for a larger
one it probes after the floor (a second rejection whose header counted down would corroborate it);
else it is its own first backoff, which is the floor (1 s). Never below 1 s, never above 300 s.

The virtual clock starts at Tue, 14 Nov 2023 22:13:20 GMT.
"""

from __future__ import annotations

import pytest

FLOOR = 1.0
PROBE = 1.0  # an uncorroborated long header: probed after the floor

# (value, the sleep expected)
TABLE = [
    # delta-seconds
    ("0", FLOOR),
    ("00", FLOOR),
    ("1", 1.0),
    ("2", 2.0),
    ("30", 30.0),
    ("030", 30.0),
    (" 45 ", 45.0),
    ("60", 60.0),
    ("61", PROBE),  # larger than a first-sight host is trusted with: probed
    ("120", PROBE),
    ("300", PROBE),
    ("3600", PROBE),
    ("86400", PROBE),
    ("2147483647", PROBE),
    # unusable
    ("", FLOOR),
    ("1.5", FLOOR),
    ("1.0", FLOOR),
    ("-5", FLOOR),
    ("-1", FLOOR),
    ("+1", FLOOR),
    ("banana", FLOOR),
    ("30s", FLOOR),
    ("1e3", FLOOR),
    ("0x1e", FLOOR),
    ("inf", FLOOR),
    ("NaN", FLOOR),
    ("30, 60", FLOOR),
    ("30,60", FLOOR),
    ("\xb2", FLOOR),
    # UTF-8 bytes of Arabic-Indic and fullwidth digits, as they arrive (read as latin-1)
    ("\u0661\u0662".encode().decode("latin-1"), FLOOR),
    ("\uff13\uff10".encode().decode("latin-1"), FLOOR),
    ("2147483648", FLOOR),
    ("99999999999", FLOOR),
    ("9" * 400, FLOOR),
    # HTTP-dates: the three forms, ahead, now, past
    ("Tue, 14 Nov 2023 22:13:50 GMT", 30.0),
    ("Tuesday, 14-Nov-23 22:13:50 GMT", 30.0),
    ("Tue Nov 14 22:13:50 2023", 30.0),
    ("Tue, 14 Nov 2023 22:14:20 GMT", 60.0),
    ("Tue, 14 Nov 2023 22:14:21 GMT", PROBE),
    ("Tue, 14 Nov 2023 22:13:20 GMT", FLOOR),
    ("Tue, 14 Nov 2023 22:13:21 GMT", 1.0),
    ("Sun, 06 Nov 1994 08:49:37 GMT", FLOOR),
    ("Sunday, 06-Nov-94 08:49:37 GMT", FLOOR),
    ("Sun Nov  6 08:49:37 1994", FLOOR),
    ("Wed, 15 Nov 2023 22:13:20 GMT", PROBE),
    ("Sat Dec  2 22:13:20 2023", PROBE),
    # malformed dates
    ("Tue, 14 Nov 2023 22:13:50 UTC", FLOOR),
    ("Tue, 14 Nov 2023 22:13:50 +0000", FLOOR),
    ("tue, 14 nov 2023 22:13:50 gmt", FLOOR),
    ("Tue, 4 Nov 2023 22:13:50 GMT", FLOOR),
    ("Tue, 31 Feb 2023 22:13:50 GMT", FLOOR),
    ("2023-11-14T22:13:50Z", FLOOR),
    ("Tue, 14 Nov 2023 22:13:50 GMT, 30", FLOOR),
    # dates beyond any clock
    ("Fri, 31 Dec 9999 23:59:50 GMT", FLOOR),
    ("Fri, 31 Dec 9999 23:59:59 GMT", FLOOR),
]

DATES = [row for row in TABLE if "GMT" in row[0] or row[0].endswith(" 2023")]


def _id(value: str) -> str:
    return repr(value) if len(value) < 40 else repr(value[:12] + "...")


def check(server, make_session, clock, value, expected, status=429):
    t0 = clock.time()
    server.replies((status, {"Retry-After": value}))
    session, _ = make_session()
    r = session.get(server.url + "/data")
    assert r.status_code == 200
    assert r.content == b"ok"
    assert server.count == 2
    assert clock.sleeps == [expected]
    assert all(1.0 <= s <= 300.0 for s in clock.sleeps)
    assert server.times == [t0, t0 + expected]


def test_table_is_big_enough():
    assert len(TABLE) >= 40


@pytest.mark.parametrize(("value", "expected"), TABLE, ids=[_id(v) for v, _ in TABLE])
def test_retry_after_value_on_a_429(server, make_session, clock, value, expected):
    check(server, make_session, clock, value, expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("7", 7.0), ("0", FLOOR), ("banana", FLOOR), ("Tue, 14 Nov 2023 22:13:50 GMT", 30.0)],
)
def test_retry_after_value_on_a_503(server, make_session, clock, value, expected):
    check(server, make_session, clock, value, expected, status=503)


@pytest.mark.parametrize(("value", "expected"), DATES[:6], ids=[_id(v) for v, _ in DATES[:6]])
def test_dates_do_not_depend_on_the_local_time_zone(
    local_tz, server, make_session, clock, value, expected
):
    check(server, make_session, clock, value, expected)
