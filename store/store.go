// Package store defines the persistence seam of the broker: the records it
// keeps (messages, consumer progress, quarantine, audit, contracts) and the
// small interfaces a backend implements to keep them.
//
// The broker owns the meaning of every record; a store only keeps them,
// indexes them and gives them back. Message bodies are opaque bytes (the
// encoded envelope), so a backend never decodes a payload.
//
// # Concurrency
//
// Every method of every interface here is safe for concurrent use. A method
// that has returned without error has made its write visible to every later
// call; durable backends document when it is also on disk. Every method takes
// a context and returns ctx.Err() when the context ends before the work starts.
//
// # Optional abilities
//
// Beside Store, a backend may implement optional interfaces (AttemptLowerer,
// AcceptAppender, BatchAppender, AuditChainer, FloorRaiser, the trimmers,
// KVCreator, KVSwapper and the others documented as "the optional ability
// to"). The broker finds them by type assertion on the store it is given.
// A type that wraps a store by embedding the Store interface hides every
// one of them, and the broker then takes its fallback: for example, in a
// cluster a give-back without AttemptLowerer leaves the attempt spent (one
// delivery counted too many, never too few), and appends without
// BatchAppender are written one by one. A wrapper that means to keep an
// ability implements it by forwarding to the wrapped store; one that
// changes Append must also change or hide AcceptAppender and BatchAppender.
//
// # Conformance
//
// Package storetest holds the suite every Store must pass.
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// Errors a store returns. The broker maps them to its stable codes.
var (
	// ErrNotFound is returned for an unknown message, record or contract.
	ErrNotFound = errors.New("store: not found")
	// ErrExists is returned by KVCreator.Create for a key that has a
	// value.
	ErrExists = errors.New("store: exists")
	// ErrChanged is returned by KVSwapper.Swap when the key no longer
	// holds the value the caller read, and (as an *AttemptChangedError)
	// by AttemptLowerer.LowerAttempt when the attempt recorded is not the
	// one the caller read.
	ErrChanged = errors.New("store: changed since read")
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt is returned (wrapped in *CorruptError) when persisted data
	// fails its checksum or framing anywhere before the tail.
	ErrCorrupt = errors.New("store: corrupt")
	// ErrTampered is returned when the audit hash chain does not verify.
	ErrTampered = errors.New("store: audit chain tampered")
	// ErrFull is returned when the medium has no space left; nothing of the
	// failed write stays visible.
	ErrFull = errors.New("store: no space left")
	// ErrLocked is returned when another process holds the store.
	ErrLocked = errors.New("store: locked by another process")
	// ErrNoQuorum is returned by a replicated store when too few of its
	// replicas answered in time. A write may or may not have been kept
	// (a timeout cannot tell); retried once the replicas are back, it may
	// succeed, and an idempotency key makes the retry safe.
	ErrNoQuorum = errors.New("store: no quorum")
)

// CorruptError names where corruption was found.
type CorruptError struct {
	File   string
	Offset int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: corrupt: %s at offset %d: %s", e.File, e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Message is one accepted message as stored.
type Message struct {
	// Subject is the subject name the message was accepted on.
	Subject string
	// Seq is the per-subject sequence, assigned by Append, from 1, no gaps.
	Seq uint64
	// ID is the message id, unique across subjects.
	ID string
	// Time is when the broker accepted the message.
	Time time.Time
	// IdemKey, when not empty, is the scoped idempotency key: a second
	// Append with the same key before IdemExpires returns this message.
	IdemKey string
	// IdemExpires is when IdemKey stops deduplicating.
	IdemExpires time.Time
	// Body is the encoded envelope. The store never decodes it.
	Body []byte
}

// MessageLog keeps the per-subject message logs.
type MessageLog interface {
	// Append assigns the next sequence of m.Subject and stores m. When
	// m.IdemKey is set and an entry for it has not expired at m.Time, nothing
	// is stored and the original message is returned with dup true. The check
	// and the write are one atomic step. Append does not retain m.Body: the
	// caller may reuse the buffer once Append returns.
	Append(ctx context.Context, m Message) (stored Message, dup bool, err error)
	// Read returns up to max messages of subject with Seq >= from, in order.
	Read(ctx context.Context, subject string, from uint64, max int) ([]Message, error)
	// Lookup returns the message with the given id, or ErrNotFound.
	Lookup(ctx context.Context, id string) (Message, error)
	// Bounds returns the first and last sequence retained for subject; both
	// are 0 for a subject with no messages ever, and first > last when every
	// message has been trimmed.
	Bounds(ctx context.Context, subject string) (first, last uint64, err error)
}

// HintLookup is the optional ability to look a message up faster than
// Lookup where a stale answer costs nothing. A clustered store, whose
// replicas may be behind, confirms Lookup's ErrNotFound with a read that
// cannot be stale; LookupHint is Lookup without that confirmation, and may
// answer ErrNotFound for a message a replica has not got yet. The broker
// uses it only where a later step decides with authority (an append's
// claim of the id) and uses Lookup everywhere else.
type HintLookup interface {
	LookupHint(ctx context.Context, id string) (Message, error)
}

// Trimmer is the optional ability to drop old messages (retention).
type Trimmer interface {
	// TrimBefore removes messages of subject accepted before t, from the
	// front of the log, and returns how many were removed.
	TrimBefore(ctx context.Context, subject string, t time.Time) (int, error)
}

// SeqTrimmer is the optional ability to drop messages by sequence (a
// count bound on retention: the broker keeps a subject's newest messages
// by trimming through the sequence before them).
type SeqTrimmer interface {
	// TrimThrough removes the messages of subject with Seq <= seq from
	// the front of the log and returns how many were removed. A seq below
	// the first retained message removes nothing; one at or beyond the
	// last removes every message. Like TrimBefore, it never reuses a
	// sequence and does to a removed message's id and idempotency key
	// what TrimBefore does.
	TrimThrough(ctx context.Context, subject string, seq uint64) (int, error)
}

// ByteTrimmer is the optional ability to bound a subject's log by size
// (a byte bound on retention: the broker keeps a subject's newest
// messages that fit in retention.maxBytes by trimming the oldest).
//
// A subject's retained bytes are the sum of len(Body) of its retained
// messages: the stored envelopes, without ids, idempotency keys, times or
// the store's own framing and indexes, so every store measures a subject
// alike whatever it spends on it.
type ByteTrimmer interface {
	// Bytes returns the retained bytes of subject (0 for a subject with
	// no messages). It reads no retained message the store has counted
	// before, so calling it after every trim is cheap.
	Bytes(ctx context.Context, subject string) (uint64, error)
	// TrimToBytes removes the oldest messages of subject, from the front
	// of the log, until its retained bytes are at most max, and returns
	// how many were removed: none, cheaply, when they already are. Like
	// TrimThrough, it never reuses a sequence and does to a removed
	// message's id and idempotency key what TrimBefore does. Messages
	// appended while it trims may leave the subject over max.
	TrimToBytes(ctx context.Context, subject string, max uint64) (int, error)
}

// AuditTrimmer is the optional ability to drop old audit records while
// keeping a checkpoint that still proves the remainder.
type AuditTrimmer interface {
	// TrimAuditBefore removes audit records with a Time before t from the
	// front of the log and returns how many. AuditHead reports the
	// checkpoint of the last removed record from then on, so the
	// remainder verifies from it.
	TrimAuditBefore(ctx context.Context, t time.Time) (int, error)
}

// QuarantineTrimmer is the optional ability to drop old quarantine records.
type QuarantineTrimmer interface {
	// TrimQuarantineBefore removes quarantine records whose Time is before
	// t and returns how many.
	TrimQuarantineBefore(ctx context.Context, t time.Time) (int, error)
}

// GroupKey names one consumer's or consumer group's progress on a subject.
type GroupKey struct {
	Subject string
	Group   string
}

// GroupState is the persisted progress of a consumer group.
type GroupState struct {
	// Floor: every sequence <= Floor is done (acked, exhausted or, for a
	// pubsub cursor, delivered).
	Floor uint64
	// Done holds sequences above Floor that are done, ascending.
	Done []uint64
	// Attempts counts delivery attempts of sequences that are not done.
	Attempts map[uint64]int
}

// IsDone reports whether seq is done: at or below Floor, or in Done.
func (g *GroupState) IsDone(seq uint64) bool {
	if seq <= g.Floor {
		return true
	}
	_, found := slices.BinarySearch(g.Done, seq)
	return found
}

// MarkDone records seq as done: Floor advances over every contiguous done
// sequence, the others wait in Done (ascending, each above Floor+1), and
// the attempts of seq are forgotten. Marking a done sequence again is a
// no-op. Backends keep their groups with it, so they agree on the floor.
func (g *GroupState) MarkDone(seq uint64) {
	if seq <= g.Floor {
		return
	}
	delete(g.Attempts, seq)
	if seq != g.Floor+1 {
		if i, found := slices.BinarySearch(g.Done, seq); !found {
			g.Done = slices.Insert(g.Done, i, seq)
		}
		return
	}
	g.Floor = seq
	n := 0
	for n < len(g.Done) && g.Done[n] == g.Floor+1 {
		g.Floor++
		n++
	}
	if n > 0 {
		g.Done = slices.Delete(g.Done, 0, n)
	}
}

// RaiseFloor records every sequence <= floor as done, as when the
// messages up to floor are gone (trimmed by retention): Floor becomes
// floor, the Done and Attempts at or below it are dropped, and Floor
// advances over the contiguous Done above it, as MarkDone does. Raising
// to a floor at or below Floor is a no-op.
func (g *GroupState) RaiseFloor(floor uint64) {
	if floor <= g.Floor {
		return
	}
	for seq := range g.Attempts {
		if seq <= floor {
			delete(g.Attempts, seq)
		}
	}
	n := len(g.Done) // the Done at or below floor
	if floor < math.MaxUint64 {
		n, _ = slices.BinarySearch(g.Done, floor+1)
	}
	g.Floor = floor
	for n < len(g.Done) && g.Done[n] == g.Floor+1 {
		g.Floor++
		n++
	}
	if n > 0 {
		g.Done = slices.Delete(g.Done, 0, n)
	}
}

// MarkAttempt records that delivery attempt n of seq began, and reports
// whether g changed: the count only rises (ProgressLog.MarkAttempt), so
// an n at or below the attempt recorded (0: none, so any n below 1 too)
// is a no-op, as is any n for a sequence that is already done. Lowering
// is LowerAttempt's.
func (g *GroupState) MarkAttempt(seq uint64, n int) bool {
	if !g.RaisesAttempt(seq, n) {
		return false
	}
	if g.Attempts == nil {
		g.Attempts = make(map[uint64]int)
	}
	g.Attempts[seq] = n
	return true
}

// RaisesAttempt reports whether MarkAttempt(seq, n) would change g: seq
// is not done and n is above the attempt recorded of it (0: none). It
// changes nothing.
func (g *GroupState) RaisesAttempt(seq uint64, n int) bool {
	return n > g.Attempts[seq] && !g.IsDone(seq)
}

// LowerAttempt applies AttemptLowerer.LowerAttempt to g: attempt to of
// seq when the attempt recorded is from; otherwise g is left as it is
// and the answer is an *AttemptChangedError (or the error of
// CheckLowerAttempt).
func (g *GroupState) LowerAttempt(seq uint64, from, to int) error {
	if err := g.AttemptIs(seq, from, to); err != nil {
		return err
	}
	g.Attempts[seq] = to // from >= 1 is recorded: Attempts is not nil
	return nil
}

// AttemptIs reports whether LowerAttempt(seq, from, to) would lower g:
// nil when the attempt recorded of seq is from (and to lowers it), an
// *AttemptChangedError when it is another, none, or seq is done. It
// changes nothing.
func (g *GroupState) AttemptIs(seq uint64, from, to int) error {
	if err := CheckLowerAttempt(from, to); err != nil {
		return err
	}
	if g.IsDone(seq) {
		return &AttemptChangedError{Seq: seq, From: from, Done: true}
	}
	if a := g.Attempts[seq]; a != from {
		return &AttemptChangedError{Seq: seq, From: from, Found: a}
	}
	return nil
}

// CheckLowerAttempt refuses a LowerAttempt that lowers nothing: to must
// be below from, and not negative.
func CheckLowerAttempt(from, to int) error {
	if to < 0 || to >= from {
		return fmt.Errorf("store: an attempt lowered from %d to %d: to must be below from, and not negative", from, to)
	}
	return nil
}

// ProgressLog keeps consumer progress: cursors, acks and delivery attempts.
type ProgressLog interface {
	// MarkDone records seq as done for the group (ack, exhaust or cursor
	// advance). Marking a done sequence again is a no-op.
	MarkDone(ctx context.Context, key GroupKey, seq uint64) error
	// MarkAttempt records that delivery attempt n of seq began (a lease).
	// It only raises the count: the attempt recorded becomes the larger
	// of the one recorded (0: none) and n, so a write of attempt n that
	// lands after another writer (another broker sharing the store)
	// recorded a later one leaves that one standing, rather than undo it
	// and let the message be delivered more often than its attempts
	// allow. The comparison and the write are one step against every
	// other write of the group's progress, as LowerAttempt's are. One
	// that raises nothing (n at or below the attempt recorded, below 1,
	// or seq done) writes nothing (GroupPruner's write time). Lowering a
	// count is AttemptLowerer's, by compare-and-set; a store without it
	// cannot lower one.
	MarkAttempt(ctx context.Context, key GroupKey, seq uint64, n int) error
	// LoadGroup returns the group's state; a group never seen is zero.
	LoadGroup(ctx context.Context, key GroupKey) (GroupState, error)
}

// GroupPruner is the optional ability to delete the stored state of
// consumer groups that nobody uses any more (retention of abandoned
// groups).
//
// A store that has it knows when each group's state was last written
// (MarkDone, MarkDoneBatch or MarkAttempt that changed it), by the
// store's clock, and keeps that time as durably as the state. State
// written before the store kept the time counts as written when the
// store opened, so that nothing is deleted early.
type GroupPruner interface {
	// PruneGroups deletes the state of each group of subject last written
	// before t, unless keep(group) returns true, and returns how many it
	// deleted. keep is called once per such group before it is deleted,
	// from the calling goroutine, with no lock of the store held.
	//
	// A write to a group is never lost to a deletion: a group is deleted
	// only if nothing wrote it since PruneGroups read its time (so a write
	// that returned before keep returned false for it keeps it), and a
	// write running at the same time as the deletion either keeps the
	// group or is applied, after the deletion, to the zero state.
	PruneGroups(ctx context.Context, subject string, t time.Time, keep func(group string) bool) (int, error)
}

// FloorRaiser is the optional ability to mark done, in one write, every
// sequence of a group up to a floor: the broker raises the floor of a
// group whose messages below it were trimmed, so that its progress does
// not keep every later sequence in Done for good.
type FloorRaiser interface {
	// RaiseFloor applies GroupState.RaiseFloor(floor) to the group's
	// state. It is a write as MarkDone is (GroupPruner's write time);
	// raising to a floor at or below the group's is a no-op.
	RaiseFloor(ctx context.Context, key GroupKey, floor uint64) error
}

// GroupLister is the optional ability to list the stored progress of a
// subject's consumer groups, so that the broker can report the lag of a
// group nobody has loaded (every consumer of it gone).
type GroupLister interface {
	// ListGroups returns the stored state of up to max groups of subject
	// (max <= 0: every one), by group name, pull cursors included: every
	// group a LoadGroup would find state for, but none that PruneGroups
	// deleted. The states are copies. Which groups are left out when
	// there are more than max is unspecified.
	ListGroups(ctx context.Context, subject string, max int) (map[string]GroupState, error)
}

// GroupSubjectLister is the optional ability to name the subjects that
// have stored consumer-group progress, so that the broker can report and
// prune the groups of a subject no longer in its catalog.
type GroupSubjectLister interface {
	// ListGroupSubjects returns each subject with stored progress (a
	// subject for which GroupLister.ListGroups would list a group) once,
	// in no particular order. A subject whose every group PruneGroups
	// deleted is not listed.
	ListGroupSubjects(ctx context.Context) ([]string, error)
}

// MessageSubjectLister is the optional ability to name the subjects that
// hold messages, so that the broker can report, and an operator purge,
// the messages of a subject no longer in its catalog (which no retention
// trims any more).
type MessageSubjectLister interface {
	// ListMessageSubjects returns each subject with at least one
	// retained message once, in no particular order. It may also name a
	// subject whose every message was trimmed (a log the store keeps for
	// its sequence); the caller reads Bounds to tell. It never names a
	// subject nothing was ever appended to.
	ListMessageSubjects(ctx context.Context) ([]string, error)
}

// CopyGroups is what a GroupLister that holds its groups in memory returns
// from gs: a copy of the state of at most max of them (max <= 0: every
// one), by name, state giving each one's.
func CopyGroups[G any](gs map[string]G, max int, state func(G) *GroupState) map[string]GroupState {
	n := len(gs)
	if max > 0 {
		n = min(n, max)
	}
	out := make(map[string]GroupState, n)
	for name, g := range gs {
		if len(out) >= n {
			break
		}
		out[name] = state(g).Clone()
	}
	return out
}

// AttemptLowerer is the optional ability to lower a recorded delivery
// attempt only while it is still the one the caller read: a
// compare-and-set. A store that several brokers share implements it, so
// that a broker that gives an attempt back (its delivery never reached a
// consumer) does not undo a later attempt another broker recorded
// meanwhile. MarkAttempt only raises a count, so a store without
// AttemptLowerer keeps every attempt recorded: the broker gives one back
// in its own count alone (on one node, while the group stays in memory),
// or leaves it spent.
type AttemptLowerer interface {
	// LowerAttempt records attempt to of seq if the attempt recorded is
	// from, and otherwise stores nothing and returns an
	// *AttemptChangedError (errors.Is ErrChanged): another attempt is
	// recorded, none is, or seq is done. to must be below from and not
	// negative (CheckLowerAttempt). The comparison and the write are one
	// step against every other write of the group's progress (of a store
	// that several brokers share, every broker's). It is a write as
	// MarkAttempt is (GroupPruner's write time); one refused writes
	// nothing. Like MarkAttempt, one that returns another error may or
	// may not have been made.
	LowerAttempt(ctx context.Context, key GroupKey, seq uint64, from, to int) error
}

// AttemptChangedError is the answer of a LowerAttempt refused: the
// attempt recorded of Seq is not From.
type AttemptChangedError struct {
	Seq  uint64
	From int // the attempt the caller expected
	// Found is the attempt recorded (0: none); Done, that Seq is done
	// and none is recorded.
	Found int
	Done  bool
}

func (e *AttemptChangedError) Error() string {
	if e.Done {
		return fmt.Sprintf("store: the attempt of sequence %d was not lowered: the sequence is done", e.Seq)
	}
	return fmt.Sprintf("store: the attempt of sequence %d was not lowered: %d is recorded, not %d", e.Seq, e.Found, e.From)
}

// Is makes errors.Is(err, ErrChanged) true.
func (e *AttemptChangedError) Is(target error) bool { return target == ErrChanged }

// BatchProgress is the optional ability to mark many sequences done in one
// write (one durable commit), for receivers that take a batch at once.
type BatchProgress interface {
	MarkDoneBatch(ctx context.Context, key GroupKey, seqs []uint64) error
}

// QuarantineRecord is a refused message kept for review, already redacted.
type QuarantineRecord struct {
	ID         string    `json:"id"`
	Time       time.Time `json:"time"`
	Subject    string    `json:"subject"`
	Principal  string    `json:"principal"`
	ContractID string    `json:"contractId,omitempty"`
	PolicyID   string    `json:"policyId,omitempty"`
	SchemaID   string    `json:"schemaId,omitempty"`
	MessageID  string    `json:"messageId,omitempty"`
	Code       string    `json:"code"`
	Gate       string    `json:"gate,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// Body is the redacted encoded envelope.
	Body []byte `json:"-"`
	// Released is set once the record was released.
	Released   bool      `json:"released"`
	ReleasedBy string    `json:"releasedBy,omitempty"`
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	// ReleasedAs is the id of the message the release published.
	ReleasedAs string `json:"releasedAs,omitempty"`
}

// QuarantineLog keeps quarantine records.
type QuarantineLog interface {
	// PutQuarantine stores a new record or replaces one with the same ID.
	PutQuarantine(ctx context.Context, r QuarantineRecord) error
	// GetQuarantine returns one record or ErrNotFound.
	GetQuarantine(ctx context.Context, id string) (QuarantineRecord, error)
	// ListQuarantine returns up to max records, oldest first, with Time >= since.
	ListQuarantine(ctx context.Context, since time.Time, max int) ([]QuarantineRecord, error)
}

// AuditLog keeps the hash-chained audit records.
type AuditLog interface {
	// AppendAudit appends records whose Seq continues the log, in order.
	// The caller computes the chain; a durable store verifies it on open.
	AppendAudit(ctx context.Context, recs ...AuditRecord) error
	// ReadAudit returns up to max records with Seq >= from, in order.
	ReadAudit(ctx context.Context, from uint64, max int) ([]AuditRecord, error)
	// AuditHead returns the last record (zero value when empty) and the
	// checkpoint that stands for trimmed records before the first.
	AuditHead(ctx context.Context) (last AuditRecord, cp Checkpoint, err error)
}

// AuditChainer is the optional ability of an audit log to chain records
// itself. A store that writes audit records of its own (AcceptAppender)
// implements it, and a writer that finds it must append through it, not
// through AppendAudit, since the store then owns the chain's head.
type AuditChainer interface {
	// ChainAudit appends recs in order, setting each one's Seq, PrevHash
	// and Hash to continue the chain, its ID to "aud_" and the sequence
	// when empty, and its Time to UTC. It returns once they are written
	// as durably as AppendAudit writes; on error none of recs is in the
	// chain and their chain fields are unspecified.
	ChainAudit(ctx context.Context, recs []AuditRecord) error
}

// AcceptAppender is the optional ability to keep a message and the audit
// record of its acceptance in one durable write. A store that has it also
// implements AuditChainer. The broker appends through AppendAccepted,
// not Append, when a store has it: a type that embeds such a store (the
// write-ahead log) to change what Append does must change AppendAccepted
// too, or hide it, or the broker passes its Append by.
type AcceptAppender interface {
	// AppendAccepted is Append, and when m is stored (not a duplicate)
	// the audit record accepted (with Subject and MessageID set to m's,
	// and Seqs to its sequence in decimal) is kept with it: once AppendAccepted returns, the record is in the
	// audit chain or is put there by recovery before the store opens
	// again, whatever happens in between; either way it is chained after
	// every record that was chained before AppendAccepted returned. A
	// duplicate or a failed append keeps no record.
	AppendAccepted(ctx context.Context, m Message, accepted AuditRecord) (stored Message, dup bool, err error)
}

// BatchAppender is the optional ability to append several messages in
// order, each with its acceptance record as AcceptAppender keeps it,
// sharing one durable write where the store can. A store that has it also
// implements AcceptAppender.
type BatchAppender interface {
	// AppendAcceptedBatch is AppendAccepted for each of ms (accepted[i]
	// being ms[i]'s record), in order: a message's sequence is below the
	// next one's on its subject, and a message is a duplicate of an
	// earlier one of the batch with its idempotency key. It returns one
	// outcome per message once every one is durable or refused.
	AppendAcceptedBatch(ctx context.Context, ms []Message, accepted []AuditRecord) []Appended
}

// Appended is the outcome of one message of AppendAcceptedBatch: as
// AppendAccepted returns it.
type Appended struct {
	Stored Message
	Dup    bool
	Err    error
}

// ContractRecord is a negotiated contract as persisted.
type ContractRecord struct {
	ID        string    `json:"id"`
	Principal string    `json:"principal"`
	Region    string    `json:"region,omitempty"`
	IssuedAt  time.Time `json:"issuedAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Revoked   bool      `json:"revoked,omitempty"`
	// Body is the broker's encoding of the contract's grants.
	Body []byte `json:"body"`
}

// ContractLog keeps negotiated contracts.
type ContractLog interface {
	// PutContract stores or replaces a contract, with one exception every
	// store keeps: a revocation is final. A put of a record not revoked
	// over a stored one that is revoked stores nothing and returns nil; the
	// stored record stays as it was, its expiry included. A node renews a
	// contract as it holds it, and in a cluster it may not have heard yet
	// that another node revoked it: were its write to replace the
	// revocation, every node that loads the contract afterwards (restarted,
	// or one that never held it) would honour it again. A durable store
	// keeps the rule across a restart too, whatever order its log replays.
	// (A revoked contract that DeleteExpiredContracts dropped is gone: a
	// later put stores the record anew.)
	PutContract(ctx context.Context, c ContractRecord) error
	// GetContract returns one contract or ErrNotFound.
	GetContract(ctx context.Context, id string) (ContractRecord, error)
	// DeleteExpiredContracts drops contracts that expired before t.
	DeleteExpiredContracts(ctx context.Context, t time.Time) (int, error)
}

// ContractLister is the optional ability to list the contracts a store
// keeps. The broker uses it when it starts, to count each principal's live
// contracts from before a restart against its cap; without it, such a
// contract counts only once it is used again.
type ContractLister interface {
	// ListContracts returns every contract kept whose ExpiresAt is after
	// expiringAfter (one expiring exactly then is left out), revoked ones
	// included (the caller skips those it does not want), ordered by ID.
	// The records are copies: the caller may change them. A durable store
	// lists only committed contracts, so a restart lists the same set.
	ListContracts(ctx context.Context, expiringAfter time.Time) ([]ContractRecord, error)
}

// KV is a small keyed store for broker metadata (accounts, roles, keys,
// grants). Values are opaque bytes.
type KV interface {
	Put(ctx context.Context, bucket, key string, val []byte) error
	Get(ctx context.Context, bucket, key string) ([]byte, error)
	Delete(ctx context.Context, bucket, key string) error
	List(ctx context.Context, bucket string) (map[string][]byte, error)
}

// KVCreator is the optional ability of a KV to store a value only if its
// key has none, atomically. A store that several brokers share (a
// cluster) implements it, so that values every broker must agree on and
// the first one creates (the key that signs grant tokens) are created
// once: of two brokers starting at once, one creates and the other reads
// what it created, where Get then Put would leave each with its own.
type KVCreator interface {
	// Create stores a copy of val under bucket and key if the key has no
	// value, and returns ErrExists, storing nothing, if it has one.
	Create(ctx context.Context, bucket, key string, val []byte) error
}

// KVSwapper is the optional ability of a KV to replace a value only if
// it is still the one the caller read, atomically: a compare-and-swap. A
// store that several brokers share implements it, so that a broker that
// changes a record from its own copy, not yet told that another broker
// changed or deleted the record since, does not undo that change with its
// write (the access directory writes every account, role, grant and
// revocation through it). Without it, the directory's writes are plain
// Put and Delete: the later write wins.
type KVSwapper interface {
	// Swap stores a copy of val under bucket and key (a nil val deletes
	// the key) if the key's value is byte for byte old (a nil old: the key
	// has no value; an empty, non-nil old: the key holds the empty value).
	// Otherwise it stores nothing and returns ErrChanged. The comparison
	// and the write are one step against every other writer of the store
	// (of a store that several brokers share, every broker's): of two
	// swaps from one old value to others, one at most succeeds. A deleted
	// key counts as one with no value. Like Put, a swap that returns
	// another error (ErrNoQuorum, a timeout) may or may not have been
	// made: the caller reads the key again to know.
	Swap(ctx context.Context, bucket, key string, old, val []byte) error
}

// RecoveryReporter is the optional ability of a durable store to say what
// its recovery removed when it opened. The broker reads it once at startup
// and writes an audit record for each Truncation, so that the loss is on
// the record, not only in a log line.
type RecoveryReporter interface {
	// Recovered returns the torn tails dropped when the store was opened,
	// in the order they were found. It is empty after a clean shutdown
	// (a store that finds damage at the tail after a clean shutdown
	// refuses to open instead) and after a crash that tore nothing.
	Recovered() []Truncation
}

// Truncation is one torn tail that recovery after a crash dropped: the
// bytes of a write that the crash cut short. Under the store's durable
// modes those bytes never held an acknowledged write.
type Truncation struct {
	// Log names the log, in the store's terms (for store/wal: "meta",
	// "audit", "quarantine" or "subject " followed by the subject name).
	Log string `json:"log"`
	// File is the file that was cut.
	File string `json:"file"`
	// Offset is where the file was cut: the end of its last good record.
	Offset int64 `json:"offset"`
	// Bytes is how many bytes were dropped from Offset on.
	Bytes int64 `json:"bytes"`
	// Reason says what was wrong with the tail.
	Reason string `json:"reason"`
}

// Store is everything the broker persists.
type Store interface {
	MessageLog
	ProgressLog
	QuarantineLog
	AuditLog
	ContractLog
	KV
	// Close releases the store. It is idempotent.
	Close(ctx context.Context) error
}

// Clone returns a deep copy of g: a store hands out its groups' state
// without sharing the done set or the attempt counts.
func (g *GroupState) Clone() GroupState {
	c := GroupState{Floor: g.Floor}
	if len(g.Done) > 0 {
		c.Done = slices.Clone(g.Done)
	}
	if len(g.Attempts) > 0 {
		c.Attempts = maps.Clone(g.Attempts)
	}
	return c
}
