"""``python -m requests_retryafter``: the same command line as ``requests-retryafter``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
