"""A subscription's resume set is bounded as in the Go client: it holds at
most MAX_OUTSTANDING sequences, and when full forgets the lowest quarter. No
server: the test hands deliveries to a subscription directly."""

from __future__ import annotations

from pigeon_client.subscription import MAX_OUTSTANDING, Subscription


async def test_a_subscription_remembers_at_most_65536_outstanding_sequences() -> None:
    assert MAX_OUTSTANDING == 65_536, "the Go client's bound"
    sub = Subscription(None, "events.telemetry", None, {})  # type: ignore[arg-type]

    def hand(seq: int) -> None:
        sub._push({"id": f"msg_{seq}", "sequence": seq}, 1, 1)
        # A handler takes it (and fails, keeping its sequence): the queue
        # stays within the window.
        sub._took(sub._queue.get_nowait())

    # Handed over highest first: the quarter forgotten is the lowest, not
    # the first added.
    for seq in range(MAX_OUTSTANDING, 0, -1):
        hand(seq)
    assert len(sub._outstanding) == MAX_OUTSTANDING
    assert sub._subscribe_frame(resume=True)["start"] == {"sequence": 1}, "nothing is forgotten until the set is full"
    k = 10
    for seq in range(MAX_OUTSTANDING + 1, MAX_OUTSTANDING + k + 1):
        hand(seq)
        assert len(sub._outstanding) <= MAX_OUTSTANDING, f"{len(sub._outstanding)} sequences held after {seq}"
    quarter = MAX_OUTSTANDING // 4
    assert sub._outstanding == set(range(quarter + 1, MAX_OUTSTANDING + k + 1)), "the lowest quarter, and only it, was forgotten"
    frame, taken = sub._resume_frame()
    assert frame["start"] == {"sequence": quarter + 1}, "a resume starts at the lowest sequence remaining"
    assert not sub._outstanding
    sub._resume_failed(taken)
    assert len(sub._outstanding) == MAX_OUTSTANDING - quarter + k
