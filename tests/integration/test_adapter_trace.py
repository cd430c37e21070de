"""One decision per retry, ``response.retry_after``, the per-host summary, stable codes and
Policy fields as keyword arguments: the adapter against a real local server on virtual time."""

from __future__ import annotations

import logging
import pickle
import threading
from typing import List

import pytest
import requests

from requests_retryafter import (
    ConfigurationError,
    Decision,
    Event,
    HostSummary,
    Policy,
    RetryAfterAdapter,
    RetryAfterWarning,
    RetryLimitExceeded,
    RetryTrace,
    trace_of,
)

RA = "Retry-After"


def retries(decisions):
    """The decisions but category changes (which a first recovery may bring)."""
    return [d for d in decisions if d.event != Event.CATEGORY]


def collecting(make_session, **kwargs):
    decisions: List[Decision] = []
    session, adapter = make_session(on_decision=decisions.append, **kwargs)
    return session, adapter, decisions


# -- one decision, one line -------------------------------------------------------------------


def test_a_retry_is_one_decision_with_one_wait(server, clock, make_session):
    server.replies((429, {RA: "5"}), 200)
    session, _, decisions = collecting(make_session)
    assert session.get(server.url + "/x").status_code == 200
    assert [d.event for d in retries(decisions)] == [Event.SLEEP]
    assert decisions[0].wait == 5.0
    assert decisions[0].code == "header_obeyed"
    assert clock.sleeps == [pytest.approx(5.0)]


def test_the_log_has_one_line_per_retry(server, make_session, caplog):
    server.replies((429, {RA: "5"}), (429, {RA: "5"}), 200)
    session, _, _ = collecting(make_session)
    with caplog.at_level(logging.DEBUG, logger="requests_retryafter"):
        session.get(server.url + "/x")
    waits = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(waits) == 2, waits
    assert all("5.0 s" in w for w in waits)


def test_own_backoff_is_one_decision_too(server, clock, make_session):
    server.replies(429, 200)  # no header: own backoff
    session, _, decisions = collecting(make_session)
    session.get(server.url + "/x")
    assert [(d.event, d.code) for d in retries(decisions)] == [(Event.SLEEP, "own_backoff")]
    assert clock.sleeps == [pytest.approx(decisions[0].wait)]


def test_a_wait_for_another_calls_refusal_is_its_own_event(server, clock, make_session):
    """Call A is refused (wait 30 s); call B, in another thread, waits for A's wait: that is
    B's own ``shared_wait`` decision, while A's own wait stays one ``sleep``."""
    gate = threading.Event()
    first = threading.Event()

    def respond(seen):
        if not first.is_set():
            first.set()
            return 429, {RA: "30"}
        return 200, {}

    server.respond(respond)
    decisions: List[Decision] = []
    seen_sleep = threading.Event()

    def hook(decision):
        decisions.append(decision)
        if decision.event == Event.SLEEP:
            seen_sleep.set()
            gate.wait(5)  # hold A until B has decided to wait

    session, adapter = make_session(on_decision=hook)
    results = {}

    def call_a():
        results["a"] = session.get(server.url + "/a")

    thread = threading.Thread(target=call_a)
    thread.start()
    assert seen_sleep.wait(5)
    other = requests.Session()
    other.mount("http://", adapter)

    def call_b():
        results["b"] = other.get(server.url + "/b")

    waiting = threading.Thread(target=call_b)
    waiting.start()
    for _ in range(500):
        if any(d.code == "shared_wait" for d in decisions):
            break
        threading.Event().wait(0.01)
    gate.set()
    thread.join(10)
    waiting.join(10)
    other.close()
    shared = [d for d in decisions if d.code == "shared_wait"]
    assert len(shared) == 1
    assert shared[0].event == Event.WAIT
    assert shared[0].wait == pytest.approx(30.0, abs=0.5)
    assert [d.event for d in decisions].count(Event.SLEEP) == 1
    assert retries(trace_of(results["b"]).decisions) == [shared[0]]
    assert [d.event for d in retries(trace_of(results["a"]).decisions)] == [Event.SLEEP]


# -- codes and the Event enum -----------------------------------------------------------------


def test_event_is_a_str_enum():
    assert Event.SLEEP == "sleep"
    assert isinstance(Event.GIVE_UP, str)
    assert Decision("give_up", "h").event is Event.GIVE_UP
    assert f"{Event.HOLD}" == "hold"
    with pytest.raises(ValueError):
        Decision("nap", "h")


@pytest.mark.parametrize(
    ("replies", "method", "code", "event"),
    [
        ([401], "GET", "auth", Event.REFUSE),
        ([(429, {RA: "2"})], "POST", "not_replayable", Event.REFUSE),
        ([(200, {RA: "9"})], "GET", "header_on_success", Event.IGNORE),
    ],
)
def test_codes_of_answers_not_retried(server, make_session, replies, method, code, event):
    server.replies(*replies)
    session, _, decisions = collecting(make_session)
    session.request(method, server.url + "/x")
    assert (decisions[-1].event, decisions[-1].code) == (event, code)


def test_code_attempts_on_a_give_up(server, make_session):
    server.respond(lambda seen: (429, {RA: "1"}))
    session, _, decisions = collecting(make_session, max_attempts=2)
    with pytest.raises(RetryLimitExceeded) as info:
        session.get(server.url + "/x")
    assert decisions[-1].event == Event.GIVE_UP
    assert decisions[-1].code == "attempts"
    trace = trace_of(info.value.response)
    assert trace is not None
    assert (trace.attempts, trace.refusals) == (2, 2)


def test_code_deadline_on_a_give_up(server, make_session):
    server.replies((429, {RA: "50"}))
    session, _, decisions = collecting(make_session, deadline=10.0)
    with pytest.raises(requests.exceptions.RetryError):
        session.get(server.url + "/x")
    assert (decisions[-1].event, decisions[-1].code) == (Event.GIVE_UP, "deadline")


def test_code_hold(server, make_session):
    server.replies((429, {RA: "1000"}))
    session, _, decisions = collecting(make_session, plausible_wait=2000.0)
    with pytest.raises(requests.exceptions.RetryError):
        session.get(server.url + "/x")
    assert decisions[-1].code == "hold"


# -- response.retry_after --------------------------------------------------------------------


def test_every_response_carries_its_trace(server, clock, make_session):
    server.replies((429, {RA: "3"}), (503, {RA: "4"}), 200)
    session, _, decisions = collecting(make_session)
    response = session.get(server.url + "/x")
    trace = response.retry_after
    assert isinstance(trace, RetryTrace)
    assert trace is trace_of(response)
    assert trace.host == server.host
    assert (trace.attempts, trace.refusals, trace.retried) == (3, 2, True)
    assert trace.waited == pytest.approx(7.0, abs=0.01)
    assert trace.decisions == tuple(decisions)
    with pytest.raises(AttributeError):
        trace.attempts = 1  # type: ignore[misc]


def test_a_plain_answer_has_a_trace_of_one_attempt(server, make_session):
    session, _, _ = collecting(make_session)
    trace = trace_of(session.get(server.url + "/x"))
    assert trace == RetryTrace(server.host, 1, 0, 0.0, ())
    assert not trace.retried


def test_trace_of_a_foreign_response_is_none():
    assert trace_of(requests.Response()) is None


def test_each_call_has_its_own_trace(server, make_session):
    server.replies((429, {RA: "2"}), 200, 200)
    session, _, _ = collecting(make_session)
    first, second = session.get(server.url + "/1"), session.get(server.url + "/2")
    assert first.retry_after.attempts == 2
    assert second.retry_after.attempts == 1
    assert retries(second.retry_after.decisions) == []


# -- summary -----------------------------------------------------------------------------------


def test_summary_per_host(server, make_session):
    server.replies((429, {RA: "2"}), 200, 200, (429, {RA: "1"}), (429, {RA: "1"}))
    session, adapter, _ = collecting(make_session, max_attempts=2)
    session.get(server.url + "/1")
    session.get(server.url + "/2")
    with pytest.raises(RetryLimitExceeded):
        session.get(server.url + "/3")
    summary = adapter.summary()
    assert list(summary) == [server.host]
    s = summary[server.host]
    assert isinstance(s, HostSummary)
    assert (s.calls, s.requests, s.refusals, s.holds, s.give_ups) == (3, 5, 3, 0, 1)
    assert s.waits == 2
    assert s.waited == pytest.approx(3.0, abs=0.01)


# -- Policy fields as keyword arguments ------------------------------------------------------


def test_policy_fields_as_keywords(clock):
    adapter = RetryAfterAdapter(max_attempts=3, deadline=30.0, clock=clock, environ={})
    try:
        assert adapter.policy.max_attempts == 3
        assert adapter.policy.deadline == 30.0
    finally:
        adapter.close()


def test_policy_keywords_win_over_the_environment(clock):
    env = {"REQUESTS_RETRYAFTER_MAX_ATTEMPTS": "9", "REQUESTS_RETRYAFTER_DEADLINE": "99"}
    adapter = RetryAfterAdapter(max_attempts=2, clock=clock, environ=env)
    try:
        assert adapter.policy.max_attempts == 2
        assert adapter.policy.deadline == 99.0
    finally:
        adapter.close()


def test_a_policy_given_is_used_as_it_is_with_the_keywords_over_it(clock):
    env = {"REQUESTS_RETRYAFTER_DEADLINE": "99"}
    with pytest.warns(RetryAfterWarning, match="REQUESTS_RETRYAFTER_DEADLINE"):
        adapter = RetryAfterAdapter(
            policy=Policy(max_attempts=5, window=4), max_attempts=2, clock=clock, environ=env
        )
    try:
        assert (adapter.policy.max_attempts, adapter.policy.window) == (2, 4)
        assert adapter.policy.deadline == Policy().deadline
    finally:
        adapter.close()


def test_a_policy_built_from_the_environment_keeps_it(clock):
    env = {"REQUESTS_RETRYAFTER_DEADLINE": "99"}
    policy = Policy.from_env(env, max_attempts=5)
    adapter = RetryAfterAdapter(policy=policy, clock=clock, environ={})
    try:
        assert (adapter.policy.max_attempts, adapter.policy.deadline) == (5, 99.0)
    finally:
        adapter.close()


def test_policy_keyword_is_checked(clock):
    with pytest.raises(ConfigurationError, match="max_attempts"):
        RetryAfterAdapter(max_attempts=0, clock=clock, environ={})


def test_policy_keyword_is_kept_by_pickling(clock):
    adapter = RetryAfterAdapter(max_attempts=3, environ={})
    try:
        copy = pickle.loads(pickle.dumps(adapter))
        try:
            assert copy.policy.max_attempts == 3
        finally:
            copy.close()
    finally:
        adapter.close()


def test_unknown_keyword_is_still_a_type_error():
    with pytest.raises(TypeError, match="max_attempt"):
        RetryAfterAdapter(max_attempt=3, environ={})  # type: ignore[call-arg]


def test_policy_keyword_in_a_real_call(server, clock):
    server.respond(lambda seen: (429, {RA: "1"}))
    adapter = RetryAfterAdapter(max_attempts=2, clock=clock, environ={}, seed=0)
    with requests.Session() as session:
        session.mount("http://", adapter)
        with pytest.raises(RetryLimitExceeded):
            session.get(server.url + "/x")
    adapter.close()
    assert server.count == 2
