"""``benchmarks/bench_nginx.py`` and ``benchmarks/bench_limiters.py``: their pure parts (the
nginx config they generate, how wire counts are judged, the headers the limiter app sends).
The real-time runs themselves are in .ci/bench.sh, not here: nothing here sleeps.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest


@pytest.fixture(scope="module")
def nginx_bench(load_benchmark) -> Iterator[ModuleType]:
    with load_benchmark("bench_nginx") as module:
        yield module


@pytest.fixture(scope="module")
def limiters_bench(load_benchmark) -> Iterator[ModuleType]:
    pytest.importorskip("limits")
    with load_benchmark("bench_limiters") as module:
        yield module


def _cases(bench: ModuleType) -> list:
    cases = [bench.Case(b, ra, bench.ADAPTER) for b in bench.BURSTS for ra in bench.RETRY_AFTER]
    for index, case in enumerate(cases):
        case.port = 20000 + index
        case.zone = f"z{index}"
    return cases


def test_the_nginx_config_has_one_server_and_zone_per_case(nginx_bench, tmp_path):
    cases = _cases(nginx_bench)
    conf = nginx_bench.nginx_config(cases, str(tmp_path))
    assert conf.count("limit_req_zone $binary_remote_addr zone=") == len(cases)
    assert conf.count("rate=10r/s;") == len(cases)
    assert conf.count("limit_req_status 429;") == len(cases)
    assert "limit_req zone=z0 nodelay;" in conf
    first_with_burst = len(nginx_bench.RETRY_AFTER)  # cases go burst by burst
    assert f"limit_req zone=z{first_with_burst} burst=5 nodelay;" in conf
    assert "daemon off;" in conf
    assert f"pid {tmp_path}/nginx.pid;" in conf
    # Retry-After only on 429s, whatever the variant
    assert 'map $status $ra_3600 { 429 "3600"; default ""; }' in conf
    assert 'map $status $ra_1 { 429 "1"; default ""; }' in conf
    assert "add_header Retry-After $ra_past always;" in conf


@pytest.mark.skipif(
    not shutil.which("nginx") and not Path("/usr/sbin/nginx").exists(), reason="no nginx"
)
def test_nginx_accepts_the_generated_config(nginx_bench, tmp_path):
    binary = nginx_bench.find_nginx(None)
    (tmp_path / "www").mkdir()
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx_bench.nginx_config(_cases(nginx_bench), str(tmp_path)))
    done = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_case_gets_a_port_of_its_own(nginx_bench):
    # Chosen one at a time and released, two cases could get the same port and share one
    # server block (CI once reported one group's figures for two).
    ports = nginx_bench.free_ports(64)
    assert len(set(ports)) == 64


def test_wire_counts_are_judged_on_the_last_10_s(nginx_bench):
    case = nginx_bench.Case(0, "none", nginx_bench.ADAPTER)
    # 1 ok/s for 25 s, then 10 ok/s; a 429 each second of the first 3
    hits = [(float(t), 200) for t in range(25)]
    hits += [(25 + i / 10, 200) for i in range(100)]
    hits += [(t + 0.5, 429) for t in range(3)]
    hits += [(-1.0, 200), (35.0, 200)]  # before and after the run: not counted
    result = nginx_bench.summarise(case, 1, 35.0, hits, {}, 0)
    assert result.ok == 125
    assert result.refused == 3
    assert result.ok_per_s_last == 10.0
    assert result.ok_per_s_first == pytest.approx((25 + 50) / 30, abs=0.01)
    assert all(result.targets.values())
    slow = nginx_bench.summarise(case, 1, 35.0, hits[:25], {}, 0)
    assert list(slow.targets.values()) == [False, True]  # 1 ok/s, never refused
    assert slow.refused_share == 0.0


def test_urllib3_rows_are_not_judged(nginx_bench):
    case = nginx_bench.Case(5, "0", nginx_bench.BASELINE)
    assert nginx_bench.summarise(case, 1, 35.0, [], {}, 0).targets == {}


@pytest.mark.parametrize("index", range(5))
def test_the_limiter_app_states_its_limit_on_every_answer(limiters_bench, index):
    case = limiters_bench.CASES[index]
    app = limiters_bench.LimitedApp(case)
    answers = []
    for _ in range(case.limit + 1):
        got = {}

        def start_response(status, headers, got=got):
            got["status"], got["headers"] = status, dict(headers)

        app({}, start_response)
        answers.append(got)
    assert [a["status"][:3] for a in answers] == ["200"] * case.limit + ["429"]
    first, refused = answers[0]["headers"], answers[-1]["headers"]
    if case.headers == "none":
        assert "Retry-After" not in refused
        assert not any("ratelimit" in name.lower() for name in refused)
        return
    assert int(refused["Retry-After"]) >= 1
    if case.headers == "x-ratelimit":
        assert first["X-RateLimit-Limit"] == str(case.limit)
        assert refused["X-RateLimit-Remaining"] == "0"
        assert int(refused["X-RateLimit-Reset"]) > 1_000_000_000  # epoch, rounded up
    elif case.headers == "draft6":
        assert first["RateLimit-Policy"] == f"{case.limit};w={case.window}"
        assert refused["RateLimit-Remaining"] == "0"
        assert refused["RateLimit-Reset"] == "1"  # under a second left, rounded up
    else:
        assert refused["RateLimit"] == f"limit={case.limit}, remaining=0, reset=1"
    assert [h[1] for h in app.hits] == [200] * case.limit + [429]


def test_the_django_ratelimit_app_refuses_past_its_limit_in_a_window(limiters_bench):
    # django-ratelimit's decorator on a Django view: a bare 429 once a window's budget is
    # spent, on a counter of the server's own (its key is the server's port).
    pytest.importorskip("django")
    pytest.importorskip("django_ratelimit")
    from wsgiref.util import setup_testing_defaults

    from django_ratelimit.core import _get_window

    case = next(c for c in limiters_bench.CASES if c.strategy == "django")
    app = limiters_bench.DjangoApp(case)
    for port in ("20001", "20002"):  # a second try if a window turned during the first
        window = _get_window(port, case.window)
        answers = []
        for _ in range(case.limit + 1):
            environ = {"PATH_INFO": "/records", "SERVER_PORT": port}
            setup_testing_defaults(environ)
            app(environ, lambda status, headers, *info: answers.append((status[:3], headers)))
        if _get_window(port, case.window) == window:
            break
    assert [status for status, _ in answers] == ["200"] * case.limit + ["429"]
    assert not any(name.lower() == "retry-after" for name, _ in answers[-1][1])
    assert [h[1] for h in app.hits[-len(answers) :]] == [200] * case.limit + [429]
