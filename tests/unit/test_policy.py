"""``Policy``: validation, and settings from ``REQUESTS_RETRYAFTER_*`` variables."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import pickle
import threading
import warnings

import pytest

from requests_retryafter import ConfigurationError, Policy
from requests_retryafter.policy import (
    ENV_PREFIX,
    MAX_HOLD_SECONDS,
    MAX_SECONDS,
    RetryAfterWarning,
    resolve,
)


def test_defaults_match_the_figures_from_practice():
    p = Policy()
    assert p.min_sleep == 1.0
    assert p.max_sleep == 300.0
    assert p.max_attempts >= 1
    assert p.deadline > 0


def test_issue_example():
    p = Policy(max_attempts=5, deadline=600.0, min_sleep=1.0, max_sleep=300.0)
    assert (p.max_attempts, p.deadline, p.min_sleep, p.max_sleep) == (5, 600.0, 1.0, 300.0)


def test_positional_arguments_are_the_fields_in_order():
    p = Policy(3, 30.0)
    assert (p.max_attempts, p.deadline) == (3, 30.0)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Policy().max_attempts = 2  # type: ignore[misc]


def test_configuration_error_is_a_value_error():
    assert issubclass(ConfigurationError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"deadline": 0}, "deadline"),
        ({"deadline": -1.0}, "deadline"),
        ({"min_sleep": -0.1}, "min_sleep"),
        ({"max_sleep": 0.5}, "max_sleep"),
        ({"backoff_base": 0}, "backoff_base"),
        ({"backoff_cap": 0.5}, "backoff_cap"),
        ({"max_hold": 10.0}, "max_hold"),
        ({"plausible_wait": -1}, "plausible_wait"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"utilization": 0}, "utilization"),
        ({"utilization": 1.5}, "utilization"),
        ({"window": 1}, "window"),
        ({"sync_interval": -1}, "sync_interval"),
        ({"connect_retries": -1}, "connect_retries"),
        ({"deadline": float("nan")}, "deadline"),
        ({"deadline": float("inf")}, "deadline"),
        ({"max_attempts": "3"}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"pace": "yes"}, "pace"),
    ],
)
def test_invalid_values_raise_configuration_error(kwargs, words):
    with pytest.raises(ConfigurationError, match=words):
        Policy(**kwargs)


def test_replace_keeps_the_other_fields():
    p = Policy(max_attempts=2).replace(deadline=30.0)
    assert (p.max_attempts, p.deadline) == (2, 30.0)
    with pytest.raises(ConfigurationError, match="bogus"):
        p.replace(bogus=1)


def test_env_var_names():
    assert ENV_PREFIX == "REQUESTS_RETRYAFTER_"
    assert Policy.env_var("max_attempts") == "REQUESTS_RETRYAFTER_MAX_ATTEMPTS"


@pytest.mark.parametrize(
    ("var", "raw", "field", "value"),
    [
        ("MAX_ATTEMPTS", "9", "max_attempts", 9),
        ("MAX_ATTEMPTS", " 9 ", "max_attempts", 9),
        ("DEADLINE", "30", "deadline", 30.0),
        ("DEADLINE", "2.5", "deadline", 2.5),
        ("MIN_SLEEP", "0", "min_sleep", 0.0),
        ("MAX_SLEEP", "120", "max_sleep", 120.0),
        ("MAX_CONCURRENCY", "2", "max_concurrency", 2),
        ("PACE", "false", "pace", False),
        ("PACE", "0", "pace", False),
        ("PACE", "No", "pace", False),
        ("PACE", "on", "pace", True),
        ("PACE", "YES", "pace", True),
        ("WINDOW", "4", "window", 4),
    ],
)
def test_from_env_reads_each_field(var, raw, field, value):
    p = Policy.from_env({ENV_PREFIX + var: raw})
    assert getattr(p, field) == value
    assert type(getattr(p, field)) is type(value)


def test_from_env_ignores_other_variables():
    p = Policy.from_env({"MAX_ATTEMPTS": "9", "REQUESTS_RETRYAFTER": "x", "HOME": "/"})
    assert p == Policy()


def test_explicit_fields_beat_the_environment():
    env = {ENV_PREFIX + "MAX_ATTEMPTS": "9", ENV_PREFIX + "DEADLINE": "30"}
    p = Policy.from_env(env, max_attempts=2)
    assert p.max_attempts == 2
    assert p.deadline == 30.0


def test_explicit_field_equal_to_the_default_still_wins():
    default = Policy().max_attempts
    env = {ENV_PREFIX + "MAX_ATTEMPTS": str(default + 3)}
    p = Policy.from_env(env, max_attempts=default)
    assert p.max_attempts == default


def test_a_policy_given_is_complete_and_the_environment_it_hides_is_named():
    env = {ENV_PREFIX + "MAX_ATTEMPTS": "9", ENV_PREFIX + "DEADLINE": "30"}
    with pytest.warns(RetryAfterWarning, match="REQUESTS_RETRYAFTER_DEADLINE") as record:
        p = resolve(Policy(max_attempts=2), env, {"max_attempts": 4})
    assert (p.max_attempts, p.deadline) == (4, Policy().deadline)
    # The explicit keyword is not reported: nothing of the environment was meant for it.
    assert "REQUESTS_RETRYAFTER_MAX_ATTEMPTS" not in str(record[0].message)
    assert record[0].filename == __file__


def test_without_a_policy_the_settings_step_reads_the_environment():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = resolve(None, {ENV_PREFIX + "DEADLINE": "30"}, {"max_attempts": 4})
        assert resolve(Policy(), {}, {}) == Policy()
    assert (p.max_attempts, p.deadline) == (4, 30.0)


def test_unknown_override_raises():
    with pytest.raises(ConfigurationError, match="bogus"):
        Policy.from_env({}, bogus=1)


@pytest.mark.parametrize(
    ("var", "raw"),
    [
        ("MAX_ATTEMPTS", "banana"),
        ("MAX_ATTEMPTS", "2.5"),
        ("MAX_ATTEMPTS", ""),
        ("MAX_ATTEMPTS", "0"),
        ("DEADLINE", "soon"),
        ("DEADLINE", "inf"),
        ("DEADLINE", "nan"),
        ("DEADLINE", "-5"),
        ("MIN_SLEEP", "-1"),
        ("MAX_SLEEP", "0.1"),
        ("PACE", "maybe"),
        ("UTILIZATION", "2"),
        ("MAX_CONCURRENCY", "0"),
    ],
)
def test_bad_environment_value_names_the_variable(var, raw):
    name = ENV_PREFIX + var
    with pytest.raises(ValueError, match=name) as info:
        Policy.from_env({name: raw})
    assert isinstance(info.value, ConfigurationError)


def test_environment_is_read_only_when_asked(monkeypatch):
    monkeypatch.setenv(ENV_PREFIX + "MAX_ATTEMPTS", "7")
    assert Policy().max_attempts != 7  # the constructor never reads the environment
    assert Policy.from_env().max_attempts == 7  # from_env() reads os.environ by default


def test_pickles():
    p = Policy(max_attempts=2)
    q = pickle.loads(pickle.dumps(p))
    assert q == p


# -- ranges: every setting is checked when it is read (issue #9, item 5) -------------------------

#: Each numeric field's largest value.
MAXIMA = {
    "max_attempts": 1000,
    "deadline": MAX_SECONDS,
    "max_sleep": MAX_SECONDS,
    "backoff_cap": MAX_SECONDS,
    "max_hold": MAX_HOLD_SECONDS,
    "plausible_wait": MAX_SECONDS,
    "max_concurrency": 1000,
    "window": 10000,
    "sync_interval": MAX_SECONDS,
    "connect_retries": 100,
}


def _above(name: str) -> object:
    value = MAXIMA[name]
    return value + 1 if isinstance(value, int) else value * 1.001


def test_every_numeric_field_has_an_upper_bound():
    numeric = {f.name for f in dataclasses.fields(Policy) if f.type in ("int", "float")}
    bounded_by_others = {"min_sleep", "backoff_base", "utilization"}  # <= max_sleep, cap, 1
    assert set(MAXIMA) == numeric - bounded_by_others


def test_time_bounds_fit_every_timeout_the_platform_takes():
    # A setting becomes a socket timeout, a lock wait or a sleep: each must fit the smallest C
    # limit (32-bit milliseconds, as poll() and Windows waits take) and threading's own.
    # (max_hold is a time stamp compared with the clock, never a wait.)
    assert MAX_SECONDS * 1000 < 2**31
    assert MAX_SECONDS < threading.TIMEOUT_MAX
    assert MAX_HOLD_SECONDS < threading.TIMEOUT_MAX
    lock = threading.Lock()
    assert lock.acquire(timeout=MAX_SECONDS)  # no OverflowError
    lock.release()


@pytest.mark.parametrize("name", sorted(MAXIMA))
def test_the_largest_value_is_accepted(name):
    kwargs = {name: MAXIMA[name]}
    if name == "max_sleep":
        kwargs["max_hold"] = MAX_HOLD_SECONDS
    p = Policy(**kwargs)
    assert getattr(p, name) == MAXIMA[name]


@pytest.mark.parametrize("name", sorted(MAXIMA))
def test_a_value_above_the_bound_is_refused_naming_the_field(name):
    kwargs = {name: _above(name)}
    if name == "max_sleep":
        kwargs["max_hold"] = MAX_HOLD_SECONDS
    with pytest.raises(ConfigurationError, match=rf"Policy\.{name} must be at most"):
        Policy(**kwargs)


@pytest.mark.parametrize("name", sorted(MAXIMA))
def test_a_variable_above_the_bound_is_refused_naming_the_variable(name):
    var = Policy.env_var(name)
    env = {var: str(_above(name))}
    if name == "max_sleep":
        env[Policy.env_var("max_hold")] = str(MAX_HOLD_SECONDS)
    with pytest.raises(ConfigurationError, match=rf"^{var}=.*{name} must be at most"):
        Policy.from_env(env)


def test_issue_example_deadline_1e10_is_refused_when_read():
    # It was accepted, then every request raised OverflowError (socket and lock timeouts).
    with pytest.raises(ConfigurationError, match="REQUESTS_RETRYAFTER_DEADLINE='1e10'"):
        Policy.from_env({ENV_PREFIX + "DEADLINE": "1e10"})


def test_a_huge_integer_is_refused_not_overflowed():
    # math.isfinite(10**400) raises OverflowError; the check must not.
    with pytest.raises(ConfigurationError, match="deadline must be at most"):
        Policy(deadline=10**400)
    with pytest.raises(ConfigurationError, match=ENV_PREFIX + "MAX_ATTEMPTS"):
        Policy.from_env({ENV_PREFIX + "MAX_ATTEMPTS": "9" * 400})


@pytest.mark.parametrize("name", ["max_attempts", "max_concurrency", "window", "connect_retries"])
def test_an_int_field_refuses_a_float(name):
    # range(2.5) and Semaphore(2.5) would fail on a request instead.
    with pytest.raises(ConfigurationError, match=rf"Policy\.{name} must be an integer"):
        Policy(**{name: 3.0})


def test_float_fields_take_ints():
    assert Policy(deadline=30, plausible_wait=5000).deadline == 30


def test_the_smallest_values_are_accepted():
    p = Policy(max_attempts=1, min_sleep=0, max_sleep=0.0, max_hold=0.0, plausible_wait=0)
    assert p.max_attempts == 1
    Policy(window=2, connect_retries=0, sync_interval=0, max_concurrency=1, utilization=1)


def test_a_bound_set_by_the_environment_is_the_one_named():
    # The explicit max_sleep is fine; the variable that conflicts with it is to blame.
    env = {ENV_PREFIX + "MIN_SLEEP": "10"}
    with pytest.raises(ConfigurationError, match=r"^REQUESTS_RETRYAFTER_MIN_SLEEP='10': min_sleep"):
        Policy.from_env(env, max_sleep=5.0)
    env = {ENV_PREFIX + "MAX_SLEEP": "100000"}  # above the default max_hold
    with pytest.raises(
        ConfigurationError, match=r"^REQUESTS_RETRYAFTER_MAX_SLEEP='100000': max_hold"
    ):
        Policy.from_env(env)


def test_a_bad_override_names_the_field():
    with pytest.raises(ConfigurationError, match=r"^Policy\.deadline must be at most"):
        Policy.from_env({ENV_PREFIX + "DEADLINE": "5"}, deadline=1e9)


def test_the_error_gives_the_reason_for_the_bound():
    with pytest.raises(ConfigurationError, match="socket timeouts"):
        Policy(deadline=2e6)


def test_a_policy_at_every_bound_serves_a_request(make_session, server):
    session, _ = make_session(**MAXIMA)
    assert session.get(server.url + "/").status_code == 200
    assert session.get(server.url + "/", timeout=5).status_code == 200


# -- a plain dataclass: no patched constructor --------------------------------------------------


def test_the_constructor_is_the_dataclass_own():
    params = list(inspect.signature(Policy).parameters)
    assert params == [f.name for f in dataclasses.fields(Policy)]
    assert Policy.__init__.__qualname__.endswith("__init__")
    assert "__new__" not in vars(Policy)
    assert not hasattr(Policy.__init__, "__wrapped__")


def test_copies_are_equal():
    p = Policy(max_attempts=2)
    assert copy.copy(p) == p
    assert copy.deepcopy(p) == p


def test_replace_checks_the_new_values():
    with pytest.raises(ConfigurationError, match="deadline"):
        Policy().replace(deadline=math.inf)


# -- unknown variables: a warning the user sees (issue #9, item 12) -----------------------------


def test_an_unknown_variable_warns_with_the_name_meant():
    with pytest.warns(RetryAfterWarning, match="REQUESTS_RETRYAFTER_MAX_ATTEMPT ") as record:
        policy = Policy.from_env({"REQUESTS_RETRYAFTER_MAX_ATTEMPT": "9"})  # a typo
    assert policy.max_attempts == Policy().max_attempts
    (warning,) = record
    assert "did you mean REQUESTS_RETRYAFTER_MAX_ATTEMPTS?" in str(warning.message)
    assert warning.filename == __file__  # it points at the caller, not at the library


def test_an_unknown_variable_far_from_any_name_warns_without_a_guess():
    with pytest.warns(RetryAfterWarning) as record:
        Policy.from_env({"REQUESTS_RETRYAFTER_XYZZY": "1"})
    assert "REQUESTS_RETRYAFTER_XYZZY" in str(record[0].message)
    assert "did you mean" not in str(record[0].message)


def test_a_variable_in_the_wrong_case_warns():
    with pytest.warns(RetryAfterWarning, match="did you mean REQUESTS_RETRYAFTER_DEADLINE"):
        p = Policy.from_env({"requests_retryafter_deadline": "5"})
    assert p.deadline == Policy().deadline


def test_an_unknown_variable_warns_through_the_adapter():
    from requests_retryafter import RetryAfterAdapter

    with pytest.warns(RetryAfterWarning, match="REQUESTS_RETRYAFTER_MAX_SLEPE") as record:
        adapter = RetryAfterAdapter(environ={"REQUESTS_RETRYAFTER_MAX_SLEPE": "5"})
    adapter.close()
    assert record[0].filename == __file__


def test_known_and_test_variables_do_not_warn():
    env = {
        ENV_PREFIX + "STORE": "memory://",
        ENV_PREFIX + "TEST_REDIS_URL": "redis://localhost",
        ENV_PREFIX + "DEADLINE": "5",
        "OTHER_REQUESTS_RETRYAFTER_X": "1",
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Policy.from_env(env).deadline == 5.0


def test_the_warning_is_a_user_warning():
    assert issubclass(RetryAfterWarning, UserWarning)
