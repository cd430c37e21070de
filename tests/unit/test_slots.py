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


def test_a_taker_waits_for_a_slot_given_back_and_says_it_waited(slot_blocked):
    slots = Slots(1)
    assert slots.acquire() is False
    result = []
    thread = threading.Thread(target=lambda: result.append(slots.acquire()), daemon=True)
    thread.start()
    assert slot_blocked.wait(5)
    # The other thread is waiting: counted, and not given a slot while none is free.
    assert slots._waiting == 1
    assert result == []
    slots.release()
    thread.join(5)
    assert result == [True]
    assert slots._waiting == 0
