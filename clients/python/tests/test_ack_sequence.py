"""Acks and nacks name the sequence of the delivery they answer
(docs/protocol.md "Sequences", docs/http.md): a message id names one message
at a time only, and once retention trims a message a newer one may be
published under its id; a late answer to the old delivery must never settle
it. Each test failed before the client sent the sequence."""
from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from websockets.asyncio.server import serve

from conftest import Server
from harness import eventually, http_answering, negotiating, raw_contract, within
from pigeon_client import HttpClient, PigeonError, connect
from pigeon_client.model import Contract

CONTRACT = raw_contract("x")


def msg(i, **over):
    m = {"id": f"msg_{i}", "subject": "x", "sequence": i, "data": {}}
    m.update(over)
    return m


def deliver(m) -> str:
    return json.dumps({"op": "deliver", "sub": "sub_1", "attempt": 1, "message": m})


async def _session(port):
    return await within(connect(f"ws://127.0.0.1:{port}/v1/ws", "t", ["x"], reconnect=False,
                                auto_renew=False, ping_interval=None), 5)


def _port(srv):
    return srv.sockets[0].getsockname()[1]


def holding(frames: list, hold: list):
    """An endpoint that subscribes "sub_1", records every other frame, and
    leaves the first ack unanswered until the test calls ``hold[0]()``:
    the acks that come meanwhile gather."""
    sock: list = []

    async def on_frame(ws, f):
        sock[:] = [ws]
        if f["op"] == "subscribe":
            await ws.send(json.dumps({"op": "subscribed", "re": f["id"], "sub": "sub_1"}))
            return
        frames.append(f)
        if f["op"] == "ack" and not hold:
            loop = asyncio.get_running_loop()
            hold.append(lambda: loop.create_task(ws.send(json.dumps({"op": "ok", "re": f["id"]}))))
            return
        await ws.send(json.dumps({"op": "ok", "re": f["id"]}))

    return negotiating(on_frame, CONTRACT), sock


async def test_a_subscriptions_acks_and_nacks_carry_the_sequence_they_answer():
    frames: list = []
    hold: list = []
    endpoint, sock = holding(frames, hold)
    async with serve(endpoint, "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))
        try:
            def handler(d):
                if d.id == "msg_4":
                    raise RuntimeError("fails")

            await within(s.subscribe("x", handler, max_in_flight=4), 5)
            await sock[0].send(deliver(msg(1)))
            await eventually(lambda: hold, 5, "the first ack")
            for i in (2, 3, 4):
                await sock[0].send(deliver(msg(i)))
            await eventually(lambda: any(f["op"] == "nack" for f in frames), 5, "the nack")
            await asyncio.sleep(0.05)  # the acks of 2 and 3 gather
            hold[0]()
            await eventually(lambda: len([f for f in frames if f["op"] == "ack"]) == 2, 5, "the gathered acks")
        finally:
            await s.close(timeout=1)
    one, batch = [f for f in frames if f["op"] == "ack"]
    assert (one["messageId"], one["sequence"]) == ("msg_1", 1)
    assert batch["messageIds"] == ["msg_2", "msg_3"]
    assert batch["sequences"] == [2, 3], "in step with messageIds"
    nack = next(f for f in frames if f["op"] == "nack")
    assert (nack["messageId"], nack["sequence"]) == ("msg_4", 4)


async def test_gathered_acks_are_split_into_frames_within_the_servers_max_frame():
    # The raw endpoint names no maxFrame: the client takes 1 MiB, which
    # 5000 acks of 256-byte ids are more than.
    frames: list = []
    hold: list = []
    endpoint, sock = holding(frames, hold)
    n = 5000

    def long(i):
        return "m" * 250 + f"{i:06d}"

    async with serve(endpoint, "127.0.0.1", 0, max_size=None) as srv:
        s = await _session(_port(srv))
        try:
            done = 0

            def handler(d):
                nonlocal done
                done += 1

            # Each handler call waits for its ack: as many at once as acks to gather.
            await within(s.subscribe("x", handler, max_in_flight=n + 1, window=10000), 5)
            await sock[0].send(deliver(msg(0, id=long(0), sequence=1)))
            await eventually(lambda: hold, 5, "the first ack")
            for i in range(1, n + 1):
                await sock[0].send(deliver(msg(i, id=long(i), sequence=i + 1)))
            await eventually(lambda: done == n + 1, 20, "the handlers")
            hold[0]()

            def acked():
                return sum(len(f.get("messageIds") or [f.get("messageId")]) for f in frames if f["op"] == "ack")

            await eventually(lambda: acked() == n + 1, 20, "every ack")
        finally:
            await s.close(timeout=1)
    acks = [f for f in frames if f["op"] == "ack"]
    assert len(acks) > 2, f"{len(acks)} ack frames"
    for f in acks:
        size = len(json.dumps(f, separators=(",", ":")).encode())
        assert size <= 1 << 20, f"an ack frame of {size} bytes"
    seqs = [s for f in acks for s in (f.get("sequences") or [f.get("sequence")])]
    assert seqs == list(range(1, n + 2))


async def test_pull_acks_and_nacks_over_websocket_name_the_sequence():
    frames: list = []
    endpoint, _ = holding(frames, [None])  # nothing held
    async with serve(endpoint, "127.0.0.1", 0) as srv:
        s = await _session(_port(srv))
        try:
            await within(s.ack("x", msg(7)), 5)
            await within(s.ack("x", "msg_8", sequence=8), 5)
            await within(s.ack("x", "msg_9"), 5)
            await within(s.nack("x", msg(10), 0), 5)
            await within(s.nack("x", "msg_11", sequence=11), 5)
            with pytest.raises(TypeError):
                await s.ack("x", "msg_12", sequence=1.5)
            with pytest.raises(ValueError):
                await s.ack("x", "msg_12", sequence=-1)
            with pytest.raises(TypeError):
                await s.ack("x", {"subject": "x"})
        finally:
            await s.close(timeout=1)
    assert [{k: v for k, v in f.items() if k != "id"} for f in frames] == [
        {"op": "ack", "subject": "x", "messageId": "msg_7", "sequence": 7},
        {"op": "ack", "subject": "x", "messageId": "msg_8", "sequence": 8},
        {"op": "ack", "subject": "x", "messageId": "msg_9"},
        {"op": "nack", "subject": "x", "messageId": "msg_10", "sequence": 10, "delayMs": 0},
        {"op": "nack", "subject": "x", "messageId": "msg_11", "sequence": 11},
    ]


def test_http_acks_and_nacks_name_the_sequence_in_their_body():
    with http_answering() as srv:
        c = HttpClient(srv.url, "t", timeout=5)
        c.contract = Contract.from_wire(CONTRACT)
        c.ack("x", msg(3))
        c.ack("x", "msg_4", sequence=4)
        c.nack("x", msg(5), delay=0.01)
        c.nack("x", "msg_6")
        assert srv.paths == ["/v1/subjects/x/ack"] * 2 + ["/v1/subjects/x/nack"] * 2
        assert [json.loads(b) for b in srv.bodies] == [
            {"messageId": "msg_3", "sequence": 3},
            {"messageId": "msg_4", "sequence": 4},
            {"messageId": "msg_5", "sequence": 5, "delayMs": 10},
            {"messageId": "msg_6"},
        ]


WORKER = "spiffe://clients/ns/test/sa/worker"
JOBS = "jobs.seq"


@pytest.fixture(scope="module")
def jobs_server(pigeon_bin: str):
    """A server whose catalog is jobs.seq, a work-queue subject keeping a
    single message (publishing a few dozen more trims the first and frees
    its id), and the worker's token."""
    d = Path(tempfile.mkdtemp(prefix="pigeon-py-seq-"))
    (d / "subjects").mkdir()
    (d / "schemas").mkdir()
    allow = [{"effect": "allow", "principals": [WORKER]}]
    (d / "subjects" / f"{JOBS}.json").write_text(json.dumps({
        "name": JOBS, "version": "v1", "mode": "workQueue", "intents": ["job"],
        "retention": {"maxMessages": 1},
        "policy": {"publish": allow, "receive": allow, "ack": allow},
    }))
    (d / "tokens.yaml").write_text(f'tokens:\n  - {{ token: worker-token, principal: "{WORKER}" }}\n')
    s = Server(pigeon_bin, catalog=str(d)).start()
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("how", ["ws ack", "ws nack", "http ack", "http nack"])
async def test_a_late_answer_to_a_message_whose_id_was_reused_is_refused(jobs_server, how):
    s = await within(connect(jobs_server.ws, "worker-token", [JOBS], reconnect=False, ping_interval=None), 5)
    h = HttpClient(jobs_server.http, "worker-token", timeout=10)
    h.connect([JOBS])
    jid = "job-" + how.replace(" ", "-")

    def job(mid, n):
        return {"id": mid, "type": "job", "subject": JOBS, "intent": "job", "data": {"n": n}}

    async def receive(max):
        if how.startswith("ws"):
            return await s.receive(JOBS, max)
        return await asyncio.to_thread(h.receive, JOBS, max=max, ack="explicit")

    async def late(m):
        if how == "ws ack":
            await s.ack(JOBS, m)
        elif how == "ws nack":
            await s.nack(JOBS, m, 0)
        elif how == "http ack":
            await asyncio.to_thread(h.ack, JOBS, m)
        else:
            await asyncio.to_thread(h.nack, JOBS, m, delay=0)

    try:
        first = (await s.publish(job(jid, 0))).message
        [old] = await receive(1)
        assert (old["id"], old["sequence"]) == (jid, first["sequence"])
        # Past the bound by its slack: the subject is trimmed to its newest
        # message, and the id is free again.
        for i in range(1, 41):
            await s.publish(job(f"{jid}-other-{i}", i))
        again: list = []

        async def reuse():
            d = await s.publish(job(jid, 99))
            if d.status == "accepted":
                again.append(d.message)

        for _ in range(500):
            await reuse()
            if again:
                break
            await asyncio.sleep(0.02)
        assert again, "the id was never free again"
        assert again[0]["sequence"] > old["sequence"]
        got = await receive(100)
        assert [m["sequence"] for m in got if m["id"] == jid] == [again[0]["sequence"]]
        # The late answer to the old delivery settles nothing.
        with pytest.raises(PigeonError) as ei:
            await late(old)
        assert ei.value.code == "ACK_NOT_ALLOWED", ei.value
        assert await receive(100) == [], "the newer message is still leased"
        for m in got:
            await s.ack(JOBS, m)
    finally:
        await s.close(timeout=1)
