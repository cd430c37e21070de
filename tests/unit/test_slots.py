"""A host's request slots (``_hosts.Slots``): at most ``size`` in flight, and a taker that had
to wait says so (the adapter then looks at the host's wait again before it sends)."""

from __future__ import annotations

import threading

from requests_retryafter._hosts import Slots


def test_free_slots_are_taken_without_waiting():
    slots = Slots(2)
    assert slots.acquire() is False
    assert slots.acquire() is False
    slots.release()
    assert slots.acquire() is False


def test_a_taker_waits_for_a_slot_given_back_and_says_it_waited():
    slots = Slots(1)
    assert slots.acquire() is False
    result = []
    started = threading.Event()

    def take() -> None:
        started.set()
        result.append(slots.acquire())

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    assert started.wait(5)
    # The other thread is waiting: counted, and not given a slot while none is free.
    for _ in range(5000):
        if slots._waiting:
            break
        threading.Event().wait(0.001)
    assert slots._waiting == 1
    assert result == []
    slots.release()
    thread.join(5)
    assert result == [True]
    assert slots._waiting == 0
