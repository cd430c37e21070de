"""What the real-time benchmark scripts (``bench_nginx.py``, ``bench_limiters.py``) share:
the urllib3 baseline client's ``Retry``.

Benchmark code, not part of the installed package. The scripts import it as ``_realtime``
(``python benchmarks/bench_nginx.py`` puts this directory first on ``sys.path``; the tests load
it as tests/integration/conftest.py does ``scenarios``).
"""

from __future__ import annotations

import time
from typing import Any

from urllib3.util.retry import Retry

__all__ = ["BASELINE_RETRY", "bounded_retry"]

#: The urllib3 baseline's settings: ``Retry(total=5, backoff_factor=0.5,
#: status_forcelist=[429, 503])``, what a user of plain requests would configure.
BASELINE_RETRY = {"total": 5, "backoff_factor": 0.5, "status_forcelist": [429, 503]}


def bounded_retry(deadline: float) -> Retry:
    """urllib3's Retry with :data:`BASELINE_RETRY`'s settings whose sleeps (backoff and
    Retry-After) end at ``deadline`` (``time.monotonic()``) at the latest, so a
    ``Retry-After: 3600`` stalls the client until the end of the run and no further. Everything
    else, Retry-After parsing included, is urllib3's own."""

    class BoundedRetry(Retry):
        def sleep_for_retry(self, response: Any) -> bool:
            retry_after = self.get_retry_after(response)
            if retry_after:
                time.sleep(max(0.0, min(retry_after, deadline - time.monotonic())))
                return True
            return False

        def _sleep_backoff(self) -> None:
            backoff = self.get_backoff_time()
            if backoff > 0:
                time.sleep(max(0.0, min(backoff, deadline - time.monotonic())))

    return BoundedRetry(**BASELINE_RETRY)
