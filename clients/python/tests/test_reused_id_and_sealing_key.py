"""An ack frame answering one message id at two sequences (the id was
reused once retention trimmed the first message) is answered with
``notPendingSequences`` in step with ``notPending``, and the client tells the
settled answer from the refused one; a later message under a reused id does
not wait for the old one's handler; a sealing key whose alg is not x25519 is
refused before anything is sealed for it. Each test failed before its fix."""
from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import serve

from harness import eventually, negotiating, raw_contract, within
from pigeon_client import PigeonError, connect

CONTRACT = raw_contract("x")


def _msg(seq: int) -> dict:
    return {"id": "m", "subject": "x", "sequence": seq, "data": {}}


@pytest.mark.parametrize(
    "answer, refused",
    [
        # The answer at 7 was refused, the one at 9 settled.
        ({"notPending": ["m"], "notPendingSequences": [7]}, {7}),
        ({"notPending": ["m"], "notPendingSequences": [9]}, {9}),
        # Protocol v1: by id, both refused.
        ({"notPending": ["m"]}, {7, 9}),
        # Not in step: taken by id, as v1.
        ({"notPending": ["m"], "notPendingSequences": [7, 9]}, {7, 9}),
        ({}, set()),
    ],
)
async def test_an_ack_frame_answering_one_id_at_two_sequences_refuses_only_the_one_named(answer, refused):
    acks: list = []

    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            for seq in (7, 9):
                await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": _msg(seq)}))
        elif f["op"] == "ack":
            acks.append(f)
            await ws.send(json.dumps({"op": "ok", "re": f["id"], **answer}))
        else:
            await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            sub = await within(s.subscribe("x"), 5)
            d7 = await within(sub.__anext__(), 5)
            d9 = await within(sub.__anext__(), 5)
            got = await within(asyncio.gather(d7.ack(), d9.ack(), return_exceptions=True), 5)
            assert [(a.get("messageIds"), a.get("sequences")) for a in acks] == [(["m", "m"], [7, 9])]
            for seq, r in zip((7, 9), got):
                if seq in refused:
                    assert isinstance(r, PigeonError) and r.code == "ACK_NOT_ALLOWED", (seq, r)
                else:
                    assert r is None, (seq, r)
        finally:
            await within(s.close(timeout=1), 5)


@pytest.mark.parametrize("alg", ["ed25519", "X25519", "p256", None, 25519])
def test_seal_message_refuses_an_encryption_key_that_is_not_x25519(alg):
    from pigeon_client import crypto

    sender, recipient = crypto.Keys.generate(), crypto.Keys.generate()
    keys = [dict(k) for k in recipient.public_keys()]
    enc = next(k for k in keys if k["use"] == "enc")
    if alg is None:
        del enc["alg"]
    else:
        enc["alg"] = alg
    with pytest.raises(PigeonError) as e:
        crypto.seal_message({"type": "t", "subject": "x"}, {}, b"{}", keys, sender)
    assert e.value.code == "INVALID_ARGUMENT"


def test_seal_message_seals_for_an_x25519_encryption_key():
    from pigeon_client import crypto

    sender, recipient = crypto.Keys.generate(), crypto.Keys.generate()
    m = crypto.seal_message({"type": "t", "subject": "x"}, {}, b"{}", recipient.public_keys(), sender)
    assert m["data"]["sealed"]["recipientKid"] == recipient.encryption_kid


async def test_a_newer_message_under_a_reused_id_does_not_wait_for_the_old_handler():
    """A handler ran one message id at a time: a later message published
    under the id once retention trimmed the first (a higher sequence) was
    parked behind the old one's run. It now runs at once; a redelivery of
    the running message itself (the same sequence) still waits."""
    acks: list = []

    async def on_frame(ws, f):
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            for seq in (7, 7, 9):
                await ws.send(json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": _msg(seq)}))
            return
        if f["op"] == "ack":
            acks.append(f)
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    release = asyncio.Event()
    newer = asyncio.Event()
    runs: list[int] = []

    async def handler(d):
        seq = d.message["sequence"]
        runs.append(seq)
        if seq == 7 and runs.count(7) == 1:
            await release.wait()
        if seq == 9:
            newer.set()

    async with serve(negotiating(on_frame, CONTRACT), "127.0.0.1", 0) as srv:
        port = srv.sockets[0].getsockname()[1]
        s = await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                 auto_renew=False, ping_interval=None), 5)
        try:
            await within(s.subscribe("x", handler, max_in_flight=4), 5)
            await within(newer.wait(), 5)  # while the run at 7 waits
            assert runs == [7, 9], "the redelivery at 7 waits for the run at 7"
            release.set()
            await eventually(lambda: runs.count(7) == 2, 5, "the redelivery runs after")
        finally:
            await within(s.close(timeout=1), 5)
