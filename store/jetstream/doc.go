// Package jetstream is a store.Store kept in a NATS JetStream cluster, so
// that several Pigeon nodes share one set of messages, contracts, accounts,
// roles, grants, keys, consumer progress and quarantine.
//
// It is its own Go module: embedding pigeon never pulls in NATS.
//
// # Layout in JetStream
//
// Every name starts with Options.Prefix (default "PIGEON"), so several
// Pigeon deployments can share one NATS account. NATS subjects carry the
// prefix in lower case, and a file system that ignores case takes stream
// names that differ only in case for one: Open refuses a prefix, or a
// node, that differs only in case from one the account holds.
//
//   - Each Pigeon subject is one stream, <P>_M_<hex subject>, on the NATS
//     subjects <p>.m.<hex subject>.<message id>; a subject whose hex would
//     make the stream's name longer than JetStream takes (255 bytes) is
//     named "h" and the hex of its SHA-256 instead, the subject kept in the
//     stream's metadata (pigeon-subject). An id or idempotency key a NATS
//     header would not keep verbatim (white space at an end, a control or
//     non-ASCII byte) is stored base64 in a header named with "-B64".
//     The stream sequence is the Pigeon per-subject sequence: JetStream
//     assigns it, so appends from any node are ordered without a lock of
//     ours, and a purge from the front (retention) never reuses one.
//   - Message ids and idempotency keys are KV buckets (<P>_ids, <P>_idem).
//     An idempotency key is claimed with the bucket's atomic create (or a
//     compare-and-set over an expired claim) before the message is
//     published, so the same key sent through every node at once is
//     accepted once. A message id is indexed the same way, so two nodes
//     never store two messages under one id (the second append fails with
//     store.ErrExists). A message over the NATS server's max_payload is
//     refused (ErrTooLarge) before either is claimed, and a publish
//     JetStream refuses (a stream limit) gives both back. A trim frees
//     the ids of every message it removes (1,024 messages a step, their
//     entries purged up to the bucket revision read while the messages
//     were held, so a claim of an id written since stays), so the bucket
//     holds the retained messages' ids only, and an id re-used after its
//     message was trimmed is taken at once. Entries a trim could not free
//     (its ctx ended, no quorum) are freed by the process's next trim;
//     those no trim will free (a process ended owing them, older
//     versions' trims) by the ids sweep a trim runs a step of (sweep.go).
//   - A contract record, once revoked, stays revoked: a write of it
//     unrevoked (a renewal on a node that has not applied the revocation
//     yet) is a compare-and-set that leaves a revoked record alone.
//   - Contracts, consumer progress, quarantine and the broker's own KV
//     (accounts, roles, grants, keys) are KV buckets; progress changes
//     (and Cluster leases) are compare-and-set loops, which after a
//     conflict read from the bucket's leader and pause longer each time,
//     and fail with *ContendedError when their ctx ends. Cluster.Extend
//     (pigeon.LeaseExtender) moves this node's leases of messages whose
//     handlers still run to a later deadline, only while the node holds
//     them (a lease found taken is reported, confirmed at the leader), so
//     a slow handler keeps its lease and a dead node's leases run out at
//     the ack wait. A lease released early (a nack) is marked so, and an
//     Extend started before it reports it lost rather than hold the
//     message past its retry time. Expired
//     contracts and old quarantine records are purged only up to the
//     revision judged, so one renewed since stays. PruneGroups
//     (store.GroupPruner) goes by the
//     JetStream timestamp of each group's entry and purges a key only up
//     to the revision it read, leaving no delete marker.
//   - The audit log is one stream per node, <P>_A_<node>: every node keeps
//     its own hash chain, and a publish that expects the previous sequence
//     keeps each chain gap-free even if two processes claimed one node id.
//     One stream message holds one batch of records.
//   - Audit retention (TrimAuditBefore) keeps each node's checkpoint, the
//     seq and hash of the last record it removed, in the <P>_audit bucket
//     under the node's name. A trim writes it (compare-and-set) before it
//     purges, by sequence, the messages whose records are all at or before
//     it, and every reader (ReadAudit, AuditHead, VerifyAudit) skips those
//     records: a trim cut short between the two steps leaves a chain that
//     verifies, and the next trim finishes the purge. A batch is purged
//     whole: when t falls inside one, its records before t leave the chain
//     (counted, and named by the checkpoint), but their bytes stay in the
//     stream until a later trim passes the batch's last record.
//
// # Guarantees
//
// A method that returned without error has been acknowledged by the
// stream's leader after a quorum of its replicas stored it. With file
// storage JetStream syncs to disk on its own interval (sync_interval);
// docs/cluster.md says what that means for durability. A publish that fails for want of a
// quorum returns an error matching store.ErrNoQuorum, which the broker
// reports as the retryable STORE_NO_QUORUM; nothing is retried silently.
//
// Open refuses a stream or bucket another tool changed so that it would
// drop records behind the broker's back (a limit, a max age, a limit per
// subject on a message or audit stream). While the store runs, the calls
// of the engine's retention sweep look again (at most once a minute for
// the buckets and the audit stream) and fail naming the change; the
// publish path does not, so between sweeps, or with no retention
// configured, a change goes unseen until the next sweep or start.
//
// Cluster.Barrier makes a revocation strict across live nodes: the
// revoking call returns once every node that refreshed its <P>_applied
// record within Options.Liveness has applied it, or fails with the
// retryable CLUSTER_UNCONFIRMED after Options.BarrierTimeout, the change
// made all the same (docs/cluster.md). It waits for every change of
// access state its node wrote, its watch read, or it found in the store
// (a contract loaded revoked), so a retry of the call on any node waits
// for the node that lagged. Cluster.CurrentUntil (pigeon.ClusterCurrent)
// holds the other side of the bound: a node cut off from the others (NATS
// unreachable, a link or a watch that stalls) stops authorizing two thirds
// of Options.Liveness after its last confirmation that succeeded, before
// any other node stops waiting for it, and serves again once its watch
// has caught up with every change made meanwhile. A watch that stalls
// while the confirmations succeed is found out too: every beat reads the
// last entries of the directory and the contracts again, and a node
// whose watch has not applied what was read stops authorizing less than
// Liveness after the first change it missed. The revoking node's own
// watch of <P>_applied is held to evidence as well: a barrier confirms
// nothing until a write of the node's own record made since it began has
// come back through that watch, and passes a node over (as LiveNodes
// drops one) only once the watch has delivered a write of it stored more
// than Liveness after that node's last; a watch whose writes do not come
// back within Liveness starts again.
//
// A reply for a requester on another node travels in the <P>_replies
// bucket; one too large for a NATS message (max_payload) travels in
// parts, which the other nodes read back from the bucket's leader. A
// write of it the bucket does not answer (no quorum) is tried again,
// deduplicated, within Options.Timeout; Cluster.NotifyReply returns the
// failure of one that was not written, and Cluster.LostReplies counts
// them.
//
// ChainAudit retries a batch another writer of the node's chain got
// ahead of with the same pauses as a contended compare-and-set write,
// and fails with *ContendedError (ErrContended) after a bounded number
// of tries.
//
// # Concurrency
//
// Every method is safe for concurrent use, from any number of goroutines
// and processes sharing the prefix. A trim of a node's audit chain may run
// beside appends to it: its purge ends at the last message it read.
package jetstream
