package wal

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"sync"

	"pigeon/store"
)

// Kept copies: a message trimmed while its idempotency claim is live stays
// in memory (msgIndex.kept), so that a retry within the key's TTL is
// answered with the original. So that a restart does not forget them,
// the trim first writes the copies to their own log, kept/, and commits
// them (fsynced under SyncBatch and SyncAlways) before it truncates the
// subject's log: a crash in between leaves a copy whose original is still
// there, which Open recognises and drops, and never a trimmed message
// without its copy.
//
// Each entry is a kindKept record: the subject and the message's own
// kindMessage record (with its checksum). Open reads them after the
// subjects' logs and brings back those whose claims are live, within
// maxKeptBytes, as if they had just been trimmed.
//
// The log holds each copy until its claim expires. It is compacted after
// every trim (and on Open): the entries at its front that are no longer
// needed are truncated away, and when the dead bytes behind a live front
// exceed the live ones, the live entries are copied to the tail and
// everything before the copies is truncated. A crash during the copy
// leaves two copies of a message, and Open keeps the later. So the log
// holds at most about twice its live bytes, plus one segment.

// keptLog is the log of kept copies.
type keptLog struct {
	w     *logw
	mu    sync.Mutex // one write or compaction at a time; guards first and ents
	first uint64     // log index of ents[0]
	ents  []keptEnt  // one per entry of the log, in index order
}

// keptEnt is what the compaction needs to know of an entry.
type keptEnt struct {
	loc  uint64 // the message's location
	exp  int64  // its claim's expiry, unix nanoseconds
	size int64  // bytes on disk, framing included
	dead bool   // not needed even before its expiry (see loadKept)
}

// keptCompactMin is the fewest dead bytes, in segments, that make the
// compaction copy live entries forward: below it, the dead entries wait
// for the front to reach them.
const keptCompactMin = 1

// appendKept appends the kept-log record of m (whose Subject is set).
func appendKept(dst []byte, m *store.Message) []byte {
	e := appendEnc(dst, kindKept)
	e.str(m.Subject)
	e.b = appendMessage(e.b, m)
	e.finish()
	return e.b
}

// decodeKept decodes a kindKept record; the message record inside must
// pass its own checksum.
func decodeKept(p []byte) (store.Message, error) {
	if len(p) < recHeader || p[4] != kindKept {
		return store.Message{}, errors.New("not a kept message record")
	}
	d := newDec(p)
	subject := d.str()
	if d.err != nil {
		return store.Message{}, d.err
	}
	inner := d.b
	if kind, ok := checkRecord(inner); !ok || kind != kindMessage {
		return store.Message{}, errors.New("kept message record fails its checksum")
	}
	return decodeMessage(inner, subject)
}

func (s *Store) keptDir() string { return filepath.Join(s.dir, "kept") }

// keptCand is a kept copy Open read.
type keptCand struct {
	idx uint64
	m   store.Message
	loc uint64
	exp int64
}

// loadKept opens the kept log and returns its copies that may be needed:
// of those with the same location (a crash during a compaction's copy),
// the last; not those whose original is still in its subject's log (a
// crash before the trim truncated it) or whose subject is gone. It raises
// the clock to their times, as the messages were seen. The subjects must
// be loaded; the caller decides which copies are live (useKept).
func (s *Store) loadKept() ([]keptCand, error) {
	k := &s.kept
	var cands []keptCand
	byLoc := map[uint64]int{} // location → index in cands
	x := &s.msgs.idx
	w, _, err := s.openLog(s.keptDir(), "kept", func(index uint64, _ string, _ int64, rec []byte) error {
		m, err := decodeKept(rec)
		if err != nil {
			return err
		}
		e := keptEnt{exp: unixNano(m.IdemExpires), size: framedSize(len(rec)), dead: true}
		sub := s.msgs.byName[m.Subject]
		if sub != nil && m.Seq < sub.w.first.Load() && m.IdemKey != "" {
			e.loc, e.dead = pack(sub.num, m.Seq), false
			if i, ok := byLoc[e.loc]; ok {
				k.ents[cands[i].idx-k.first].dead = true
				cands[i].m.Body = nil
			}
			byLoc[e.loc] = len(cands)
			cands = append(cands, keptCand{idx: index, m: m, loc: e.loc, exp: e.exp})
		}
		if len(k.ents) == 0 {
			k.first = index
		}
		k.ents = append(k.ents, e)
		x.clock = max(x.clock, unixNano(m.Time))
		return nil
	})
	if err != nil {
		return nil, err
	}
	k.w = w
	if len(k.ents) == 0 {
		k.first = w.first.Load()
	}
	live := cands[:0]
	for _, c := range cands {
		if !k.ents[c.idx-k.first].dead {
			live = append(live, c)
		}
	}
	return live, nil
}

// useKept puts the copies whose keys' claims won (live holds them) back
// in x.kept, oldest first, within maxKeptBytes; a copy beyond the budget
// loses its claim. Every other copy is marked dead. Called by Open.
func (s *Store) useKept(cands []keptCand, live map[string]idemSlot) {
	k := &s.kept
	x := &s.msgs.idx
	for _, c := range cands {
		e := &k.ents[c.idx-k.first]
		if l, ok := live[c.m.IdemKey]; !ok || l.loc != c.loc {
			e.dead = true
			continue
		}
		if x.keptBytes+len(c.m.Body) > maxKeptBytes {
			delete(live, c.m.IdemKey)
			e.dead = true
			continue
		}
		if x.kept == nil {
			x.kept = make(map[uint64]store.Message)
		}
		x.kept[c.loc] = c.m
		x.keptBytes += len(c.m.Body)
	}
}

// keep makes the copies of ms, messages of sub about to be trimmed with
// live claims, kept: in memory those within maxKeptBytes, and durably in
// the kept log. It returns once the copies are committed, before the trim
// truncates; a copy is answered from memory only when its original is
// not found, so keeping it early is harmless. When the write fails, the
// copies are dropped again and the trim must not truncate.
func (s *Store) keep(sub *subject, ms []store.Message) error {
	x := &s.msgs.idx
	x.mu.Lock()
	in := ms[:0]
	for _, m := range ms {
		loc := pack(sub.num, m.Seq)
		if _, ok := x.kept[loc]; !ok { // kept already when an earlier trim failed
			if x.keptBytes+len(m.Body) > maxKeptBytes {
				continue // over the budget: the claim goes with the message
			}
			if x.kept == nil {
				x.kept = make(map[uint64]store.Message)
			}
			x.kept[loc] = m
			x.keptBytes += len(m.Body)
		}
		in = append(in, m)
	}
	x.mu.Unlock()
	if len(in) == 0 {
		return nil
	}
	err := s.kept.write(sub, in)
	if err != nil {
		x.mu.Lock()
		for _, m := range in {
			loc := pack(sub.num, m.Seq)
			if k, ok := x.kept[loc]; ok {
				x.keptBytes -= len(k.Body)
				delete(x.kept, loc)
			}
		}
		x.mu.Unlock()
	}
	return err
}

// write appends the copies of ms, messages of sub, and waits for them to
// be committed.
func (k *keptLog) write(sub *subject, ms []store.Message) error {
	buf := getRecBuf()
	defer buf.put()
	offs := make([]int, 0, len(ms)+1)
	for i := range ms {
		offs = append(offs, len(buf.b))
		m := ms[i]
		m.Subject = sub.name
		buf.b = appendKept(buf.b, &m)
	}
	offs = append(offs, len(buf.b))
	r := &wreq{data: make([][]byte, len(ms))}
	for i := range ms {
		r.data[i] = buf.b[offs[i]:offs[i+1]]
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.w.submit(r); err != nil {
		return err
	}
	k.appendEntsLocked(r, func(i int) (uint64, int64) {
		return pack(sub.num, ms[i].Seq), unixNano(ms[i].IdemExpires)
	})
	return nil
}

// appendEntsLocked records the entries of r, committed; mu held.
func (k *keptLog) appendEntsLocked(r *wreq, at func(i int) (loc uint64, exp int64)) {
	if len(k.ents) == 0 {
		k.first = r.first
	}
	for i, d := range r.data {
		loc, exp := at(i)
		k.ents = append(k.ents, keptEnt{loc: loc, exp: exp, size: framedSize(len(d))})
	}
}

// compactKept drops from the kept log the copies that are no longer
// needed: those whose claims have expired by the index's clock (from
// memory too), and those marked dead. It truncates the front up to the
// first live copy and, when more bytes behind it are dead than live (and
// at least keptCompactMin segments), first copies the live ones to the
// tail so that everything before them can go.
func (s *Store) compactKept() error {
	k := &s.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	x := &s.msgs.idx
	x.mu.Lock()
	clock := x.clock
	x.mu.Unlock()
	alive := func(e keptEnt) bool { return !e.dead && e.exp > clock }
	n := 0
	for n < len(k.ents) && !alive(k.ents[n]) {
		n++
	}
	var live, dead int64
	for _, e := range k.ents[n:] {
		if alive(e) {
			live += e.size
		} else {
			dead += e.size
		}
	}
	if dead > live && dead >= keptCompactMin*int64(s.opts.SegmentSize) {
		moved, err := k.copyForwardLocked(k.ents[n:], alive)
		if err != nil {
			return err
		}
		n += moved
	}
	if n == 0 {
		return nil
	}
	cut := k.first + uint64(n)
	if err := k.w.truncateFront(cut); err != nil {
		return err
	}
	// The expired copies leave memory too, and with them their claims,
	// rather than wait for the index's sweep: they take the budget.
	x.mu.Lock()
	for _, e := range k.ents[:n] {
		if e.dead || e.exp > clock {
			continue
		}
		if m, ok := x.kept[e.loc]; ok && unixNano(m.IdemExpires) <= clock {
			x.keptBytes -= len(m.Body)
			delete(x.kept, e.loc)
			x.unclaim(m.IdemKey, e.loc)
		}
	}
	x.mu.Unlock()
	k.ents = slices.Clone(k.ents[n:])
	k.first = cut
	return nil
}

// copyForwardLocked appends a copy of every live entry of ents (the tail
// of k.ents), the last of each location only, and returns how many
// entries of ents the copies replace (all of them). mu held.
func (k *keptLog) copyForwardLocked(ents []keptEnt, alive func(keptEnt) bool) (int, error) {
	from := k.first + uint64(len(k.ents)-len(ents))
	seen := map[uint64]bool{}
	var keep []int // indexes into ents, ascending
	for i := len(ents) - 1; i >= 0; i-- {
		if e := ents[i]; alive(e) && !seen[e.loc] {
			seen[e.loc] = true
			keep = append(keep, i)
		}
	}
	slices.Reverse(keep)
	n := len(ents)
	const batchBytes = 1 << 20
	for len(keep) > 0 {
		r := &wreq{}
		var metas []keptEnt
		size := 0
		for len(keep) > 0 && (size == 0 || size < batchBytes) {
			i := keep[0]
			keep = keep[1:]
			p, err := k.w.read(from + uint64(i))
			if err != nil {
				return 0, err
			}
			r.data = append(r.data, bytes.Clone(p))
			metas = append(metas, ents[i])
			size += len(p)
		}
		if err := k.w.submit(r); err != nil {
			return 0, err
		}
		k.appendEntsLocked(r, func(i int) (uint64, int64) { return metas[i].loc, metas[i].exp })
	}
	return n, nil
}
