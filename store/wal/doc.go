// Package wal is the durable store.Store: append-only logs on local disk,
// kept with github.com/tidwall/wal, with a checksum on every record, group
// commit, crash recovery, retention and offline audit tools.
//
//	s, err := wal.Open("/var/lib/pigeon", nil) // SyncBatch by default
//	...
//	defer s.Close(ctx)
//
// docs/storage.md describes the on-disk layout and record format.
//
// # Durability
//
// Under SyncAlways and SyncBatch, a returned Append means durable: the
// record is on disk (fsync) before Append returns, and so is every other
// write (MarkDone, MarkAttempt, LowerAttempt, PutQuarantine, AppendAudit, PutContract,
// Put, Delete, the trims). SyncBatch (the default) is group commit:
// concurrent writers to one log share one fsync, and each returns only
// after its own record is on disk; under many concurrent writers a leader
// may wait up to Options.BatchDelay (by default half a recent fsync) for
// more of them before it writes, a lone writer never. SyncAlways writes
// and fsyncs each
// request on its own. SyncNone never fsyncs: a returned write survives the
// process crashing, but the last writes are lost when the machine crashes
// or loses power.
//
// AppendAccepted (store.AcceptAppender) keeps a message and the audit
// record of its acceptance in one record of the subject's log: one fsync
// makes both durable. The record is chained into the audit log after the
// message commits (a background flusher batches them; ReadAudit and
// AuditHead flush first, so a reader sees every acceptance that has
// returned), and Open chains those a crash kept from the audit log. Since
// the store then writes into the chain itself, a caller appends its own
// records with ChainAudit (store.AuditChainer), not AppendAudit.
// ChainAudit chains the waiting acceptance records ahead of the caller's,
// and a message is visible to readers only once its record waits there,
// so in the chain a message's acceptance precedes every record appended
// after the message could be read: the records of its delivery.
//
// A write is visible to readers (Read, Lookup, Bounds, LoadGroup, ...)
// only once it is committed, so nothing a reader saw can vanish in a
// crash under SyncAlways and SyncBatch.
//
// # Recovery
//
// Open checks every record of every log against its CRC-32C. Damage
// anywhere before the tail makes Open fail with a *store.CorruptError
// naming the file and the offset of the damaged record (errors.Is(err,
// store.ErrCorrupt)). What happens to a bad last record depends on how
// the store was last shut down. A Close that got every log to disk leaves
// a marker file, CLEAN, which Open removes before it returns: after a
// clean shutdown nothing was being written, so a bad tail is damage like
// any other and Open fails the same way, changing nothing. Without the
// marker (a crash, or a directory from before the marker existed) a torn
// last record is what a crash in the middle of a write leaves: Open drops
// it, logs the log, file, offset and bytes dropped to Options.Logger, and
// Recovered (store.RecoveryReporter) lists it for the broker's audit.
// A last record whose length prefix, with one bit flipped back, frames a
// record that passes its checksum is not torn but damaged (a crash cuts a
// record's end, never its prefix), and may have acknowledged records
// after it: Open refuses it like damage before the tail. Nothing else is
// ever truncated. The audit chain is verified from its
// checkpoint; a chain that does not verify fails Open with an error
// matching store.ErrTampered. A second Open of a directory that another
// process (or another Store) holds fails with a *LockedError naming the
// holder's pid (errors.Is(err, store.ErrLocked)); the lock is on the file
// LOCK (flock(2) on Linux, macOS and the BSDs, LockFileEx on Windows;
// elsewhere Open refuses rather than run unlocked), released when its
// holder closes the store or dies.
//
// Files the store creates are 0600 and directories 0700 (messages may
// hold personal data), and every directory it creates, the data
// directory and its missing parents included, is fsynced into its parent
// before anything is written below it. Windows has neither file modes
// nor a directory fsync: there NTFS's metadata journal keeps each create,
// rename and removal whole or undone, but may lose the last few to a
// power loss.
//
// Open rebuilds its indexes by reading every record, but keeps no message
// body in memory: per subject its bounds, per message a hashed id (about
// 20-30 bytes a message), and the idempotency keys that are still live.
// Bodies are read from disk on demand.
//
// # Idempotency
//
// Keys are global to the store. An entry deduplicates a message whose
// Time is before the entry's IdemExpires, also after a restart: Open
// rebuilds the live entries from the message records. The store's clock
// for forgetting expired entries is the latest message Time it has seen.
// Retention that removes a message whose key is live keeps a copy of it
// (up to 64 MiB of bodies), on disk before the message goes, so that a
// retry within the key's TTL is still answered with the original, also
// after a restart; beyond that budget, and for expired keys, removing a
// message ends its key's deduplication.
//
// # Failure
//
// A write that fails (disk full, I/O error) or whose fsync fails is taken
// back: the log is cut back to its last committed record, the caller (and
// every caller whose record was in the same batch) gets the error, and
// reads go on. ENOSPC (on Windows ERROR_DISK_FULL) is reported as an
// error matching store.ErrFull (and the system's error). Should the log
// not be repairable, that log refuses writes until the store is
// reopened, and Close records no clean shutdown.
//
// # Retention
//
// TrimBefore (store.Trimmer), TrimThrough (store.SeqTrimmer),
// TrimAuditBefore (store.AuditTrimmer) and TrimQuarantineBefore
// (store.QuarantineTrimmer) remove records from the front of their logs. Audit retention keeps a
// checkpoint (sequence and hash of the last removed record), written
// durably before the records go; AuditHead returns it and verification
// starts from it. PruneGroups (store.GroupPruner) deletes the progress of
// groups last written before a time: each progress record carries its
// write time (Options.Now), kept in snapshots too.
//
// # Offline tools
//
// VerifyAudit and ExportAudit read a store's audit log without opening
// the store: they take no lock and write nothing, so they may run beside
// a live broker.
//
// # Concurrency
//
// Every method is safe for concurrent use. Writers never wait for another
// log's fsync; readers of a log are serialised with each other (tidwall/wal
// fills its segment cache on read) but not with writers. Close waits for
// calls in flight, stops the two background goroutines (the metadata
// compactor and the acceptance flusher, which first chains what it
// holds), writes the clean-shutdown marker when every log closed
// without error, and releases the lock; it is idempotent.
package wal
