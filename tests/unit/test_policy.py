"""``Policy``: validation, and settings from ``REQUESTS_RETRYAFTER_*`` variables."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from requests_retryafter import ConfigurationError, Policy
from requests_retryafter.policy import ENV_PREFIX


def test_defaults_match_the_figures_from_practice():
    p = Policy()
    assert p.min_sleep == 1.0
    assert p.max_sleep == 300.0
    assert p.max_attempts >= 1
    assert p.deadline > 0
    assert p.explicit_fields == frozenset()


def test_issue_example():
    p = Policy(max_attempts=5, deadline=600.0, min_sleep=1.0, max_sleep=300.0)
    assert (p.max_attempts, p.deadline, p.min_sleep, p.max_sleep) == (5, 600.0, 1.0, 300.0)
    assert p.explicit_fields == {"max_attempts", "deadline", "min_sleep", "max_sleep"}


def test_positional_arguments_count_as_explicit():
    p = Policy(3, 30.0)
    assert p.explicit_fields == {"max_attempts", "deadline"}


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


def test_replace_keeps_and_adds_explicit_fields():
    p = Policy(max_attempts=2).replace(deadline=30.0)
    assert (p.max_attempts, p.deadline) == (2, 30.0)
    assert p.explicit_fields == {"max_attempts", "deadline"}


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
    # Values from the environment are not explicit: a later explicit one still wins.
    assert field not in p.explicit_fields


def test_from_env_ignores_other_variables():
    p = Policy.from_env({"MAX_ATTEMPTS": "9", "REQUESTS_RETRYAFTER": "x", "HOME": "/"})
    assert p == Policy()


def test_explicit_fields_beat_the_environment():
    env = {ENV_PREFIX + "MAX_ATTEMPTS": "9", ENV_PREFIX + "DEADLINE": "30"}
    p = Policy.from_env(env, base=Policy(max_attempts=2))
    assert p.max_attempts == 2
    assert p.deadline == 30.0
    assert p.explicit_fields == {"max_attempts"}


def test_explicit_field_equal_to_the_default_still_wins():
    default = Policy().max_attempts
    env = {ENV_PREFIX + "MAX_ATTEMPTS": str(default + 3)}
    p = Policy.from_env(env, base=Policy(max_attempts=default))
    assert p.max_attempts == default


def test_overrides_beat_everything():
    env = {ENV_PREFIX + "MAX_ATTEMPTS": "9"}
    p = Policy.from_env(env, base=Policy(max_attempts=2), max_attempts=4)
    assert p.max_attempts == 4


def test_base_non_explicit_fields_yield_to_the_environment():
    base = Policy.from_env({ENV_PREFIX + "DEADLINE": "50"})
    assert base.deadline == 50.0
    assert Policy.from_env({ENV_PREFIX + "DEADLINE": "20"}, base=base).deadline == 20.0
    # With nothing in the environment the base's value stands.
    assert Policy.from_env({}, base=base).deadline == 50.0


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
    assert q.explicit_fields == {"max_attempts"}


def test_an_unknown_variable_is_reported_not_ignored_silently(caplog):
    caplog.set_level("WARNING", logger="requests_retryafter")
    policy = Policy.from_env({"REQUESTS_RETRYAFTER_MAX_ATTEMPT": "9"})  # a typo
    assert policy.max_attempts == Policy().max_attempts
    assert any("REQUESTS_RETRYAFTER_MAX_ATTEMPT " in r.getMessage() for r in caplog.records)
