package programs

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"pigeon"
)

// positions is the KV bucket of the bindings' positions on pubsub
// subjects, one key per program.
const positions = "program-positions"

// maxStoredDone bounds the sequences above a position that are stored as
// handled; those beyond it are handled again after a restart.
const maxStoredDone = 4096

// position is where a binding of a pubsub route stands: every message of
// Subject up to Seq that reached the program was settled (acknowledged,
// or given up after its attempts), and those of Done, above Seq, were
// acknowledged too. A binding started at a position resumes at Seq+1 and
// acknowledges the messages of Done without running the program on them.
type position struct {
	Subject string   `json:"subject"`
	Seq     uint64   `json:"seq"`
	Done    []uint64 `json:"done,omitempty"`
}

// tracker follows the deliveries of a pubsub binding to know its
// position. The subscription hands messages over in sequence order (begin
// is called in that order, from the delivery loop); they settle in any
// order (end). It is safe for concurrent use.
type tracker struct {
	subject string
	maxAtt  int // the subject's attempts: a failure at the last one settles

	mu      sync.Mutex
	pos     uint64
	pending []entry             // handed over, above pos, ascending
	skip    map[uint64]struct{} // handled before the binding started, above pos
	gen     uint64              // counts the changes of pos and pending
}

// entry is one message handed to the program.
type entry struct {
	seq  uint64
	done bool
}

func newTracker(subject string, maxAtt int, from position) *tracker {
	t := &tracker{subject: subject, maxAtt: maxAtt, pos: from.Seq, skip: map[uint64]struct{}{}}
	for _, s := range from.Done {
		if s > from.Seq {
			t.skip[s] = struct{}{}
		}
	}
	return t
}

// begin notes that seq is handed over as attempt; it reports true when
// the message was handled before the binding started (it is to be
// acknowledged without running the program).
func (t *tracker) begin(seq uint64, attempt int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if attempt != 1 || seq <= t.pos || (len(t.pending) > 0 && seq <= t.pending[len(t.pending)-1].seq) {
		return false // a redelivery: noted at its first attempt
	}
	_, skip := t.skip[seq]
	delete(t.skip, seq)
	t.pending = append(t.pending, entry{seq: seq, done: skip})
	if skip {
		t.advance()
	}
	return skip
}

// end notes the program's answer to attempt of seq. A message settles
// when acknowledged or failed at its last attempt; one the subscription
// gave back because it was stopping (ctx ended, ErrUndelivered) stays
// pending and is delivered again from the position.
func (t *tracker) end(ctx context.Context, seq uint64, attempt int, err error) {
	if err != nil && (attempt < t.maxAtt || ctx.Err() != nil || errors.Is(err, pigeon.ErrUndelivered)) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	i, ok := slices.BinarySearchFunc(t.pending, seq, func(e entry, s uint64) int {
		switch {
		case e.seq < s:
			return -1
		case e.seq > s:
			return 1
		}
		return 0
	})
	if ok {
		t.pending[i].done = true
		t.advance()
	}
}

// advance moves pos past the settled head of pending after a message
// settled. t.mu is held.
func (t *tracker) advance() {
	t.gen++
	n := 0
	for n < len(t.pending) && t.pending[n].done {
		t.pos = t.pending[n].seq
		n++
	}
	if n > 0 {
		t.pending = slices.Delete(t.pending, 0, n)
	}
	for s := range t.skip { // those the route no longer selects
		if s <= t.pos {
			delete(t.skip, s)
		}
	}
}

// position returns the current position with at most max sequences
// handled above it (max < 0: all of them), and its generation.
func (t *tracker) position(max int) (position, uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := position{Subject: t.subject, Seq: t.pos}
	for _, e := range t.pending {
		if e.done {
			p.Done = append(p.Done, e.seq)
		}
	}
	for s := range t.skip {
		p.Done = append(p.Done, s)
	}
	slices.Sort(p.Done)
	if max >= 0 && len(p.Done) > max {
		p.Done = p.Done[:max]
	}
	return p, t.gen
}

// loadPosition reads the stored position of program name; false when
// there is none (or it does not decode: the binding starts at new
// messages, as before positions were kept).
func (mg *Manager) loadPosition(ctx context.Context, name string) (position, bool) {
	b, err := mg.kv.Get(ctx, positions, name)
	if err != nil {
		return position{}, false
	}
	var p position
	if json.Unmarshal(b, &p) != nil {
		return position{}, false
	}
	return p, true
}

// persist stores b's position when it changed since it was last stored
// (always when force), unless b no longer is its program's binding. A
// failure is logged; the position is stored at the next change.
func (b *binding) persist(ctx context.Context, force bool) {
	if b.tr == nil {
		return
	}
	b.saveMu.Lock()
	defer b.saveMu.Unlock()
	if !b.live {
		return
	}
	p, gen := b.tr.position(maxStoredDone)
	if gen == b.savedGen && !force {
		return
	}
	raw, err := json.Marshal(p)
	if err == nil {
		err = b.mg.kv.Put(context.WithoutCancel(ctx), positions, b.name, raw)
	}
	if err != nil {
		b.mg.log.Warn("program position not stored", "program", b.name, "error", err)
		return
	}
	b.savedGen = gen
}

// setLive makes b its program's binding (whose position is stored), or
// not, after storing its position a last time.
func (b *binding) setLive(ctx context.Context, live bool) {
	if !live {
		b.persist(ctx, false)
	}
	b.saveMu.Lock()
	b.live = live
	b.saveMu.Unlock()
	if live {
		b.persist(ctx, true)
	}
}
