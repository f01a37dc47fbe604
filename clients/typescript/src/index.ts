/**
 * Pigeon client for Node 20+ and browsers.
 *
 * - {@link connect} opens a WebSocket {@link Session} under a negotiated
 *   contract: pipelined `publish`, `subscribe` (handler or `stream`),
 *   `request`, `receive`/`ack`/`nack`, `replay`; it reconnects by itself.
 * - {@link HttpClient} speaks the HTTP API with the same error type.
 * - `signMessage`/`verifyMessage`, `seal`/`open`, `sealData`/`openData`
 *   sign and seal end to end, byte-compatible with the Go packages.
 *
 * Every failure is a {@link PigeonError}: `code`, `message`, `details`,
 * `status` and `kind` (denial, quarantine, contract, transport, closed,
 * timeout, auth, other).
 *
 * Concurrency: everything runs on the caller's event loop; any number of
 * calls may be in flight on one session (answers are matched by frame id),
 * publishes share frames in call order, handlers of one subscription run at
 * most `maxInFlight` at once, and a lost connection fails the calls waiting
 * on it at once, with a transport error.
 *
 * @packageDocumentation
 */
export { connect, Session, Subscription } from "./session.js";
export { MAX_QUEUED, MAX_QUEUED_BYTES } from "./subscription.js";
export { DEFAULT_MAX_FRAME_BYTES } from "./socket.js";
export { DEFAULT_MAX_BUFFERED_BYTES } from "./conn.js";
export type { ConnectOptions, ReconnectOptions, SubscribeOptions, Delivery, Handler } from "./session.js";
export { HttpClient, KeyCache, MAX_ACCOUNT_KEYS, MAX_PAGE_RECORDS, MAX_RESPONSE_BYTES, RECEIPTS_MAX_WAIT_MS, RECEIPTS_RETRIES, SEAL_MAX_AGE_MS, segment, VERIFY_MAX_AGE_MS } from "./http.js";
export type { HttpOptions } from "./http.js";
export { PigeonError, RetryAfter, ClientCodes, fromWire, statusOf, MAX_ATTEMPT } from "./errors.js";
export type { ErrorKind, ErrorDetails } from "./errors.js";
export {
  b64encode,
  b64decode,
  canonicalSigningInput,
  signMessage,
  verifyMessage,
  verifyMessageWithKeys,
  selectKey,
  seal,
  open,
  sealData,
  openData,
  sealFor,
  verifyAndOpen,
  generateKeys,
  keyPairFrom,
  keyId,
  publicKeys,
  newMessageId,
  utf8Encode,
  utf8Decode,
  SealTamperedError,
  SEAL_ALG,
  SIGNATURE_V2,
} from "./crypto.js";
export type { PublicKey, KeyPair, Sealed, SignedFields } from "./crypto.js";
export { canonicalize, parseStrict } from "./jcs.js";
export type { Message, Signature, Contract, ContractSubject, Decision, Start, ReplayOptions, SettleOptions, Pulled, Receipt, ReceiptsPage } from "./types.js";
