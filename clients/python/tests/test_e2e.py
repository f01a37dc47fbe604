"""End-to-end signing and sealing through the broker's signature and
encryption gates: e2e.sign_seal (Python to Python) and cross.ts_to_python
(the TypeScript sender to this Python receiver)."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from harness import ALICE, BOB, ROOT, VECTORS_GO, load_go_vectors, scenario, within
from pigeon_client import (
    DeniedError,
    HttpClient,
    KeyDirectory,
    Keys,
    PigeonError,
    canonical_signing_input,
    connect,
    open_message,
    seal_message,
    sign_message,
    verify_message,
)
from pigeon_client.crypto import b64url

GO = load_go_vectors()
ALICE_KEYS = Keys.from_vector(GO["keys"]["alice"])
BOB_KEYS = Keys.from_vector(GO["keys"]["bob"])
CHAT = ["chat.messages"]
TS_SENDER = ROOT / "clients/typescript/examples/send-sealed.mjs"
TS_DIST = ROOT / "clients/typescript/dist"


def publish_keys(server) -> None:
    """The admin creates both accounts (409 tolerated); each publishes its keys."""
    admin = HttpClient(server.http, "admin-token")
    for who in (ALICE, BOB):
        admin.create_account(who, exist_ok=True)
    HttpClient(server.http, "alice-token").put_keys(ALICE, ALICE_KEYS.public_keys())
    HttpClient(server.http, "bob-token").put_keys(BOB, BOB_KEYS.public_keys())


async def bob_receiver(server):
    """Bob subscribed with the chat selector; returns (session, queue of
    (message, clear, payload) or exceptions)."""
    directory = KeyDirectory(HttpClient(server.http, "bob-token"))
    bob = await connect(server.ws, "bob-token", CHAT)
    out: asyncio.Queue = asyncio.Queue()

    async def handle(d):
        try:
            keys = await directory.aget(d.message["source"])
            clear, payload = open_message(d.message, keys, BOB_KEYS)
            out.put_nowait((d.message, clear, json.loads(payload)))
        except Exception as e:  # surfaced to the test, not lost
            out.put_nowait(e)
            raise

    await bob.subscribe("chat.messages", handle, selector="/kind=chat/room=lobby")
    return bob, out


async def test_e2e_sign_seal(server):
    scenario("e2e.sign_seal")
    await asyncio.to_thread(publish_keys, server)
    bob, got = await bob_receiver(server)
    alice = await connect(server.ws, "alice-token", CHAT)
    try:
        # Alice fetches bob's published keys and seals for his encryption key.
        bob_keys = await KeyDirectory(HttpClient(server.http, "alice-token")).aget(BOB)
        assert {k["kid"] for k in bob_keys} == {BOB_KEYS.signing_kid, BOB_KEYS.encryption_kid}
        base = {"type": "chat.message", "subject": "chat.messages", "intent": "chat", "classification": "internal"}
        m = seal_message(base, {"kind": "chat", "room": "lobby"}, b'{"text":"hi bob"}', bob_keys, ALICE_KEYS)
        d = await alice.publish(m)
        assert d.accepted
        item = await within(got.get(), 10)
        assert not isinstance(item, Exception), item
        msg, clear, payload = item
        assert msg["id"] == d.id and msg["source"] == ALICE
        assert clear == {"kind": "chat", "room": "lobby"}
        assert payload == {"text": "hi bob"}
        # The broker hands the signature on in the second form, v included.
        assert msg["signature"] == m["signature"] and msg["signature"]["v"] == 2

        # An unsigned message is refused SIGNATURE_REQUIRED ...
        unsigned = dict(m)
        del unsigned["signature"]
        with pytest.raises(DeniedError) as e:
            await alice.publish(unsigned)
        assert e.value.code == "SIGNATURE_REQUIRED"
        # ... a signed one in clear ENCRYPTION_REQUIRED.
        clear_msg = sign_message({**base, "data": {"kind": "chat", "room": "lobby", "text": "in clear"}},
                                 ALICE_KEYS.signing_kid, ALICE_KEYS.signing_key)
        with pytest.raises(DeniedError) as e:
            await alice.publish(clear_msg)
        assert e.value.code == "ENCRYPTION_REQUIRED"
        # A tampered signature is refused by the broker too.
        bad = seal_message(base, {"kind": "chat", "room": "lobby"}, b'{"text":"x"}', bob_keys, ALICE_KEYS)
        bad["data"] = {**bad["data"], "room": "attic"}  # a routing field changed after signing
        with pytest.raises(DeniedError) as e:
            await alice.publish(bad)
        assert e.value.code == "SIGNATURE_INVALID"
    finally:
        await alice.close()
        await bob.close()


async def test_cross_ts_to_python(server):
    scenario("cross.ts_to_python")
    node = shutil.which("node")
    assert node, "cross.ts_to_python needs node on PATH to run the TypeScript sender"
    assert TS_SENDER.exists(), (
        f"cross.ts_to_python: the TypeScript sender {TS_SENDER} is missing "
        "(it belongs to the TypeScript client; ./test runs that suite first)")
    assert TS_DIST.is_dir(), (
        f"cross.ts_to_python: {TS_DIST} is not built; run `npm ci && npm run build` in clients/typescript "
        "(./test runs the TypeScript suite, which builds it, first)")
    await asyncio.to_thread(publish_keys, server)
    bob, got = await bob_receiver(server)
    try:
        cmd = [node, str(TS_SENDER), "--url", server.ws, "--token", "alice-token", "--keys", str(VECTORS_GO),
               "--as", "alice", "--to", BOB, "--room", "lobby", "--text", "hello bob"]
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, cwd=str(ROOT))
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        except asyncio.TimeoutError:
            proc.kill()
            raise AssertionError("the TypeScript sender did not finish within 30 s")
        assert proc.returncode == 0, f"send-sealed.mjs exited {proc.returncode}: {err.decode()[-2000:]}"
        lines = [ln for ln in out.decode().splitlines() if ln.strip()]
        assert lines, f"send-sealed.mjs printed no decision; stderr: {err.decode()[-2000:]}"
        decision = json.loads(lines[-1])
        assert decision.get("status") == "accepted", decision
        item = await within(got.get(), 10)
        assert not isinstance(item, Exception), item
        msg, clear, payload = item
        assert msg["source"] == ALICE
        mid = decision.get("id") or (decision.get("message") or {}).get("id")
        if mid:
            assert msg["id"] == mid
        assert clear["room"] == "lobby" and clear["kind"] == "chat"
        assert payload == {"text": "hello bob"}
    finally:
        await bob.close()


async def test_python_sender_reaches_receiver(server):
    """The receiving side of cross.ts_to_python, with Python sending what the
    TypeScript sender sends (alice's fixed keys, bob's fetched keys)."""
    await asyncio.to_thread(publish_keys, server)
    bob, got = await bob_receiver(server)
    alice = await connect(server.ws, "alice-token", CHAT)
    try:
        bob_keys = HttpClient(server.http, "alice-token").keys(BOB)
        m = seal_message({"type": "chat.message", "subject": "chat.messages", "intent": "chat"},
                         {"kind": "chat", "room": "lobby"}, json.dumps({"text": "hello bob"}).encode(),
                         bob_keys, ALICE_KEYS)
        await alice.publish(m)
        # A message for another room is not delivered to bob's selector.
        other = seal_message({"type": "chat.message", "subject": "chat.messages", "intent": "chat"},
                             {"kind": "chat", "room": "attic"}, b'{"text":"no"}', bob_keys, ALICE_KEYS)
        await alice.publish(other)
        msg, clear, payload = await within(got.get(), 10)
        assert payload == {"text": "hello bob"}
        await asyncio.sleep(0.3)
        assert got.empty()
    finally:
        await alice.close()
        await bob.close()


def first_form(m: dict, keys: Keys) -> dict:
    """``m`` signed again in the first form (a signature without v), as
    signers did before the second form."""
    s = {**m, "signature": {"kid": keys.signing_kid, "alg": "ed25519", "sig": ""}}
    s["signature"]["sig"] = b64url(keys.signing_key.sign(canonical_signing_input(s)).signature)
    return s


async def test_e2e_second_form_fields_and_first_form(server):
    """Against the broker: a field the second form covers changed after
    signing is refused SIGNATURE_INVALID, as is a v other than 2 or a v2
    signature stripped of its v; a first-form signature is still accepted,
    delivered without v and verified by the receiver."""
    await asyncio.to_thread(publish_keys, server)
    bob, got = await bob_receiver(server)
    alice = await connect(server.ws, "alice-token", CHAT)
    try:
        bob_keys = await KeyDirectory(HttpClient(server.http, "alice-token")).aget(BOB)
        base = {"type": "chat.message", "subject": "chat.messages", "intent": "chat", "classification": "internal",
                "correlationId": "corr-1"}

        def sealed(text: str) -> dict:
            return seal_message(base, {"kind": "chat", "room": "lobby"}, json.dumps({"text": text}).encode(),
                                bob_keys, ALICE_KEYS)

        for name, edit in (
            ("correlationId changed", lambda m: {**m, "correlationId": "corr-2"}),
            ("correlationId removed", lambda m: {k: x for k, x in m.items() if k != "correlationId"}),
            ("v removed", lambda m: {**m, "signature": {k: x for k, x in m["signature"].items() if k != "v"}}),
            ("v 3", lambda m: {**m, "signature": {**m["signature"], "v": 3}}),
        ):
            bad = edit(sealed("x"))
            with pytest.raises(PigeonError) as e:
                verify_message(bad, ALICE_KEYS.signing_public)
            assert e.value.code == "SIGNATURE_INVALID", name
            with pytest.raises(DeniedError) as e:
                await alice.publish(bad)
            assert e.value.code == "SIGNATURE_INVALID", name

        old = first_form(sealed("first form"), ALICE_KEYS)
        assert "v" not in old["signature"]
        d = await alice.publish(old)
        assert d.accepted
        item = await within(got.get(), 10)
        assert not isinstance(item, Exception), item
        msg, clear, payload = item
        assert msg["id"] == d.id and payload == {"text": "first form"}
        assert "v" not in msg["signature"]

        new = sealed("second form")
        d = await alice.publish(new)
        item = await within(got.get(), 10)
        assert not isinstance(item, Exception), item
        msg, _, payload = item
        assert msg["id"] == d.id and payload == {"text": "second form"}
        assert msg["signature"]["v"] == 2 and msg["correlationId"] == "corr-1"
    finally:
        await alice.close()
        await bob.close()
