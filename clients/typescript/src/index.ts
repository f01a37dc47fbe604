export { connect, Session, Subscription } from "./session.js";
export type { ConnectOptions, ReconnectOptions, SubscribeOptions, Delivery, Handler } from "./session.js";
export { HttpClient, KeyCache, segment } from "./http.js";
export type { HttpOptions } from "./http.js";
export { PigeonError, RetryAfter, ClientCodes, fromWire, statusOf } from "./errors.js";
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
} from "./crypto.js";
export type { PublicKey, KeyPair, Sealed } from "./crypto.js";
export { canonicalize, parseStrict } from "./jcs.js";
export type { Message, Contract, ContractSubject, Decision, Start, ReplayOptions } from "./types.js";
