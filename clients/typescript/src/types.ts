/**
 * A message signature (docs/security.md). `v` names the signing form: 2,
 * the second form, which signMessage makes and which also covers type,
 * intent, idempotencyKey, replyTo, correlationId and reason; absent, the
 * first form (subject, id, time and data only), which still verifies. Any
 * other `v` fails verification (SIGNATURE_INVALID).
 */
export interface Signature {
  kid: string;
  alg: string;
  sig: string;
  v?: number;
}

/** The message envelope (docs/http.md, docs/protocol.md). */
export interface Message {
  specversion?: string;
  id?: string;
  type?: string;
  source?: string;
  subject: string;
  time?: string;
  intent?: string;
  idempotencyKey?: string;
  classification?: string;
  region?: string;
  data?: unknown;
  replyTo?: string;
  correlationId?: string;
  reason?: string;
  signature?: Signature;
  /** set once accepted */
  sequence?: number;
  contractId?: string;
  subjectId?: string;
  schemaId?: string;
  acceptedAt?: string;
  /**
   * How many WebAssembly programs deep the message is (docs/protocol.md,
   * "hops"): absent (0) for a message from outside the programs, d+1 for
   * one a program published while it handled a message of hops d. The
   * broker sets it whatever a publisher writes (a value set here before a
   * publish is replaced), and no signature covers it. A delivery whose
   * hops is not an integer of 0 to 2^32-1 is refused (BAD_FRAME), as one
   * whose sequence the client cannot hold is.
   */
  hops?: number;
  [k: string]: unknown;
}

/** One subject of a contract. */
export interface ContractSubject {
  name: string;
  subjectId?: string;
  schemaId?: string;
  policyId?: string;
  operations: string[];
  digest?: string;
}

/** A negotiated contract. */
export interface Contract {
  id: string;
  principal: string;
  subjects: ContractSubject[];
  policyIds?: string[];
  issuedAt: string;
  expiresAt: string;
  region: string;
  [k: string]: unknown;
}

/** The decision on a publish. */
export interface Decision {
  status: "accepted" | "duplicate";
  message: Message;
}

/** Where a pub/sub subscription starts. */
export type Start = "new" | "first" | { sequence: number };

/** Replay bounds. */
export interface ReplayOptions {
  reason?: string;
  fromSequence?: number;
  toSequence?: number;
  max?: number;
}

/** Which delivery an ack or a nack answers, besides the message's id. */
export interface SettleOptions {
  /**
   * The `sequence` of the message received (taken from the message when
   * the message itself is passed). With it, an answer never settles a
   * newer message published under the id once retention trimmed the one
   * received: the server refuses it (ACK_NOT_ALLOWED). 0 names none.
   */
  sequence?: number;
  /**
   * The lease attempt the receive answered the message with (taken from
   * the message when the message a receive handed out is passed; see
   * `receiveAttempts` and `attemptOf`). A pull lease is the principal's:
   * once the lease received ran out and the message was leased again, to
   * another worker of the same principal too, an answer naming the older
   * attempt settles nothing (ACK_NOT_ALLOWED) and the newer lease holds.
   * Without one the answer settles whichever lease the principal holds. 0
   * names none.
   */
  attempt?: number;
}

/** What {@link Session.receiveAttempts} and `HttpClient.receiveAttempts` resolve to. */
export interface Pulled {
  /** the messages received, as receive() returns them */
  messages: Message[];
  /**
   * in step with `messages`: the attempt of each one's lease (1 for its
   * first delivery), which its ack or nack sends back; 0 for one not
   * leased (a pubsub subject, an automatic HTTP receive, a server that
   * does not tell it)
   */
  attempts: number[];
}

/**
 * One receipt of a message: a delivery, acknowledgement, nack, exhaustion,
 * replay or reply of it that the audit log records (`HttpClient.receipts`;
 * docs/http.md, "GET /v1/audit/receipts/{id}").
 */
export interface Receipt {
  /** the record's event (`delivery.dispatched`, `replay.executed`, …) */
  event: string;
  /** when the record was written (RFC 3339) */
  time: string;
  /** who was handed the message, acked it, nacked it, … */
  principal: string;
  contractId: string;
  /** the subscription; absent for a pull receive; the reason given for a replay; the request's id for a reply */
  ref?: string;
  /** the record's place in the audit chain: an integer of 0 to 2^53-1 (the client refuses any other) */
  auditSeq: number;
  /** the subject of the message received */
  subject?: string;
  /**
   * the message's sequence (an id the publisher chose names another
   * message once its own is trimmed); absent when the record names the id
   * alone. An integer of 0 to 2^53-1 (the client refuses any other).
   */
  seq?: number;
}

/** What `HttpClient.receipts` resolves to: one page of a message's receipts. */
export interface ReceiptsPage {
  /** in order of the record (`auditSeq`), then of the message's sequence (`seq`) */
  receipts: Receipt[];
  /** present when more receipts are recorded than the page holds: ask again with `after` set to it */
  next?: string;
}
