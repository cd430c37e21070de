"""Headers of a quota's refusal that corroborate its Retry-After (importable by the tests)."""

from __future__ import annotations

from typing import Dict


def stated_reset(seconds: float) -> Dict[str, str]:
    """The draft-6 fields of a quota used up that resets in ``seconds``: a stated reset that
    agrees with a long ``Retry-After`` corroborates it on first sight."""
    return {"RateLimit-Remaining": "0", "RateLimit-Reset": str(int(seconds))}
