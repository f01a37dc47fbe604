// Package memory is an in-memory store.Store: every record lives in maps and
// slices of the process and is gone when the process ends. It is the store of
// tests, examples and brokers that need no durability.
//
// # Model
//
// Each subject has a log whose messages sit in fixed-size chunks indexed by
// seq - first, so Read finds its start in O(1), Append never moves old
// messages and trimming frees whole chunks. A chunk keeps no pointer per
// message: each message is a fixed 40-byte header (where its bytes end,
// its times as Unix seconds and nanoseconds, the scope of its key) plus its
// bytes, copied one after the other into the chunk's byte arena: the
// lengths of its id and key as uvarints, then the id, the key and the body.
// A new chunk's arena is sized from the last full one's, with little room
// to spare; a chunk whose messages outgrow it continues in a second arena
// made for the rest, so an arena is never copied. The subject is the log's;
// messages are rebuilt as store.Message values on the way out. The bytes of
// a trimmed message stay until its whole chunk goes.
//
// The broker scopes an idempotency key by subject and principal (subject,
// NUL, principal, NUL, the client's key). A key's bytes up to its second
// NUL are its scope, kept once per store in a table of scopes; a message
// keeps the scope's number and the rest of its key (see keyScopes).
//
// A chunk's arena is fresh memory, and the first write to each of its
// pages is a page fault. Once a log's chunk has filled, the chunk after
// the last one is made on a short-lived goroutine of its own as soon as
// the last one begins, and the pages it is expected to fill touched there,
// so that Append copies into memory that is already mapped; the spares a
// store holds at once are bounded, and Close waits for the one being made. The hash tables of the
// id and idempotency key indexes are made ahead the same way: once one is
// 75% full, the table it grows into is made and its pages written on a
// goroutine of its own, and handed over before it is needed.
//
// Message ids and idempotency keys are indexed by a 64-bit hash of the
// string (hash/maphash, seeded per store) that maps to the number of a
// subject log and a sequence in it. Every hit is checked against the bytes
// in the arena, and a string whose hash another one already holds is
// indexed by the string itself in a small overflow map, so colliding
// hashes cost time, never correctness.
//
// An idempotency entry is the message that claimed the key; entries expire
// through a queue of (expiry, hash, message) items, a FIFO for expiries
// that come in order and a heap for the others. Every Append evicts the
// entries that expired before the newest message time seen so far (less
// Options.IdempotencyGrace), so memory stays bounded under unique keys
// without a background goroutine. A message trimmed while its key still
// deduplicates is copied out of its chunk until its entry goes.
//
// Audit records are kept the same way: chunks of fixed 32-byte headers and
// a byte arena. The fields that repeat (type, outcome, code, gate, subject,
// principal, contract, policy and schema ids) are numbered in one interned
// table per store, and each distinct combination of them in another; an id
// of the form "aud_<seq>", a previous hash equal to the record before's
// hash and a lowercase-hex hash are stored in short forms, and anything
// else verbatim, so every record reads back as it was appended.
//
// The indexes, the queue and the chunks hold no pointers, so the garbage
// collector has nothing in them to scan: what Append and a collection cost
// does not grow with the number of messages held.
//
// # Times
//
// The store keeps instants, not time.Time values: the messages that Read,
// Lookup and a duplicate Append return have Time and IdemExpires in UTC,
// with no monotonic reading; compare them with time.Time.Equal. (A stored
// Append returns the caller's own m.) Idempotency compares instants, never
// monotonic readings.
//
// # Ownership
//
// Bytes and strings are copied on the way in and on the way out: a caller
// may reuse or change a slice it passed, and may change a slice it got
// back, without touching what the store keeps. Read copies the bodies of
// one call into a single buffer and their ids and keys into a single
// string, so a Read costs three allocations whatever its length. An empty
// Body comes back nil.
//
// # Concurrency
//
// A Store is safe for concurrent use. Each kind of record has its own lock,
// so progress or audit writes do not wait for message appends. After Close
// every method returns store.ErrClosed and the records are released.
package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store"
)

// Options configure a Store. The zero value, like a nil *Options, is the
// default.
type Options struct {
	// IdempotencyGrace keeps an idempotency entry this long after it expired,
	// measured against the newest message time seen, before it is evicted.
	// It only matters when Appends arrive with times out of order by more
	// than the time left on an entry; an entry never deduplicates a message
	// whose Time is at or after its expiry, grace or not. Zero (the default)
	// evicts as soon as the newest message time passes the expiry; a negative
	// value counts as zero.
	IdempotencyGrace time.Duration
	// Now is the clock that stamps each write of a consumer group's
	// progress, for PruneGroups (default time.Now). A broker that runs on
	// a clock of its own gives the store the same one.
	Now func() time.Time
}

// Store is the in-memory store. Create one with New.
type Store struct {
	opts   Options
	closed atomic.Bool

	msgs messageLog

	progMu sync.RWMutex
	groups map[string]map[string]*group // subject → group name → progress

	quarMu     sync.RWMutex
	quarantine map[string]store.QuarantineRecord

	auditMu sync.RWMutex
	audit   auditLog

	contractMu sync.RWMutex
	contracts  map[string]store.ContractRecord

	kvMu sync.RWMutex
	kv   map[string]map[string][]byte
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.Trimmer     = (*Store)(nil)
	_ store.SeqTrimmer  = (*Store)(nil)
	_ store.ByteTrimmer = (*Store)(nil)
	_ store.GroupPruner = (*Store)(nil)
)

// New returns an empty Store. A nil opts means the defaults; opts is copied
// and never changed.
func New(opts *Options) *Store {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.IdempotencyGrace < 0 {
		o.IdempotencyGrace = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{
		opts:       o,
		groups:     make(map[string]map[string]*group),
		quarantine: make(map[string]store.QuarantineRecord),
		contracts:  make(map[string]store.ContractRecord),
		kv:         make(map[string]map[string][]byte),
	}
	s.msgs.init(o.IdempotencyGrace)
	return s
}

// Close releases every record. It is idempotent; every later call of any
// other method returns store.ErrClosed. It closes the store even when ctx is
// done, and then returns ctx.Err().
func (s *Store) Close(ctx context.Context) error {
	if !s.closed.Swap(true) {
		s.release()
		s.msgs.spares.running.Wait() // a chunk being prepared (spare.go) is dropped once made
	}
	return ctx.Err()
}

// release drops every record. Each method checks closed under its lock, so
// once release has taken a lock no method touches what it guards again.
func (s *Store) release() {
	s.msgs.mu.Lock()
	s.msgs.release()
	s.msgs.mu.Unlock()

	s.progMu.Lock()
	s.groups = nil
	s.progMu.Unlock()

	s.quarMu.Lock()
	s.quarantine = nil
	s.quarMu.Unlock()

	s.auditMu.Lock()
	s.audit = auditLog{}
	s.auditMu.Unlock()

	s.contractMu.Lock()
	s.contracts = nil
	s.contractMu.Unlock()

	s.kvMu.Lock()
	s.kv = nil
	s.kvMu.Unlock()
}

// checkClosed returns store.ErrClosed after Close. Call it with the lock of
// the records about to be used held.
func (s *Store) checkClosed() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}
