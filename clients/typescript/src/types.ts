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
  signature?: { kid: string; alg: string; sig: string };
  /** set once accepted */
  sequence?: number;
  contractId?: string;
  subjectId?: string;
  schemaId?: string;
  acceptedAt?: string;
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
