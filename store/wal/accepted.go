package wal

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"pigeon/store"
)

// Accepted messages (store.AcceptAppender): a message and the audit record
// of its acceptance cost one durable write, the message's.
//
// AppendAccepted writes a kindAccepted record: the message and its
// acceptance record, unchained. Once the message's batch is written, and
// before its messages are visible to readers, the acceptance record goes
// to the outbox (message-log commit order; onWritten), and the outbox is
// chained into the audit log by the accept flusher, a background
// goroutine that lets records accumulate for acceptLinger so that one
// audit fsync covers many message batches; or at once by a reader of the
// audit log (ReadAudit, AuditHead), so that a reader never misses an
// acceptance that has returned; or by ChainAudit ahead of its own
// records, so that no record made after a message could be read (a
// record of its delivery) precedes its acceptance in the chain.
//
// A crash can lose the audit log's copy, never the record: recovery
// (acceptCandidates, foundAccepted, restoreAccepted) finds every
// kindAccepted message whose acceptance record is not in the audit log and
// chains it before Open returns. It need not look at every message: each
// kindAccepted record carries the subject's floor when it was queued, the
// highest sequence up to which every kindAccepted message of the subject
// had its acceptance record committed. The floor of a subject's last
// kindAccepted record, or the higher one audit retention kept in the
// checkpoint (acceptFloors), bounds what recovery reads: the messages
// after it, a few batches' worth.

// acceptLinger is how long the accept flusher lets acceptance records
// accumulate before it writes them (one audit fsync for all).
const acceptLinger = 10 * time.Millisecond

// acceptTrack is one subject's acceptance records not yet committed to the
// audit log, by message sequence: the floor a new record carries.
type acceptTrack struct {
	mu   sync.Mutex
	pend []uint64            // ascending: queued messages whose record is not committed
	done map[uint64]struct{} // of pend, committed but not yet dropped from its front
}

// floor returns the floor for a message queued at seq: every kindAccepted
// message below the lowest pending one is audited.
func (t *acceptTrack) floor(seq uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.floorLocked(seq)
}

// queue returns the floor for the message queued at seq, as floor does,
// and adds seq to the pending ones: one lock for both.
func (t *acceptTrack) queue(seq uint64) uint64 {
	t.mu.Lock()
	f := t.floorLocked(seq)
	t.pend = append(t.pend, seq)
	t.mu.Unlock()
	return f
}

// floorLocked is floor with t.mu held.
func (t *acceptTrack) floorLocked(seq uint64) uint64 {
	for len(t.pend) > 0 {
		if _, ok := t.done[t.pend[0]]; !ok {
			return t.pend[0] - 1
		}
		delete(t.done, t.pend[0])
		t.pend = t.pend[1:]
	}
	return seq - 1
}

func (t *acceptTrack) add(seq uint64) {
	t.mu.Lock()
	t.pend = append(t.pend, seq)
	t.mu.Unlock()
}

// audited records that seq's acceptance record is committed. A sequence
// not pending (a record recovery restored) is ignored.
func (t *acceptTrack) audited(seq uint64) {
	t.mu.Lock()
	t.auditedLocked(seq)
	t.mu.Unlock()
}

// auditedAt is audited for the messages at locs, all of this subject,
// under one lock.
func (t *acceptTrack) auditedAt(locs []uint64) {
	t.mu.Lock()
	for _, loc := range locs {
		_, seq := unpack(loc)
		t.auditedLocked(seq)
	}
	t.mu.Unlock()
}

// auditedLocked is audited with t.mu held. Records commit in sequence
// order, so the lowest pending sequence is the usual one: it leaves pend
// at once, as floor would drop it; any other waits in done for floor.
func (t *acceptTrack) auditedLocked(seq uint64) {
	switch {
	case len(t.pend) == 0 || seq < t.pend[0]:
	case seq == t.pend[0] && len(t.done) == 0:
		t.pend = t.pend[1:]
	default:
		if t.done == nil {
			t.done = make(map[uint64]struct{})
		}
		t.done[seq] = struct{}{}
	}
}

// failed forgets seq, whose message was not written (its sequence will be
// used again). Failed messages are the latest, so it looks from the back.
func (t *acceptTrack) failed(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := len(t.pend) - 1; i >= 0; i-- {
		if t.pend[i] == seq {
			t.pend = slices.Delete(t.pend, i, i+1)
			return
		}
	}
}

// outbox holds committed messages' acceptance records, in commit order,
// until they are chained into the audit log.
type outbox struct {
	mu   sync.Mutex
	recs []store.AuditRecord
	locs []uint64 // message locations, parallel to recs
	// Records of failed audit writes, in order, older than recs.
	retryRecs []store.AuditRecord
	retryLocs []uint64
	// spareRecs and spareLocs are emptied arrays of a committed flush,
	// which the next records fill instead of growing new ones.
	spareRecs []store.AuditRecord
	spareLocs []uint64
	kick      chan struct{}
	last      *wreq // the last audit request made from the outbox; audit w.mu
}

// put adds the acceptance record of the message at loc and wakes the
// flusher.
func (o *outbox) put(r store.AuditRecord, loc uint64) {
	o.mu.Lock()
	o.appendLocked(r, loc)
	o.mu.Unlock()
	o.wake()
}

// putWritten adds the acceptance records of the messages of a written
// batch (a subject log's requests, in order) and wakes the flusher once.
func (o *outbox) putWritten(batch []*wreq) {
	n := 0
	o.mu.Lock()
	for _, r := range batch {
		if ar, ok := r.aux.(*store.AuditRecord); ok {
			o.appendLocked(*ar, r.loc)
			n++
		}
	}
	o.mu.Unlock()
	if n > 0 {
		o.wake()
	}
}

// appendLocked adds one record, into the spare arrays when the outbox is
// empty; o.mu is held.
func (o *outbox) appendLocked(r store.AuditRecord, loc uint64) {
	if o.recs == nil && o.spareRecs != nil {
		o.recs, o.locs = o.spareRecs, o.spareLocs
		o.spareRecs, o.spareLocs = nil, nil
	}
	o.recs = append(o.recs, r)
	o.locs = append(o.locs, loc)
}

func (o *outbox) wake() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// recycle keeps the arrays of a committed flush, emptied, for the records
// to come, unless the spare ones are as large.
func (o *outbox) recycle(recs []store.AuditRecord, locs []uint64) {
	clear(recs) // nothing of the records is kept alive by the spare
	o.mu.Lock()
	if cap(recs) > cap(o.spareRecs) && cap(locs) > 0 {
		o.spareRecs, o.spareLocs = recs[:0], locs[:0]
	}
	o.mu.Unlock()
}

// putBack returns the records of a failed audit write for the next flush,
// which takes them before anything put since. A failed write fails its
// requests in queue order, so appending keeps the records in order.
func (o *outbox) putBack(recs []store.AuditRecord, locs []uint64) {
	o.mu.Lock()
	o.retryRecs = append(o.retryRecs, recs...)
	o.retryLocs = append(o.retryLocs, locs...)
	o.mu.Unlock()
}

// take empties the outbox, records to retry first; o.mu is held.
func (o *outbox) takeLocked() ([]store.AuditRecord, []uint64) {
	recs, locs := o.recs, o.locs
	if len(o.retryRecs) > 0 {
		recs, locs = append(o.retryRecs, recs...), append(o.retryLocs, locs...)
		o.retryRecs, o.retryLocs = nil, nil
	}
	o.recs, o.locs = nil, nil
	return recs, locs
}

// auditAux is what the audit log's onCommit and onFail need of a request:
// its last record and, for records from the outbox, the messages they
// belong to.
type auditAux struct {
	last store.AuditRecord
	recs []store.AuditRecord // from the outbox
	locs []uint64
}

// chainLocked chains recs onto the audit log's pending head in place and
// queues them as one request. The audit log's mu is held. An acceptance
// record from the outbox (locs is set) without its Seqs gets the sequence
// of the message at its location.
func (s *Store) chainLocked(recs []store.AuditRecord, locs []uint64) *wreq {
	a := &s.audit
	w := a.w
	size := 0
	for i := range recs {
		size += auditSize(&recs[i])
	}
	buf := getChainBuf(size)
	ends := make([]int, len(recs))
	// The ids, sequences and hashes made here are strings of one buffer,
	// never written again once each is taken: one allocation for the
	// batch. Its capacity holds them all, so it is never moved.
	text := make([]byte, 0, len(recs)*(len("aud_")+20+20+64))
	if locs != nil {
		for i := range recs {
			if r := &recs[i]; r.Seqs == "" {
				_, seq := unpack(locs[i])
				at := len(text)
				text = strconv.AppendUint(text, seq, 10)
				r.Seqs = unsafe.String(&text[at], len(text)-at)
			}
		}
	}
	a.mu.Lock()
	prev := a.pend
	for i := range recs {
		r := &recs[i]
		r.Seq = w.next + uint64(i)
		if r.ID == "" || locs != nil {
			at := len(text)
			text = strconv.AppendUint(append(text, "aud_"...), r.Seq, 10)
			r.ID = unsafe.String(&text[at], len(text)-at)
		}
		r.Time = r.Time.UTC()
		r.PrevHash = prev.Hash
		if prev.Hash == "" {
			r.PrevHash = store.Genesis
		}
		at := len(text)
		text = r.AppendHash(text)
		r.Hash = unsafe.String(&text[at], len(text)-at)
		prev = headOf(*r)
		buf.b = appendAudit(buf.b, r)
		ends[i] = len(buf.b)
	}
	a.pend = prev
	a.mu.Unlock()
	data := make([][]byte, len(recs))
	start := 0
	for i, end := range ends {
		data[i] = buf.b[start:end:end]
		start = end
	}
	x := &auditAux{last: recs[len(recs)-1]}
	if locs != nil { // the outbox's: put back should the write fail
		x.recs, x.locs = recs, locs
	}
	r := &wreq{data: data, aux: x, buf: buf}
	w.enqueueLocked(r)
	return r
}

// ChainAudit implements store.AuditChainer. The acceptance records in the
// outbox are chained first, in the same write: every message a reader
// can see has its record there or already chained (subject logs put it
// in the outbox before the message becomes visible), so in the chain the
// acceptance of a message precedes every record appended after the
// message could be read, the records of its delivery among them. Pages
// of receipts rely on it: a page read while a delivery record preceded
// its acceptance could not match it, and the pages after skip it.
func (s *Store) ChainAudit(ctx context.Context, recs []store.AuditRecord) error {
	if err := s.enter(ctx); err != nil {
		return err
	}
	defer s.leave()
	if len(recs) == 0 {
		return nil
	}
	w := s.audit.w
	o := &s.out
	w.mu.Lock()
	if err := w.failed; err != nil {
		w.mu.Unlock()
		return err
	}
	o.mu.Lock()
	acc, locs := o.takeLocked()
	o.mu.Unlock()
	if len(acc) > 0 {
		// Queued ahead of recs: written in the same batch, or, one
		// request a batch (SyncAlways), by the batch before. A failure
		// fails both and puts acc back (onAuditFail).
		o.last = s.chainLocked(acc, locs)
	}
	return w.awaitLocked(s.chainLocked(recs, nil))
}

// flushAccepted chains what the outbox holds into the audit log and waits
// until it, and whatever an earlier flush took, is committed.
func (s *Store) flushAccepted() error {
	w := s.audit.w
	o := &s.out
	w.mu.Lock()
	if err := w.failed; err != nil {
		w.mu.Unlock()
		return err
	}
	o.mu.Lock()
	recs, locs := o.takeLocked()
	o.mu.Unlock()
	if len(recs) == 0 {
		var err error
		if o.last != nil && !o.last.done.Load() {
			err = w.waitOtherLocked(o.last)
		}
		w.mu.Unlock()
		return err
	}
	r := s.chainLocked(recs, locs)
	o.last = r
	return w.awaitLocked(r)
}

// acceptLoop is the accept flusher: it chains the outbox into the audit
// log acceptLinger after a record arrives, and once more when the store
// closes.
func (s *Store) acceptLoop() {
	defer s.bg.Done()
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-s.out.kick:
		case <-s.quit:
			s.flushLogged()
			return
		}
		t.Reset(s.linger())
		select {
		case <-t.C:
		case <-s.quit:
			s.flushLogged()
			return
		}
		s.flushLogged()
	}
}

// linger is the accept flusher's: acceptLinger, or a test's (faults).
func (s *Store) linger() time.Duration {
	if f := s.faults.Load(); f != nil && f.linger != 0 {
		return f.linger
	}
	return acceptLinger
}

func (s *Store) flushLogged() {
	if err := s.flushAccepted(); err != nil {
		s.opts.Logger.Error("wal: acceptance audit records could not be written; they are kept with their messages and retried", "err", err)
	}
}

// onAuditCommit and onAuditFail keep the outbox's books for a committed or
// failed audit request; the audit log's mu is held. A committed request's
// arrays from the outbox go back to it (recycle).
func (s *Store) onAuditCommit(x *auditAux) {
	for i := 0; i < len(x.locs); {
		num, _ := unpack(x.locs[i])
		j := i + 1
		for j < len(x.locs) && x.locs[j]>>seqBits == x.locs[i]>>seqBits {
			j++
		}
		if sub := s.subjectByNum(num); sub != nil {
			sub.track.auditedAt(x.locs[i:j])
		}
		i = j
	}
	if x.locs != nil {
		s.out.recycle(x.recs, x.locs)
		x.recs, x.locs = nil, nil
	}
}

func (s *Store) onAuditFail(x *auditAux) {
	if x.locs != nil {
		for i := range x.recs {
			x.recs[i].Seq, x.recs[i].ID, x.recs[i].PrevHash, x.recs[i].Hash = 0, "", "", ""
		}
		s.out.putBack(x.recs, x.locs)
	}
}

// AppendAccepted implements store.AcceptAppender. The message and its
// acceptance record are one record of the subject's log: when
// AppendAccepted returns (under SyncBatch and SyncAlways) both are on
// disk, at the cost of the message's fsync alone. The record joins the
// audit chain shortly after (in message commit order), at once for a
// reader of the audit log, and after a crash before Open returns.
//
// While the audit log is unusable (a failed write could not be taken back;
// see Failure in the package documentation) AppendAccepted refuses with
// its error, as AppendAudit does: acceptance records would pile up in
// memory with nowhere to go until the store is reopened.
func (s *Store) AppendAccepted(ctx context.Context, m store.Message, accepted store.AuditRecord) (store.Message, bool, error) {
	if w := s.audit.w; w.unusable.Load() {
		w.mu.Lock()
		err := w.failed
		w.mu.Unlock()
		return store.Message{}, false, err
	}
	accepted.Subject, accepted.MessageID = m.Subject, m.ID
	return s.append(ctx, m, &accepted)
}

// acceptedReq is the write request of an accepted message and the
// acceptance record it keeps (its aux), in one allocation.
type acceptedReq struct {
	wreq
	acc store.AuditRecord
}

// acceptFloors returns every subject's floor now: the highest sequence up
// to which every kindAccepted message has its acceptance record
// committed. Records of one subject commit in sequence order (the outbox
// keeps commit order, and a failed write puts its records back in
// front), so the floor covers every committed record of the subject.
func (s *Store) acceptFloors() map[string]uint64 {
	s.msgs.mu.RLock()
	list := slices.Clone(s.msgs.list)
	s.msgs.mu.RUnlock()
	floors := make(map[string]uint64, len(list))
	for _, sub := range list {
		sub.w.mu.Lock()
		floors[sub.name] = sub.track.floor(sub.w.next)
		sub.w.mu.Unlock()
	}
	return floors
}

// acceptCand is a kindAccepted message that recovery must find in the audit
// log.
type acceptCand struct {
	loc uint64
	rec store.AuditRecord
}

// acceptKey names the message an acceptance record is of: its subject and
// sequence (the record's Seqs). The id alone does not: once retention
// removed a message its id no longer resolves, and the broker accepts a
// new message with it, whose record the old one must not stand for.
type acceptKey struct {
	subject string
	seq     uint64
}

// acceptCandidates reads, for every subject, the kindAccepted messages
// after the floor of its last one: those whose acceptance record may be
// missing from the audit log. floors holds, per subject number, the
// highest floor its scan saw (-1 when it saw no kindAccepted record);
// cpFloors the floors kept with the audit checkpoint, which may be higher
// (a subject idle since audit retention last ran).
func (s *Store) acceptCandidates(floors []int64, cpFloors map[string]uint64) (map[acceptKey]*acceptCand, error) {
	cands := make(map[acceptKey]*acceptCand)
	for num, f := range floors {
		if f < 0 {
			continue
		}
		sub := s.msgs.list[num]
		if cf, ok := cpFloors[sub.name]; ok && int64(cf) > f {
			f = int64(cf)
		}
		first, last := sub.w.bounds()
		for seq := max(uint64(f)+1, first); seq <= last; seq++ {
			p, err := sub.w.read(seq)
			if err != nil {
				return nil, err
			}
			m, r, err := decodeAccepted(p, sub.name)
			if err != nil || m.Seq != seq {
				return nil, &store.CorruptError{File: sub.w.dir, Offset: -1, Reason: fmt.Sprintf("entry %d is not message %d (%v)", seq, seq, err)}
			}
			if r.Type != "" {
				cands[acceptKey{sub.name, seq}] = &acceptCand{loc: pack(sub.num, seq), rec: r}
			}
		}
	}
	return cands, nil
}

// foundAccepted drops from cands the message whose acceptance record r is.
func foundAccepted(cands map[acceptKey]*acceptCand) func(r *store.AuditRecord) error {
	return func(r *store.AuditRecord) error {
		if r.MessageID == "" {
			return nil
		}
		seq, err := strconv.ParseUint(r.Seqs, 10, 64)
		if err != nil {
			return nil // not one message's acceptance
		}
		k := acceptKey{r.Subject, seq}
		if c := cands[k]; c != nil && c.rec.Type == r.Type && c.rec.MessageID == r.MessageID {
			delete(cands, k)
		}
		return nil
	}
}

// restoreAccepted chains the acceptance records recovery found missing,
// by subject and sequence, and waits until they are on disk.
func (s *Store) restoreAccepted(cands map[acceptKey]*acceptCand) error {
	if len(cands) == 0 {
		return nil
	}
	list := make([]*acceptCand, 0, len(cands))
	for _, c := range cands {
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b *acceptCand) int { return cmp.Compare(a.loc, b.loc) })
	for _, c := range list {
		s.out.put(c.rec, c.loc)
	}
	if err := s.flushAccepted(); err != nil {
		return fmt.Errorf("wal: restore %d acceptance audit records: %w", len(list), err)
	}
	s.opts.Logger.Warn("wal: chained acceptance audit records that a crash kept from the audit log; they were on disk with their messages",
		"records", len(list))
	return nil
}
