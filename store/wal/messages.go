package wal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/internal/hashtab"
	"pigeon/store"
)

// Messages: one tidwall/wal log per subject, entry index == sequence.
// Only an index is kept in memory (see msgIndex); bodies are read from disk.

// A location packs a subject number and a sequence into 64 bits.
const seqBits = 40

func pack(num uint32, seq uint64) uint64 { return uint64(num)<<seqBits | seq }
func unpack(loc uint64) (uint32, uint64) { return uint32(loc >> seqBits), loc & (1<<seqBits - 1) }

type subject struct {
	name   string
	num    uint32
	w      *logw
	trimMu sync.Mutex // one TrimBefore at a time
	track  acceptTrack
	// bytes is the sum of the body lengths of the committed messages
	// retained (store.ByteTrimmer): counted by Open's scan, raised as
	// each write commits and lowered by each trim.
	bytes atomic.Uint64
}

type messages struct {
	mu     sync.RWMutex
	byName map[string]*subject
	list   []*subject // by num
	idx    msgIndex
}

// msgIndex is everything Open rebuilds about messages. The id index maps
// a seeded 64-bit hash of the id to the location (idTable, about 20-30
// bytes a message whatever the id's length); a hit is confirmed against
// the record read from disk.
//
// The idempotency index likewise maps the hash of a key to the claiming
// message's location and the claim's expiry (24 bytes a live key, no
// pointers: a string-keyed map cost two or three cache misses a lookup
// once it held a few hundred thousand keys). A claim whose record is not
// yet committed also has its request in pending, by location, and is
// confirmed against the request's key; a committed one is confirmed
// against the record when a duplicate reads it, and a claim that turns out
// to be another key's is skipped (Append retries past it). Keys are kept
// only while live.
type msgIndex struct {
	mu      sync.Mutex
	seed    maphash.Seed
	ids     idTable
	idem    hashtab.Table[idemSlot]
	pending map[uint64]*wreq // location → request, for claims not yet committed
	// kept holds the messages trimmed while their idempotency claims were
	// live, by location, so that a retry within the key's TTL is still
	// answered with the original; a claim's expiry drops it (sweepLocked,
	// or compactKept when the copy leaves the kept log). Up to
	// maxKeptBytes of bodies (keptBytes); beyond the budget a trimmed
	// message's claim goes with it. Each copy is also in the kept log
	// (kept.go), written before the trim truncates, from which Open
	// brings back those still live: a restart forgets none.
	kept      map[uint64]store.Message
	keptBytes int
	clock     int64 // latest message time seen, unix nanoseconds
	sweepAt   int
	hashFn    func(seed maphash.Seed, s string) uint64 // indexHash when opened
}

// maxKeptBytes bounds the bodies of trimmed messages kept for their live
// idempotency keys (msgIndex.kept, and so the live copies of the kept log).
var maxKeptBytes = 64 << 20 // a variable for tests

// indexHash hashes ids and idempotency keys. Tests replace it, before Open,
// to force collisions.
var indexHash = maphash.String

// idemSlot is one claim of an idempotency key.
type idemSlot struct {
	loc uint64
	exp int64 // unix nanoseconds
}

// idemEnt is a claim found for a key: its slot and, while the record is
// not committed, its request.
type idemEnt struct {
	idemSlot
	req *wreq
}

func (x *msgIndex) init() {
	x.seed = maphash.MakeSeed()
	x.idem = hashtab.Table[idemSlot]{}
	x.pending = make(map[uint64]*wreq)
	x.sweepAt = 1024
	x.hashFn = indexHash
}

func (x *msgIndex) hash(id string) uint64 { return x.hashFn(x.seed, id) }

// findClaim returns the live claim of key at time at (unix nanoseconds),
// passing over the locations in skip; mu held. A committed claim is not
// confirmed here: the caller reads its record and compares the key.
func (x *msgIndex) findClaim(key string, at int64, skip []uint64) (idemEnt, bool) {
	var e idemEnt
	i := x.idem.Lookup(x.hash(key), func(v *idemSlot) bool {
		if at >= v.exp || slices.Contains(skip, v.loc) {
			return false
		}
		r := x.pending[v.loc]
		if r != nil && r.key != key {
			return false // another key with the same hash
		}
		e = idemEnt{*v, r}
		return true
	})
	return e, i >= 0
}

// claim records that the message at loc, written by r (nil when already
// committed), holds key until exp; mu held.
func (x *msgIndex) claim(key string, loc uint64, exp int64, r *wreq) {
	x.idem.Insert(x.hash(key), idemSlot{loc: loc, exp: exp})
	if r != nil {
		x.pending[loc] = r
	}
}

// unclaim forgets key's claim by the message at loc, if any; mu held.
func (x *msgIndex) unclaim(key string, loc uint64) {
	delete(x.pending, loc)
	if i := x.idem.Lookup(x.hash(key), func(v *idemSlot) bool { return v.loc == loc }); i >= 0 {
		x.idem.RemoveAt(i)
	}
}

// addID records id at loc; mu held.
func (x *msgIndex) addID(id string, loc uint64) { x.ids.Insert(x.hash(id), loc) }

// removeID forgets id at loc; mu held.
func (x *msgIndex) removeID(id string, loc uint64) { x.ids.remove(x.hash(id), loc) }

// findID returns the candidate locations of id, latest first.
func (x *msgIndex) findID(id string) []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	locs := x.ids.find(x.hash(id))
	slices.Reverse(locs)
	return locs
}

// sweepLocked drops expired claims once the index has doubled.
func (x *msgIndex) sweepLocked() {
	if x.idem.Len() < x.sweepAt {
		return
	}
	x.idem.KeepOnly(func(v *idemSlot) bool {
		if v.exp > x.clock || x.pending[v.loc] != nil {
			return true
		}
		if k, ok := x.kept[v.loc]; ok {
			x.keptBytes -= len(k.Body)
			delete(x.kept, v.loc)
		}
		return false
	})
	x.sweepAt = max(1024, 2*x.idem.Len())
}

// subjectDir names the directory of a subject: the name with bytes other
// than [A-Za-z0-9_-] (and a leading '.') escaped as %XX, or, for names
// that would escape to more than 200 bytes, '#' and a hash. The SUBJECT
// file inside holds the real name.
func subjectDir(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if b.Len() > 200 {
		sum := sha256.Sum256([]byte(name))
		return "#" + hex.EncodeToString(sum[:16])
	}
	return b.String()
}

func (s *Store) messagesDir() string { return filepath.Join(s.dir, "messages") }

// subjectScan is what scanning one subject's log found.
type subjectScan struct {
	dir, name string
	w         *logw
	ids       []idSlot // hash, location
	idem      map[string]idemSlot
	clock     int64
	bytes     uint64 // the bodies' lengths, summed
	floor     int64  // highest floor of a kindAccepted record; -1: none seen
	err       error
}

// loadMessages opens every subject's log and rebuilds the indexes. It
// returns, per subject number, the highest floor of its kindAccepted
// records (-1 when it has none), for recoverAccepted.
func (s *Store) loadMessages() ([]int64, error) {
	s.msgs.byName = make(map[string]*subject)
	s.msgs.idx.init()
	root := s.messagesDir()
	if err := os.MkdirAll(root, 0o750); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", root, err)
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("wal: read %s: %w", root, err)
	}
	var scans []*subjectScan
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		name, err := readSubjectFile(dir, s.opts.MaxRecordSize)
		if errors.Is(err, os.ErrNotExist) {
			// A crash while the subject was being created: the name is
			// written before any message, so there is nothing to lose.
			if segs, _ := listSegments(dir); len(segs) == 0 || emptySegments(segs) {
				if err := os.RemoveAll(dir); err != nil {
					return nil, fmt.Errorf("wal: remove unfinished %s: %w", dir, err)
				}
				continue
			}
			return nil, &store.CorruptError{File: filepath.Join(dir, "SUBJECT"), Offset: 0, Reason: "missing subject name"}
		}
		if err != nil {
			return nil, err
		}
		if subjectDir(name) != e.Name() {
			return nil, &store.CorruptError{File: filepath.Join(dir, "SUBJECT"), Offset: 0,
				Reason: fmt.Sprintf("subject %q does not belong in directory %s", name, e.Name())}
		}
		scans = append(scans, &subjectScan{dir: dir, name: name, floor: -1})
	}

	// Scan the subjects in parallel; merge in directory order.
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(scans)) {
		wg.Go(func() {
			for i := range work {
				s.scanSubject(uint32(i), scans[i])
			}
		})
	}
	for i := range scans {
		work <- i
	}
	close(work)
	wg.Wait()
	x := &s.msgs.idx
	var firstErr error
	for _, sc := range scans {
		if sc.w != nil {
			s.addSubject(sc.name, sc.w).bytes.Store(sc.bytes) // so that Open's error path closes it
		}
		if sc.err != nil && firstErr == nil {
			firstErr = sc.err
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	total := 0
	for _, sc := range scans {
		total += len(sc.ids)
	}
	x.ids.Reserve(total)
	for _, sc := range scans {
		for _, id := range sc.ids {
			x.ids.Insert(id.h, id.loc)
		}
		sc.ids = nil
		x.clock = max(x.clock, sc.clock)
	}
	kept, err := s.loadKept()
	if err != nil {
		return nil, err
	}
	// A key claimed on several subjects, or by a kept copy, counts with
	// its latest claim.
	live := make(map[string]idemSlot)
	for _, sc := range scans {
		for k, e := range sc.idem {
			if old, ok := live[k]; e.exp > x.clock && (!ok || e.exp > old.exp) {
				live[k] = e
			}
		}
		sc.idem = nil
	}
	for _, c := range kept {
		if old, ok := live[c.m.IdemKey]; c.exp > x.clock && (!ok || c.exp > old.exp) {
			live[c.m.IdemKey] = idemSlot{loc: c.loc, exp: c.exp}
		}
	}
	s.useKept(kept, live)
	x.idem.Reserve(len(live))
	for k, e := range live {
		x.claim(k, e.loc, e.exp, nil)
	}
	x.sweepAt = max(1024, 2*x.idem.Len())
	floors := make([]int64, len(scans))
	for i, sc := range scans {
		floors[i] = sc.floor
	}
	return floors, nil
}

// scanSubject opens one subject's log, collecting its index entries.
func (s *Store) scanSubject(num uint32, sc *subjectScan) {
	x := &s.msgs.idx
	sc.idem = make(map[string]idemSlot)
	visit := func(index uint64, _ string, _ int64, rec []byte) error {
		h, err := decodeMessageHead(rec)
		if err != nil {
			return err
		}
		if h.seq != index {
			return fmt.Errorf("message seq %d stored at index %d", h.seq, index)
		}
		loc := pack(num, index)
		sc.ids = append(sc.ids, idSlot{h: x.hash(h.id), loc: loc})
		if h.idemKey != "" {
			exp := unixNano(h.idemExp)
			if exp > sc.clock { // an entry expired before this point never matters again
				if old, ok := sc.idem[h.idemKey]; !ok || exp > old.exp {
					sc.idem[h.idemKey] = idemSlot{loc: loc, exp: exp}
				}
			}
		}
		sc.clock = max(sc.clock, unixNano(h.time))
		sc.bytes += uint64(h.body)
		if h.accepted {
			sc.floor = max(sc.floor, int64(h.floor))
		}
		return nil
	}
	sc.w, _, sc.err = s.openLog(sc.dir, "subject "+sc.name, visit)
}

func emptySegments(segs []segFile) bool {
	for _, sg := range segs {
		if fi, err := os.Stat(sg.path); err != nil || fi.Size() > 0 {
			return false
		}
	}
	return true
}

func readSubjectFile(dir string, maxRecord int) (string, error) {
	path := filepath.Join(dir, "SUBJECT")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	var name string
	n := 0
	err := readFramedFile(path, maxRecord, func(off int64, rec []byte) error {
		if rec[4] != kindSubject || n > 0 {
			return errors.New("not a subject record")
		}
		n++
		d := newDec(rec)
		name = d.str()
		return d.done()
	})
	if err == nil && n == 0 {
		err = &store.CorruptError{File: path, Offset: 0, Reason: "empty subject file"}
	}
	return name, err
}

func (s *Store) addSubject(name string, w *logw) *subject {
	sub := &subject{name: name, num: uint32(len(s.msgs.list)), w: w}
	x := &s.msgs.idx
	w.onCommit = func(r *wreq) {
		r.freeBuf()
		sub.bytes.Add(uint64(r.body))
		if acc, ok := r.aux.(*store.AuditRecord); ok {
			s.out.put(*acc, r.loc)
		}
		if r.key == "" {
			return
		}
		x.mu.Lock()
		delete(x.pending, r.loc)
		x.mu.Unlock()
	}
	w.onFail = func(r *wreq) {
		r.freeBuf()
		if r.aux != nil {
			_, seq := unpack(r.loc)
			sub.track.failed(seq)
		}
		x.mu.Lock()
		x.removeID(r.id, r.loc)
		if r.key != "" {
			x.unclaim(r.key, r.loc)
		}
		x.mu.Unlock()
	}
	s.msgs.byName[name] = sub
	s.msgs.list = append(s.msgs.list, sub)
	return sub
}

// subject returns the subject's log, creating it when create is set.
func (s *Store) subject(name string, create bool) (*subject, error) {
	s.msgs.mu.RLock()
	sub := s.msgs.byName[name]
	s.msgs.mu.RUnlock()
	if sub != nil || !create {
		return sub, nil
	}
	s.msgs.mu.Lock()
	defer s.msgs.mu.Unlock()
	if sub := s.msgs.byName[name]; sub != nil {
		return sub, nil
	}
	if len(s.msgs.list) >= 1<<(64-seqBits) {
		return nil, errors.New("wal: too many subjects")
	}
	dir := filepath.Join(s.messagesDir(), subjectDir(name))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("wal: create subject %q: %w", name, err)
	}
	e := newEnc(kindSubject, len(name)+8)
	e.str(name)
	if err := writeFileAtomic(filepath.Join(dir, "SUBJECT"), frame(nil, e.finish())); err != nil {
		return nil, writeError("subject "+name, err)
	}
	if err := syncDir(s.messagesDir()); err != nil {
		return nil, writeError("subject "+name, err)
	}
	w, _, err := s.openLog(dir, "subject "+name, nil)
	if err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		w.close()
		return nil, writeError("subject "+name, err)
	}
	return s.addSubject(name, w), nil
}

func (s *Store) subjectByNum(num uint32) *subject {
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	if int(num) >= len(s.msgs.list) {
		return nil
	}
	return s.msgs.list[num]
}

// Append implements store.MessageLog. Under SyncBatch and SyncAlways a
// returned Append is durable; under SyncNone it survives a process crash
// only. The idempotency check and the write are one step: the key is
// reserved before the record is queued, and a duplicate of a record still
// being written waits for it.
func (s *Store) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	return s.append(ctx, m, nil)
}

// append is Append, keeping the acceptance record acc with the message
// when it is not nil (AppendAccepted).
func (s *Store) append(ctx context.Context, m store.Message, acc *store.AuditRecord) (store.Message, bool, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, false, err
	}
	defer s.leave()
	return s.appendLeft(m, acc)
}

// checkAppend refuses a message no log can take and returns its subject.
func (s *Store) checkAppend(m store.Message) (*subject, error) {
	if m.Subject == "" {
		return nil, errors.New("wal: append: empty subject")
	}
	if len(m.Body)+len(m.ID)+len(m.IdemKey)+64 > s.opts.MaxRecordSize {
		return nil, fmt.Errorf("wal: append: message of %d bytes exceeds MaxRecordSize", len(m.Body))
	}
	return s.subject(m.Subject, true)
}

// appendLeft is append once the store is entered.
func (s *Store) appendLeft(m store.Message, acc *store.AuditRecord) (store.Message, bool, error) {
	sub, err := s.checkAppend(m)
	if err != nil {
		return store.Message{}, false, err
	}
	var skip []uint64 // claims found to be other keys'
	for range 100 {
		stored, dup, retry, r, err := s.appendOnce(sub, m, acc, skip)
		if r != nil {
			sub.w.mu.Lock()
			if err = sub.w.awaitLocked(r); err != nil {
				return store.Message{}, false, err
			}
			return stored, false, nil
		}
		if !retry.again {
			return stored, dup, err
		}
		if retry.skip != 0 {
			skip = append(skip, retry.skip)
		}
	}
	return store.Message{}, false, fmt.Errorf("wal: append to %q: idempotency key %q kept changing", m.Subject, m.IdemKey)
}

// retry says whether appendOnce must be tried again, and which claim to
// pass over when it turned out to be another key's.
type retry struct {
	again bool
	skip  uint64
}

// appendOnce enqueues m's write and returns its request, which the caller
// awaits (sub.w.awaitLocked); for a duplicate, a retry or an error it
// returns no request.
func (s *Store) appendOnce(sub *subject, m store.Message, acc *store.AuditRecord, skip []uint64) (store.Message, bool, retry, *wreq, error) {
	w := sub.w
	x := &s.msgs.idx
	w.mu.Lock()
	if w.failed != nil {
		w.mu.Unlock()
		return store.Message{}, false, retry{}, nil, w.failed
	}
	seq := w.next
	if seq >= 1<<seqBits {
		w.mu.Unlock()
		return store.Message{}, false, retry{}, nil, fmt.Errorf("wal: subject %q is out of sequences", sub.name)
	}
	m.Seq = seq
	loc := pack(sub.num, seq)
	r := &wreq{id: m.ID, key: m.IdemKey, loc: loc, body: len(m.Body)}
	at := unixNano(m.Time)
	x.mu.Lock()
	if m.IdemKey != "" {
		if e, ok := x.findClaim(m.IdemKey, at, skip); ok {
			x.mu.Unlock()
			w.mu.Unlock()
			stored, dup, rt, err := s.duplicate(e, m.IdemKey)
			return stored, dup, rt, nil, err
		}
		x.claim(m.IdemKey, loc, unixNano(m.IdemExpires), r)
	}
	x.addID(m.ID, loc)
	x.clock = max(x.clock, at)
	x.sweepLocked()
	x.mu.Unlock()
	r.buf = getRecBuf()
	if acc != nil {
		// The acceptance names the message's sequence, as the broker's
		// own record does; the record encodes it from the message.
		acc.Seqs = strconv.FormatUint(seq, 10)
		r.aux = acc
		r.buf.b = appendAccepted(r.buf.b[:0], &m, acc, sub.track.floor(seq))
		sub.track.add(seq)
	} else {
		r.buf.b = appendMessage(r.buf.b[:0], &m)
	}
	r.one[0] = r.buf.b
	r.data = r.one[:]
	w.enqueueLocked(r)
	w.mu.Unlock()
	return m, false, retry{}, r, nil
}

// AppendAcceptedBatch implements store.BatchAppender: it enqueues the
// messages' writes in order, each as AppendAccepted would, and then waits
// for them, so that under group commit one write and one fsync cover the
// batch. A message whose idempotency key an earlier one of the batch
// holds waits for the ones before it first, and is then a duplicate of
// that one.
func (s *Store) AppendAcceptedBatch(ctx context.Context, ms []store.Message, accepted []store.AuditRecord) []store.Appended {
	out := make([]store.Appended, len(ms))
	if err := s.enter(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer s.leave()
	type inflight struct {
		i   int
		sub *subject
		r   *wreq
		m   store.Message
	}
	var (
		pend []inflight
		keys = map[string]bool{}
	)
	await := func() {
		for _, p := range pend {
			p.sub.w.mu.Lock()
			if err := p.sub.w.awaitLocked(p.r); err != nil {
				out[p.i].Err = err
			} else {
				out[p.i].Stored = p.m
			}
		}
		pend = pend[:0]
		clear(keys)
	}
	for i := range ms {
		m, acc := ms[i], accepted[i]
		if w := s.audit.w; w.unusable.Load() {
			w.mu.Lock()
			out[i].Err = w.failed
			w.mu.Unlock()
			continue
		}
		if m.IdemKey != "" && keys[m.Subject+"\x00"+m.IdemKey] {
			await()
		}
		acc.Subject, acc.MessageID = m.Subject, m.ID
		sub, err := s.checkAppend(m)
		if err != nil {
			out[i].Err = err
			continue
		}
		stored, dup, rt, r, err := s.appendOnce(sub, m, &acc, nil)
		switch {
		case r != nil:
			pend = append(pend, inflight{i, sub, r, stored})
			if m.IdemKey != "" {
				keys[m.Subject+"\x00"+m.IdemKey] = true
			}
		case rt.again:
			// The careful path: wait for what is in flight, then retry.
			await()
			out[i].Stored, out[i].Dup, out[i].Err = s.appendLeft(m, &acc)
		default:
			out[i] = store.Appended{Stored: stored, Dup: dup, Err: err}
		}
	}
	await()
	return out
}

// duplicate returns the original of an idempotent retry with key, waiting
// for it when it is still being written. It asks for a retry when the
// original went away meanwhile (its write failed, or retention removed
// it), and to skip the claim when the original holds another key (their
// hashes collide).
func (s *Store) duplicate(e idemEnt, key string) (store.Message, bool, retry, error) {
	num, seq := unpack(e.loc)
	sub := s.subjectByNum(num)
	if sub == nil {
		return store.Message{}, false, retry{again: true}, nil
	}
	if e.req != nil {
		sub.w.mu.Lock()
		err := sub.w.waitOtherLocked(e.req)
		sub.w.mu.Unlock()
		if err != nil {
			return store.Message{}, false, retry{again: true}, nil
		}
	}
	m, err := s.readMessage(sub, seq)
	if errors.Is(err, store.ErrNotFound) {
		x := &s.msgs.idx
		x.mu.Lock()
		k, ok := x.kept[e.loc]
		x.mu.Unlock()
		if !ok {
			return store.Message{}, false, retry{again: true}, nil
		}
		m, err = k, nil // trimmed while its claim was live
		m.Body = bytes.Clone(k.Body)
	}
	if err != nil {
		return store.Message{}, false, retry{}, err
	}
	if m.IdemKey != key {
		return store.Message{}, false, retry{again: true, skip: e.loc}, nil
	}
	return m, true, retry{}, nil
}

func (s *Store) readMessage(sub *subject, seq uint64) (store.Message, error) {
	first, last := sub.w.bounds()
	if seq < first || seq > last {
		return store.Message{}, store.ErrNotFound
	}
	p, err := sub.w.read(seq)
	if err != nil {
		return store.Message{}, err
	}
	return s.decodeMessageAt(sub, seq, p)
}

func (s *Store) decodeMessageAt(sub *subject, seq uint64, p []byte) (store.Message, error) {
	m, err := decodeMessage(p, sub.name)
	if err != nil || m.Seq != seq {
		return store.Message{}, &store.CorruptError{File: sub.w.dir, Offset: -1,
			Reason: fmt.Sprintf("entry %d is not message %d (%v)", seq, seq, err)}
	}
	return m, nil
}

// Read implements store.MessageLog.
func (s *Store) Read(ctx context.Context, subject string, from uint64, max int) ([]store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return nil, nil
	}
	if max <= 0 {
		max = math.MaxInt
	}
	w := sub.w
	first, last := w.bounds()
	from = maxU(from, first)
	if from > last {
		return nil, nil
	}
	out := make([]store.Message, 0, min(uint64(max), last-from+1, 1024))
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for seq := from; seq <= last && len(out) < max; seq++ {
		p, err := w.readLocked(seq)
		if errors.Is(err, store.ErrNotFound) && seq < w.first.Load() {
			seq = w.first.Load() - 1 // trimmed meanwhile
			continue
		}
		if err != nil {
			return nil, err
		}
		m, err := s.decodeMessageAt(sub, seq, p)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// Lookup implements store.MessageLog.
func (s *Store) Lookup(ctx context.Context, id string) (store.Message, error) {
	if err := s.enter(ctx); err != nil {
		return store.Message{}, err
	}
	defer s.leave()
	for _, loc := range s.msgs.idx.findID(id) {
		num, seq := unpack(loc)
		sub := s.subjectByNum(num)
		if sub == nil {
			continue
		}
		m, err := s.readMessage(sub, seq)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return store.Message{}, err
		}
		if m.ID == id {
			return m, nil
		}
	}
	return store.Message{}, store.ErrNotFound
}

// Bounds implements store.MessageLog.
func (s *Store) Bounds(ctx context.Context, subject string) (uint64, uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, 0, nil
	}
	first, last := sub.w.bounds()
	if last == 0 {
		return 0, 0, nil
	}
	return first, last, nil
}

// ListMessageSubjects implements store.MessageSubjectLister from the
// index in memory: the subjects whose logs hold a committed message; no
// disk read.
func (s *Store) ListMessageSubjects(ctx context.Context) ([]string, error) {
	if err := s.enter(ctx); err != nil {
		return nil, err
	}
	defer s.leave()
	s.msgs.mu.RLock()
	defer s.msgs.mu.RUnlock()
	var out []string
	for name, sub := range s.msgs.byName {
		if first, last := sub.w.bounds(); last != 0 && first <= last {
			out = append(out, name)
		}
	}
	return out, nil
}

var _ store.MessageSubjectLister = (*Store)(nil)

// trimChunk bounds how many messages one truncation removes, so that the
// ids to forget stay few and each truncation is short.
const trimChunk = 1 << 16

// TrimBefore implements store.Trimmer: it removes the messages of subject
// accepted before t from the front of the log. Appends to the subject wait
// only while tidwall/wal rewrites the segment holding the new first
// message (at most SegmentSize bytes); the scan that finds the cut does
// not block them. A removed message whose idempotency key is live is kept
// (durably, within maxKeptBytes) and still answers a retry until the key
// expires; the other keys of removed messages stop deduplicating.
func (s *Store) TrimBefore(ctx context.Context, subject string, t time.Time) (int, error) {
	return s.trimFront(ctx, subject, func(h msgHead) bool { return !h.time.Before(t) })
}

// TrimThrough implements store.SeqTrimmer: it removes the messages of
// subject with Seq <= seq from the front of the log, the way TrimBefore
// does.
func (s *Store) TrimThrough(ctx context.Context, subject string, seq uint64) (int, error) {
	return s.trimFront(ctx, subject, func(h msgHead) bool { return h.seq > seq })
}

// Bytes implements store.ByteTrimmer: the sum of the body lengths of
// subject's committed messages retained, which the index keeps; nothing
// is read from disk.
func (s *Store) Bytes(ctx context.Context, subject string) (uint64, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, nil
	}
	return sub.bytes.Load(), nil
}

// TrimToBytes implements store.ByteTrimmer: it removes the oldest
// messages of subject, the way TrimBefore does, until the bodies of those
// retained add up to at most max. The index's count says whether any
// must go and how many bytes; only the records that go are read.
func (s *Store) TrimToBytes(ctx context.Context, subject string, max uint64) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	sub, _ := s.subject(subject, false)
	s.leave()
	if sub == nil || sub.bytes.Load() <= max {
		return 0, nil
	}
	// What must go, as the count stands once the trim holds trimMu.
	var excess uint64
	counted := false
	return s.trimFront(ctx, subject, func(h msgHead) bool {
		if !counted {
			counted = true
			if held := sub.bytes.Load(); held > max {
				excess = held - max
			}
		}
		if excess == 0 {
			return true
		}
		excess -= min(excess, uint64(h.body))
		return false
	})
}

// trimFront removes messages of subject from the front of the log up to
// the first one whose head keep accepts, at most trimChunk per
// truncation, and forgets their ids and the idempotency claims it does
// not keep (see keep). It returns how many it removed, also when it fails
// part way. Then it compacts the kept log.
func (s *Store) trimFront(ctx context.Context, subject string, keep func(h msgHead) bool) (int, error) {
	if err := s.enter(ctx); err != nil {
		return 0, err
	}
	defer s.leave()
	sub, _ := s.subject(subject, false)
	if sub == nil {
		return 0, nil
	}
	sub.trimMu.Lock()
	defer sub.trimMu.Unlock()
	n, err := s.trimFrontLocked(sub, keep)
	if cerr := s.compactKept(); err == nil {
		err = cerr
	}
	return n, err
}

// trimFrontLocked is trimFront with sub.trimMu held.
func (s *Store) trimFrontLocked(sub *subject, keep func(h msgHead) bool) (int, error) {
	w := sub.w
	total := 0
	for {
		first, last := w.bounds()
		cut := first
		var heads []msgHead
		stop := false
		var kept []store.Message // trimmed with a live claim
		s.msgs.idx.mu.Lock()
		clock := s.msgs.idx.clock
		s.msgs.idx.mu.Unlock()
		for cut <= last && len(heads) < trimChunk {
			p, err := w.read(cut)
			if err != nil {
				return total, err
			}
			h, err := decodeMessageHead(p)
			if err != nil {
				return total, &store.CorruptError{File: w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d: %v", cut, err)}
			}
			if keep(h) {
				stop = true
				break
			}
			if h.idemKey != "" && unixNano(h.idemExp) > clock {
				m, err := s.decodeMessageAt(sub, cut, p)
				if err != nil {
					return total, err
				}
				m.Body = bytes.Clone(m.Body)
				kept = append(kept, m)
			}
			heads = append(heads, h)
			cut++
		}
		if cut == first {
			return total, nil
		}
		// The copies are durable before the originals go.
		if err := s.keep(sub, kept); err != nil {
			return total, err
		}
		if err := w.truncateFront(cut); err != nil {
			return total, err
		}
		var gone uint64
		for _, h := range heads {
			gone += uint64(h.body)
		}
		sub.bytes.Add(-gone)
		x := &s.msgs.idx
		x.mu.Lock()
		for _, h := range heads {
			loc := pack(sub.num, h.seq)
			x.removeID(h.id, loc)
			if _, ok := x.kept[loc]; h.idemKey != "" && !ok {
				x.unclaim(h.idemKey, loc) // not kept (over the budget, or expired)
			}
		}
		x.mu.Unlock()
		total += int(cut - first)
		if stop || cut > last {
			return total, nil
		}
	}
}

var _ store.BatchAppender = (*Store)(nil)
