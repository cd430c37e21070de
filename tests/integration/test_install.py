"""``install()``/``uninstall()``: the adapter on every new requests.Session, and back again."""

from __future__ import annotations

import pytest
import requests
import requests.sessions

from requests_retryafter import RetryAfterAdapter
from requests_retryafter._install import install, installed, uninstall

ORIGINAL_INIT = requests.sessions.Session.__init__


@pytest.fixture(autouse=True)
def _always_uninstall():
    yield
    uninstall()
    requests.sessions.Session.__init__ = ORIGINAL_INIT


def kwargs(clock):
    return {"clock": clock, "environ": {}, "seed": 0, "store": "memory://"}


def test_module_level_get_goes_through_the_adapter(server, clock):
    install(**kwargs(clock))
    server.replies((429, {"Retry-After": "7"}), 200)
    response = requests.get(server.url + "/data", timeout=5)
    assert response.status_code == 200
    assert server.count == 2
    assert clock.sleeps[0] == 7.0


def test_every_new_session_gets_the_same_adapter(server, clock):
    adapter = install(**kwargs(clock))
    assert installed() is adapter
    with requests.Session() as a, requests.session() as b:
        assert a.get_adapter("https://x.example") is adapter
        assert b.get_adapter(server.url) is adapter


def test_session_subclasses_are_covered(clock):
    class Mine(requests.Session):
        def __init__(self) -> None:
            super().__init__()
            self.headers["User-Agent"] = "legacy/1"

    adapter = install(**kwargs(clock))
    with Mine() as session:
        assert session.get_adapter("http://x.example") is adapter


def test_sessions_made_before_install_are_left_alone(clock):
    with requests.Session() as before:
        install(**kwargs(clock))
        assert not isinstance(before.get_adapter("http://x.example"), RetryAfterAdapter)


def test_what_one_session_learns_the_next_one_knows(server, clock):
    """One adapter behind every requests.get(): what the first call saw is known to all."""
    install(**kwargs(clock))
    server.replies((429, {"Retry-After": "5"}), 200, 200)
    requests.get(server.url, timeout=5)
    requests.get(server.url, timeout=5)
    state = installed().store.get(server.host)
    assert state is not None
    assert len(state.observations) == 1


def test_closing_a_session_does_not_close_the_shared_adapter(server, clock):
    adapter = install(**kwargs(clock))
    with requests.Session() as session:
        session.get(server.url, timeout=5)
    # requests.get() closes its session after each call: the adapter must live on.
    assert requests.get(server.url, timeout=5).status_code == 200
    assert installed() is adapter
    assert server.count == 2


def test_uninstall_restores_requests(clock):
    install(**kwargs(clock))
    assert requests.sessions.Session.__init__ is not ORIGINAL_INIT
    uninstall()
    assert requests.sessions.Session.__init__ is ORIGINAL_INIT
    assert installed() is None
    with requests.Session() as session:
        assert not isinstance(session.get_adapter("http://x.example"), RetryAfterAdapter)


def test_install_twice_replaces_the_adapter_and_wraps_once(clock):
    first = install(**kwargs(clock))
    wrapped = requests.sessions.Session.__init__
    second = install(**kwargs(clock))
    assert requests.sessions.Session.__init__ is wrapped
    assert second is not first
    with requests.Session() as session:
        assert session.get_adapter("http://x.example") is second
    uninstall()
    assert requests.sessions.Session.__init__ is ORIGINAL_INIT


def test_uninstall_is_idempotent():
    uninstall()
    uninstall()
    assert requests.sessions.Session.__init__ is ORIGINAL_INIT


def test_uninstall_keeps_a_patch_made_after_install(clock, caplog):
    install(**kwargs(clock))
    ours = requests.sessions.Session.__init__

    def theirs(self, *args, **kw):
        ours(self, *args, **kw)
        self.headers["X-Theirs"] = "1"

    requests.sessions.Session.__init__ = theirs
    uninstall()
    assert requests.sessions.Session.__init__ is theirs
    assert "patched again after install()" in caplog.text
    with requests.Session() as session:  # ours stays in the chain, doing nothing
        assert session.headers["X-Theirs"] == "1"
        assert not isinstance(session.get_adapter("http://x.example"), RetryAfterAdapter)


def test_uninstall_flushes_to_a_store_it_opened(server, clock, tmp_path):
    from requests_retryafter import open_store

    spec = f"json://{tmp_path}/hosts.json"
    install(**{**kwargs(clock), "store": spec})
    server.replies((429, {"Retry-After": "3"}), 200)
    requests.get(server.url, timeout=5)
    uninstall()
    with open_store(spec) as store:
        kept = store.get(server.host)
    assert kept is not None
    assert kept.observations[0].header == 3.0


def test_bad_configuration_raises_and_installs_nothing(clock):
    from requests_retryafter import ConfigurationError

    with pytest.raises(ConfigurationError):
        install(clock=clock, environ={"REQUESTS_RETRYAFTER_MAX_ATTEMPTS": "zero"})
    assert requests.sessions.Session.__init__ is ORIGINAL_INIT
    assert installed() is None
