// An encryption key of a key listing is refused when it is of low order,
// as Go's seal.WeakEncryptionKey refuses it by agreeing a secret with a
// probe key and finding zeros. The client holds the five canonical
// low-order keys as a table (a scalar multiplication took about a
// millisecond an entry): this test holds the table to the probe, and the
// probe to the groups' orders, so that the two agree on every key.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { x25519 } from "@noble/curves/ed25519.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { isKeyEntry } from "../dist/crypto.js";

const P = 2n ** 255n - 19n;
const L = 2n ** 252n + 27742317777372353535851937790883648493n; // the curve's prime order; the curve has 8L points
const TWIST = 2n * (P + 1n) - 8n * L; // the twist's number of points: 4 times a prime
const PROBE = sha256(new TextEncoder().encode("pigeon-seal-v1 low-order probe"));

const le = (b) => b.reduceRight((n, x) => (n << 8n) | BigInt(x), 0n);
const bytes = (n) => Uint8Array.from({ length: 32 }, (_, i) => Number((n >> BigInt(8 * i)) & 0xffn));
const b64 = (b) => Buffer.from(b).toString("base64url");
const entry = (u) => ({ kid: "enc-1", use: "enc", alg: "x25519", key: b64(u) });

// The probe's answer: weak when not canonical (u < P, top bit clear) or
// when the agreed secret is all zeros.
function probeWeak(u) {
  if (le(u) >= P) return true;
  try {
    return x25519.getSharedSecret(PROBE, u).every((x) => x === 0);
  } catch {
    return true;
  }
}

// Low-order keys: u of a point of order 1, 2 or 4 (0, 1, P-1), and of order 8.
const ORDER8 = [
  "5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157",
  "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800",
].map((h) => le(Uint8Array.from(Buffer.from(h, "hex"))));
const LOW = [0n, 1n, P - 1n, ...ORDER8];

test("the probe finds zeros only for points of small order: its clamped scalar is a multiple of 8 and of neither prime order", () => {
  const k = le(PROBE.map((x, i) => (i === 0 ? x & 248 : i === 31 ? (x & 127) | 64 : x)));
  assert.equal(k % 8n, 0n);
  assert.equal(TWIST % 4n, 0n);
  assert.notEqual(k % L, 0n, "the probe is a multiple of the curve's prime order");
  assert.notEqual(k % (TWIST / 4n), 0n, "the probe is a multiple of the twist's prime order");
});

test("the order-8 keys are the Montgomery images of Ed25519's points of order 8", () => {
  // y of the two Ed25519 points of order 8 with x even (the other two share their u).
  const ys = ["26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"];
  const pow = (b, e) => { let r = 1n; b %= P; for (; e > 0n; e >>= 1n, b = (b * b) % P) if (e & 1n) r = (r * b) % P; return r; };
  const us = ys.map((h) => {
    const y = le(Uint8Array.from(Buffer.from(h, "hex"))) & ((1n << 255n) - 1n);
    return (((1n + y) % P) * pow((1n - y + P) % P, P - 2n)) % P;
  });
  assert.deepEqual(us.sort(), [...ORDER8].sort());
});

test("isKeyEntry refuses exactly the keys the probe finds weak", () => {
  const cases = [];
  for (const u of LOW) for (const d of [-1n, 0n, 1n]) if (u + d >= 0n) cases.push(u + d);
  for (const u of [P, P + 1n, P + 18n, 2n ** 255n - 1n, 2n ** 255n + 1n, 2n ** 256n - 1n]) cases.push(u);
  for (let i = 0; i < 64; i++) cases.push(le(randomBytes(32)) & ((1n << 255n) - 1n));
  for (const n of cases) {
    const u = bytes(n);
    assert.equal(isKeyEntry(entry(u)), !probeWeak(u), `u = ${n}`);
  }
  for (const u of LOW) assert.equal(isKeyEntry(entry(bytes(u))), false, `low order u = ${u}`);
});
