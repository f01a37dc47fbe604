// Package storetest is the conformance suite every store.Store must pass.
//
// A backend's test calls Run with a function that opens a fresh, empty store:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			return memory.New(nil)
//		}, storetest.Features{})
//	}
//
// Features says what else the backend can do. A durable backend sets Reopen,
// and the suite checks that everything written survives a close and an
// open. Optional abilities found by type assertion (store.Trimmer,
// store.SeqTrimmer, store.ByteTrimmer, store.AuditTrimmer, store.QuarantineTrimmer, store.BatchProgress,
// store.GroupPruner, store.FloorRaiser, store.GroupLister,
// store.GroupSubjectLister, store.MessageSubjectLister, store.ContractLister,
// store.KVSwapper, store.AttemptLowerer, store.AcceptAppender with
// store.AuditChainer)
// are tested when the store has them and skipped when it has not.
//
// # Semantics the suite pins down
//
// Where the store interfaces leave a detail open, the suite decides it, so
// that every backend behaves alike:
//
//   - Read and ReadAudit: from 0 reads from the first record; max <= 0 means
//     no limit; an unknown subject, or from beyond the last record, gives no
//     records and no error.
//   - Idempotency keys are global to the store (the broker scopes them). An
//     entry deduplicates a message whose Time is before the entry's
//     IdemExpires; a duplicate stores nothing and does not extend the entry.
//   - TrimBefore removes a prefix: it stops at the first message at or after
//     t, even if later ones are older. Sequences are never reused.
//   - TrimThrough goes by sequence alone, never by time: a seq below the
//     first retained message removes nothing, one beyond the last removes
//     every message, and the next Append continues the sequence.
//   - TrimToBytes goes by the retained bodies' lengths alone (the measure
//     Bytes reports, store.ByteTrimmer): it removes the fewest oldest
//     messages that bring them to at most max, every message for 0, and
//     Bytes counts what survives a reopen.
//   - TrimAuditBefore leaves AuditHead's checkpoint on the last removed
//     record, also when it removes every record; TrimQuarantineBefore goes
//     by each record's Time, a released record included.
//   - MarkAttempt only raises: it records the larger of the attempt
//     recorded (0: none) and the one written, so one at or below it
//     (below 1 too) or of a done sequence is a no-op and writes nothing
//     (it does not count as a write for PruneGroups); of writes racing,
//     the largest attempt stands. MarkDone forgets the attempts of the
//     sequence it marks.
//   - LowerAttempt (store.AttemptLowerer) lowers only from the attempt
//     recorded: another one, none (for a group never seen too) or a done
//     sequence is an *AttemptChangedError and writes nothing; one that
//     would not lower (to at or above from, or negative) is another
//     error; of lowerings racing from one attempt exactly one is made.
//   - PruneGroups goes by the wall clock (every backend stamps progress
//     writes with it by default): a group written before t and after it
//     counts as written after it; a deleted group written again starts
//     from the zero state.
//   - RaiseFloor to a floor at or below the group's writes nothing (it
//     does not count as a write for PruneGroups); one above it does.
//   - ListGroups: max <= 0 means no limit; an unknown subject lists
//     nothing; a group PruneGroups deleted is not listed.
//   - ListGroupSubjects names each subject with a group once, pull cursors
//     and groups with only attempts included; a subject whose last group
//     PruneGroups deleted is not named.
//   - ListMessageSubjects names each subject with a retained message
//     once, never one with only consumer progress; a subject whose every
//     message was trimmed may be named or not.
//   - AppendAudit refuses a batch that does not continue the log, whole.
//   - ListQuarantine: max <= 0 means no limit; oldest first.
//   - PutContract of a contract not revoked over a stored one that is
//     revoked stores nothing and succeeds: a revocation is final, the
//     revoked record stays as it was, also after a reopen.
//   - KV Delete of a missing key is a no-op; List of an unknown bucket is
//     empty.
//   - Swap (store.KVSwapper) compares the key's value with old byte for
//     byte, a nil old standing for no value and an empty one for the
//     empty value; a deleted key has no value; a nil val deletes; of
//     swaps racing from one value exactly one is made.
//   - After Close every method returns store.ErrClosed, even when Close was
//     called with a done context. With a done context every other method
//     returns the context's error and writes nothing.
//
// Times are compared with time.Time.Equal and bodies as bytes, so a backend
// may return UTC times and nil for empty bodies.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// Features describes what a backend can do beyond the store.Store
// interface.
type Features struct {
	// Reopen, when set, returns a store over the same data as s: the
	// records s held, as a new process would find them. The suite has
	// already closed s when it calls Reopen. Backends without durability
	// leave it nil and the reopen tests are skipped.
	Reopen func(t *testing.T, s store.Store) store.Store
}

// Run runs the conformance suite. open must return a new, empty store each
// time it is called; the suite closes every store it opens.
func Run(t *testing.T, open func(t *testing.T) store.Store, f Features) {
	su := &suite{open: open, f: f}
	t.Run("Messages", su.testMessages)
	t.Run("Idempotency", su.testIdempotency)
	t.Run("Concurrency", su.testConcurrency)
	t.Run("Trim", su.testTrim)
	t.Run("Progress", su.testProgress)
	t.Run("Quarantine", su.testQuarantine)
	t.Run("Audit", su.testAudit)
	t.Run("Accepted", su.testAccepted)
	t.Run("TrimAudit", su.testTrimAudit)
	t.Run("TrimQuarantine", su.testTrimQuarantine)
	t.Run("PruneGroups", su.testPruneGroups)
	t.Run("RaiseFloor", su.testRaiseFloor)
	t.Run("ListGroups", su.testListGroups)
	t.Run("ListGroupSubjects", su.testListGroupSubjects)
	t.Run("ListMessageSubjects", su.testListMessageSubjects)
	t.Run("Contracts", su.testContracts)
	t.Run("ListContracts", su.testListContracts)
	t.Run("RevocationFinal", su.testRevocationFinal)
	t.Run("KV", su.testKV)
	t.Run("Swap", su.testSwap)
	t.Run("LowerAttempt", su.testLowerAttempt)
	t.Run("MarkAttemptRaises", su.testMarkAttemptRaises)
	t.Run("Close", su.testClose)
	t.Run("CanceledContext", su.testCanceled)
	t.Run("Reopen", su.testReopen)
}

type suite struct {
	open func(t *testing.T) store.Store
	f    Features
}

// store opens a fresh store that is closed when t ends.
func (su *suite) store(t *testing.T) store.Store {
	t.Helper()
	s := su.open(t)
	require.NotNil(t, s, "open returned nil")
	su.closeOnCleanup(t, s)
	return s
}

func (su *suite) closeOnCleanup(t *testing.T, s store.Store) {
	t.Helper()
	t.Cleanup(func() {
		// t.Context is already done here.
		require.NoError(t, s.Close(context.Background()), "Close")
	})
}

// reopen closes s and returns the store Features.Reopen gives for it.
func (su *suite) reopen(t *testing.T, s store.Store) store.Store {
	t.Helper()
	require.NoError(t, s.Close(t.Context()), "Close before reopen")
	s2 := su.f.Reopen(t, s)
	require.NotNil(t, s2, "Reopen returned nil")
	su.closeOnCleanup(t, s2)
	return s2
}

// base is the time the fixtures start at. It has nanoseconds so that a
// backend that drops precision fails.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// at returns base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

// normMessage makes m comparable with require.Equal across backends: times
// in UTC without monotonic readings, empty bodies nil.
func normMessage(m store.Message) store.Message {
	m.Time = m.Time.UTC()
	m.IdemExpires = m.IdemExpires.UTC()
	m.Body = normBytes(m.Body)
	return m
}

func normMessages(ms []store.Message) []store.Message {
	if len(ms) == 0 {
		return nil
	}
	out := make([]store.Message, len(ms))
	for i, m := range ms {
		out[i] = normMessage(m)
	}
	return out
}

func normQuarantine(rs ...store.QuarantineRecord) []store.QuarantineRecord {
	if len(rs) == 0 {
		return nil
	}
	out := make([]store.QuarantineRecord, len(rs))
	for i, r := range rs {
		r.Time = r.Time.UTC()
		r.ReleasedAt = r.ReleasedAt.UTC()
		r.Body = normBytes(r.Body)
		out[i] = r
	}
	return out
}

func normAudit(rs ...store.AuditRecord) []store.AuditRecord {
	if len(rs) == 0 {
		return nil
	}
	out := make([]store.AuditRecord, len(rs))
	for i, r := range rs {
		r.Time = r.Time.UTC()
		out[i] = r
	}
	return out
}

func normContract(c store.ContractRecord) store.ContractRecord {
	c.IssuedAt = c.IssuedAt.UTC()
	c.ExpiresAt = c.ExpiresAt.UTC()
	c.Body = normBytes(c.Body)
	return c
}

func normContracts(cs ...store.ContractRecord) []store.ContractRecord {
	if len(cs) == 0 {
		return nil
	}
	out := make([]store.ContractRecord, len(cs))
	for i, c := range cs {
		out[i] = normContract(c)
	}
	return out
}

func normGroup(g store.GroupState) store.GroupState {
	if len(g.Done) == 0 {
		g.Done = nil
	}
	if len(g.Attempts) == 0 {
		g.Attempts = nil
	}
	return g
}

func normBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func normKV(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = normBytes(v)
	}
	return out
}
