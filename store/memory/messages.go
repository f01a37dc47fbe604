package memory

import (
	"context"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"pigeon/store"
)

// messageLog is every subject's log, the id index and the idempotency
// entries, under one lock: Append must check idempotency, assign the sequence
// and index the id in one step.
type messageLog struct {
	mu       sync.RWMutex
	subjects map[string]*subjectLog
	// logs are the subject logs by number, what a msgLoc names.
	logs []*subjectLog
	// ids maps a message id to the last message appended with it.
	ids  index
	idem idempotency
	// scopes are the scopes of the idempotency keys the logs hold.
	scopes keyScopes
	// hash is set by New and never changed (tests narrow its mask before
	// the first Append), so it is used without the lock.
	hash hasher
	// spares are the chunks the logs prepare beside the appends.
	spares spares
	// accepted is AppendAcceptedBatchTo's buffer for the records it hands
	// over, kept for the next batch (up to maxAcceptedBuf records).
	accepted []store.AuditRecord
	// seqs holds the decimal sequences of the acceptance records.
	seqs decimals
	// touched is what prefetch read, so that the reads stay.
	touched uint64
}

// maxAcceptedBuf is the most records messageLog.accepted keeps room for.
const maxAcceptedBuf = 1024

func (l *messageLog) init(grace time.Duration) {
	l.subjects = make(map[string]*subjectLog)
	l.ids = newIndex()
	l.idem.init(grace)
	l.scopes.init()
	l.hash = newHasher()
}

func (l *messageLog) release() {
	l.subjects = nil
	l.logs = nil
	l.ids = index{}
	l.idem = idempotency{}
	l.scopes = keyScopes{}
	l.accepted = nil
	l.seqs = decimals{}
}

// holdsID tells whether the message at loc, still in its log, has the id
// id.
func (l *messageLog) holdsID(loc msgLoc, id string) bool {
	c, j, ok := l.logs[loc.log].get(loc.seq)
	return ok && string(c.id(j)) == id
}

// subject returns the log of subject, made on first use.
func (l *messageLog) subject(subject string) *subjectLog {
	sl := l.subjects[subject]
	if sl == nil {
		sl = &subjectLog{name: subject, num: uint32(len(l.logs)), first: 1, scopes: &l.scopes}
		l.subjects[subject] = sl
		l.logs = append(l.logs, sl)
	}
	return sl
}

// unindexID removes the id of message j of c, sequence seq of sl, from the
// index when the index names that message for it.
func (l *messageLog) unindexID(sl *subjectLog, c *chunk, j int, seq uint64) {
	id := c.id(j)
	if len(id) == 0 {
		return
	}
	loc := msgLoc{log: sl.num, seq: seq}
	if !l.ids.dropHashed(l.hash.bytes(id), loc) && len(l.ids.overflow) > 0 {
		l.ids.dropString(string(id), loc)
	}
}

// Append assigns the next sequence of m.Subject and stores a copy of m; see
// store.MessageLog. The idempotency key is global to the store (the broker
// scopes it). A stored message is returned as m with its Seq, the caller's
// own Body and times included; when dup is true the original is returned as
// a copy, its times in UTC (see Times in the package doc). When two
// messages share an ID, Lookup finds the later one.
func (s *Store) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	return s.append(ctx, m, nil, nil)
}

// AppendAcceptedTo is Append, and when m is stored (not a duplicate, not
// refused) it hands q the audit record of its acceptance, accepted with
// Subject and MessageID set to m's and Seqs to its sequence in decimal
// (as store.AcceptAppender keeps it), before any reader of the store can
// see m: whatever q does with the record comes before anything done by a
// reader that is handed m. The broker queues the record for its audit
// log there, so that no record of the message's delivery (made by a
// reader) precedes its acceptance in the chain. q is called under the
// lock of every append: it must be brief and must not call the store.
func (s *Store) AppendAcceptedTo(ctx context.Context, m store.Message, accepted store.AuditRecord, q interface{ QueueAudit(store.AuditRecord) }) (store.Message, bool, error) {
	return s.append(ctx, m, &accepted, q)
}

// append is Append, handing q the acceptance record acc once m is stored
// when q is not nil (AppendAcceptedTo).
func (s *Store) append(ctx context.Context, m store.Message, acc *store.AuditRecord, q interface{ QueueAudit(store.AuditRecord) }) (store.Message, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Message{}, false, err
	}
	l := &s.msgs
	idHash, keyHash := l.hashes(&m) // hashed before locking: the lock is all appends'
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.checkClosed(); err != nil {
		return store.Message{}, false, err
	}
	if orig, dup := l.appendLocked(&m, idHash, keyHash); dup {
		return orig, true, nil
	}
	if q != nil {
		acc.Subject, acc.MessageID, acc.Seqs = m.Subject, m.ID, l.seqs.format(m.Seq)
		q.QueueAudit(*acc)
	}
	return m, false, nil
}

// AppendAcceptedBatchTo is AppendAcceptedTo for each of ms in order,
// accepted[i] being the acceptance record of ms[i], under one lock: a
// message's sequence is below the next one's on its subject, and a message
// whose idempotency key an earlier one of the batch claimed is a duplicate
// of it. It stops after the first duplicate and returns the outcomes of
// the messages it took, ms[:len(result)], so that the caller answers that
// duplicate before it appends the rest; on error (the context done, the
// store closed) it takes every message and refuses each. The records of
// the stored messages, completed as AppendAcceptedTo completes them, are
// handed to q in one call before any reader of the store can see those
// messages; the caller's accepted is not changed. q is called under the
// lock of every append: it must be brief, must not call the store, and
// must copy the records, whose slice the store reuses. The outcomes are
// appended to dst[:0] (a caller's buffer, reused: nil is fine).
func (s *Store) AppendAcceptedBatchTo(ctx context.Context, dst []store.Appended, ms []store.Message, accepted []store.AuditRecord, q interface{ QueueAudits([]store.AuditRecord) }) []store.Appended {
	out := append(dst[:0], make([]store.Appended, len(ms))...)
	fail := func(err error) []store.Appended {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	l := &s.msgs
	var small [2 * 64]uint64
	hs := small[:0]
	if 2*len(ms) > len(small) {
		hs = make([]uint64, 0, 2*len(ms))
	}
	for i := range ms { // hashed before locking, as append does
		id, key := l.hashes(&ms[i])
		hs = append(hs, id, key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.checkClosed(); err != nil {
		return fail(err)
	}
	for i := range ms { // every slot's cache miss at once, not one message's at a time
		l.prefetch(&ms[i], hs[2*i], hs[2*i+1])
	}
	recs := l.accepted[:0]
	n := len(ms)
	for i := range ms {
		m := ms[i]
		if orig, dup := l.appendLocked(&m, hs[2*i], hs[2*i+1]); dup {
			out[i] = store.Appended{Stored: orig, Dup: true}
			n = i + 1
			break
		}
		out[i].Stored = m
		acc := accepted[i]
		acc.Subject, acc.MessageID, acc.Seqs = m.Subject, m.ID, l.seqs.format(m.Seq)
		recs = append(recs, acc)
	}
	if len(recs) > 0 {
		q.QueueAudits(recs)
	}
	clear(recs) // q copied them: hold none of their strings
	if cap(recs) <= maxAcceptedBuf {
		l.accepted = recs[:0]
	}
	return out[:n]
}

// hashes returns the hashes of m's id and idempotency key, 0 for either
// that is empty.
func (l *messageLog) hashes(m *store.Message) (idHash, keyHash uint64) {
	if m.ID != "" {
		idHash = l.hash.string(m.ID)
	}
	if m.IdemKey != "" {
		keyHash = l.hash.string(m.IdemKey)
	}
	return idHash, keyHash
}

// prefetch reads the index slots where m's id and key go, one right after
// the other, so that the lookups and inserts that follow find them in
// cache. In a large index each is a cache miss; issued together, the two
// take about the time of one. (The id's slot read alone before the key's
// lookup, a few calls later, cost a whole miss of its own.)
func (l *messageLog) prefetch(m *store.Message, idHash, keyHash uint64) {
	var t uint64
	if m.ID != "" {
		t = l.ids.byHash.Touch(idHash)
	}
	if m.IdemKey != "" {
		t ^= l.idem.keys.byHash.Touch(keyHash)
	}
	l.touched ^= t
}

// appendLocked is the step of Append under the lock: it returns the
// original when m's idempotency key is claimed (dup), and otherwise
// stores m, setting its Seq. idHash and keyHash are hashes's.
func (l *messageLog) appendLocked(m *store.Message, idHash, keyHash uint64) (orig store.Message, dup bool) {
	now := stampOf(m.Time)
	l.prefetch(m, idHash, keyHash)
	if m.IdemKey != "" {
		if orig, ok := l.claim(keyHash, m.IdemKey, now); ok {
			return orig, true
		}
	}
	sl := l.subject(m.Subject)
	m.Seq = sl.last() + 1
	sl.push(m, &l.spares)
	loc := msgLoc{log: sl.num, seq: m.Seq}
	if m.ID != "" {
		l.ids.put(idHash, m.ID, loc, l.holdsID)
		l.ids.prepare(&l.spares.running)
	}
	l.addClaim(m, keyHash, loc, now)
	return store.Message{}, false
}

// Read returns copies of up to max messages of subject with Seq >= from, in
// order; max <= 0 means no limit, and from 0 reads from the first retained
// message. An unknown subject, or from beyond the last message, gives none.
// Times are in UTC; an empty Body is nil.
func (s *Store) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	l, unlock, err := s.readMsgs(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	sl := l.subjects[subject]
	if sl == nil {
		return nil, nil
	}
	return sl.window(from, max), nil
}

// Lookup returns a copy of the retained message with the given id, or
// store.ErrNotFound. Times are in UTC; an empty Body is nil.
func (s *Store) Lookup(ctx context.Context, id string) (store.Message, error) {
	if err := ctx.Err(); err != nil {
		return store.Message{}, err
	}
	l := &s.msgs
	h := l.hash.string(id)
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := s.checkClosed(); err != nil {
		return store.Message{}, err
	}
	if id == "" {
		return store.Message{}, store.ErrNotFound
	}
	loc, ok := l.ids.get(h, id, l.holdsID)
	if !ok {
		return store.Message{}, store.ErrNotFound
	}
	sl := l.logs[loc.log]
	c, j, _ := sl.get(loc.seq) // the index holds retained messages only
	return sl.message(c, j, loc.seq, id, ""), nil
}

// Bounds returns the first and last sequence retained for subject; see
// store.MessageLog.
func (s *Store) Bounds(ctx context.Context, subject string) (first, last uint64, err error) {
	l, unlock, err := s.readMsgs(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	sl := l.subjects[subject]
	if sl == nil {
		return 0, 0, nil
	}
	return sl.first, sl.last(), nil
}

// TrimBefore removes messages of subject with Time before t from the front
// of the log, stopping at the first message at or after t, and returns how
// many it removed. Sequences are never reused: the next Append continues
// after the last message ever appended. A removed message's idempotency
// entry still deduplicates until it expires.
func (s *Store) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	before := stampOf(t)
	return s.trimFront(ctx, subject, func(sl *subjectLog) int {
		k := 0
		for ; k < sl.n; k++ {
			if c, j := sl.at(k); !c.hdrs[j].time().before(before) {
				break
			}
		}
		return k
	})
}

// TrimThrough implements store.SeqTrimmer: it removes messages of subject
// with Seq <= seq from the front of the log, as TrimBefore does, and
// returns how many it removed.
func (s *Store) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	return s.trimFront(ctx, subject, func(sl *subjectLog) int {
		if seq < sl.first {
			return 0
		}
		return int(min(seq-sl.first+1, uint64(sl.n)))
	})
}

// ListMessageSubjects implements store.MessageSubjectLister: the
// subjects whose logs hold a message, under the log's read lock.
func (s *Store) ListMessageSubjects(ctx context.Context) ([]string, error) {
	l, unlock, err := s.readMsgs(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []string
	for name, sl := range l.subjects {
		if sl.n > 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

var _ store.MessageSubjectLister = (*Store)(nil)

// Bytes implements store.ByteTrimmer: the sum of the body lengths of
// subject's retained messages, which the log keeps as it appends and
// trims.
func (s *Store) Bytes(ctx context.Context, subject string) (uint64, error) {
	l, unlock, err := s.readMsgs(ctx)
	if err != nil {
		return 0, err
	}
	defer unlock()
	if sl := l.subjects[subject]; sl != nil {
		return sl.bytes, nil
	}
	return 0, nil
}

// TrimToBytes implements store.ByteTrimmer: it removes the oldest
// messages of subject, as TrimBefore does, until the bodies of those
// retained add up to at most max, and returns how many it removed.
func (s *Store) TrimToBytes(ctx context.Context, subject string, max uint64) (int, error) {
	return s.trimFront(ctx, subject, func(sl *subjectLog) int {
		held, k := sl.bytes, 0
		for ; k < sl.n && held > max; k++ {
			c, j := sl.at(k)
			held -= uint64(len(c.body(j)))
		}
		return k
	})
}

// trimFront removes the first count(sl) retained messages of subject,
// count called under the log's write lock, and returns how many it
// removed. Their ids leave the index; their idempotency claims stay
// until they expire.
func (s *Store) trimFront(ctx context.Context, subject string, count func(sl *subjectLog) int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l := &s.msgs
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := s.checkClosed(); err != nil {
		return 0, err
	}
	sl := l.subjects[subject]
	if sl == nil {
		return 0, nil
	}
	k := count(sl)
	sl.dropFront(k, func(c *chunk, j int, seq uint64) {
		l.keepClaim(sl, c, j, seq)
		l.unindexID(sl, c, j, seq)
	})
	return k, nil
}

// readMsgs read-locks the message log for a reader (unlock releases it),
// or fails when ctx has ended or the store is closed.
func (s *Store) readMsgs(ctx context.Context) (l *messageLog, unlock func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	l = &s.msgs
	l.mu.RLock()
	if err := s.checkClosed(); err != nil {
		l.mu.RUnlock()
		return nil, nil, err
	}
	return l, l.mu.RUnlock, nil
}

// IdempotencyEntries returns how many idempotency entries the store holds,
// expired ones not yet evicted included. It is 0 after Close.
func (s *Store) IdempotencyEntries() int {
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	return s.msgs.idem.keys.len()
}

// decimals writes numbers in decimal for the acceptance records, a few
// hundred into each buffer rather than one allocation each. A buffer is
// only ever appended to, never written where a string was handed out, so
// the strings stay as they were; one keeps its buffer alive, which is
// small.
type decimals struct{ buf []byte }

// decimalsBuf is the size of a decimals buffer.
const decimalsBuf = 4096

// format returns x in decimal.
func (d *decimals) format(x uint64) string {
	if cap(d.buf)-len(d.buf) < maxDecimal {
		d.buf = make([]byte, 0, decimalsBuf)
	}
	start := len(d.buf)
	d.buf = strconv.AppendUint(d.buf, x, 10)
	return unsafe.String(&d.buf[start], len(d.buf)-start)
}

// maxDecimal is the most digits a uint64 has.
const maxDecimal = 20
