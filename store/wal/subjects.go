package wal

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"pigeon/store"
)

// subjectDir names the directory of a subject: the name with bytes other
// than [A-Za-z0-9_-] (and a leading '.') escaped as %XX, or, for names
// that would escape to more than 200 bytes, '#' and a hash. On Windows a
// trailing '.' and the first byte of a device name are escaped too
// (windowsSafe). The SUBJECT file inside holds the real name.
func subjectDir(name string) string { return subjectDirOn(runtime.GOOS, name) }

// subjectDirOn is subjectDir as it is on goos.
func subjectDirOn(goos, name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	if goos == "windows" {
		s := windowsSafe(b.String())
		b.Reset()
		b.WriteString(s)
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
	if err := mkdirDurable(root); err != nil {
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
		if index >= 1<<seqBits {
			// Append never gets here; packed, it would name a message of
			// the next subject.
			return fmt.Errorf("message seq %d is beyond the %d bits of a location", index, seqBits)
		}
		loc := pack(num, index)
		if h.id != "" { // as addID
			sc.ids = append(sc.ids, idSlot{h: x.hash(h.id), loc: loc})
		}
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
	// The acceptance record goes to the outbox before the message is
	// visible to readers: ChainAudit chains the outbox first, so a record
	// of the message's delivery, made by a reader, follows its acceptance
	// in the chain.
	w.onWritten = s.out.putWritten
	w.onCommitted = func(batch []*wreq) {
		var n uint64
		keys := false
		for _, r := range batch {
			r.freeBuf()
			n += uint64(r.body)
			keys = keys || r.key != ""
		}
		sub.bytes.Add(n)
		if !keys {
			return
		}
		x.mu.Lock()
		for _, r := range batch {
			if r.key != "" {
				delete(x.pending, r.loc)
			}
		}
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
	if err := mkdirDurable(dir); err != nil {
		return nil, fmt.Errorf("wal: create subject %q: %w", name, err)
	}
	// The directory may be another subject's: on a file system that folds
	// case (macOS, Windows) "Orders" and "orders" name one directory, and
	// two logs on one set of files would ruin both. A SUBJECT left by a
	// creation of this subject that failed is reused.
	if other, err := readSubjectFile(dir, s.opts.MaxRecordSize); err == nil && other != name {
		return nil, fmt.Errorf("wal: create subject %q: its directory %s holds subject %q (a file system that folds case?)", name, dir, other)
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
