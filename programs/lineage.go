package programs

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pigeon"
)

// Defaults of the lineage bounds (Options.MaxHops, Options.MaxDescendants,
// Options.LineageSize).
const (
	// DefaultMaxHops is how many programs deep a message's descendants
	// may go: a message from outside the programs is at depth 0, one a
	// program publishes while it handles a message of depth d is at d+1.
	DefaultMaxHops = 8
	// DefaultMaxDescendants is how many messages the programs may emit,
	// in all, from one message from outside the programs and its
	// descendants.
	DefaultMaxDescendants = 10000
	// DefaultLineageSize is how many of the messages its programs
	// published a Manager remembers the lineage of.
	DefaultLineageSize = 1 << 16
	// maxProgramContracts is how many of its bindings' contracts a
	// Manager remembers, to tell a message a program published.
	maxProgramContracts = 4096
)

// tree counts the messages emitted from one message from outside the
// programs and its descendants.
type tree struct{ emitted atomic.Int64 }

// hop is a message's place in its lineage.
type hop struct {
	depth int
	root  *tree
	// lost says the message is a program's whose lineage was forgotten:
	// its handler may emit nothing.
	lost bool
}

type msgKey struct{ subject, id string }

// lineage is the Manager's memory of the messages its programs published.
//
// A program that publishes into its own route, or two that publish into
// each other's, would otherwise make one message the ancestor of messages
// without end, up to limits.maxEmits more at each delivery (a fan-out of
// 1,000 at each hop): limits.maxEmits bounds one delivery, not a message's
// descendants. A Manager remembers the lineage of the messages its
// programs publish: how deep each is, and the tree of the message from
// outside the programs it descends from, whose count of emits is shared
// by all its descendants. An emit deeper than Options.MaxHops, or beyond
// the tree's Options.MaxDescendants, is refused PROGRAM_LIMIT_EXCEEDED.
//
// The depth also travels with the message: an emit publishes under a
// caller whose Hops is the emit's depth, which the broker writes into the
// message (pigeon.Message.Hops) in place of what the program wrote. A
// Manager that never saw a message's lineage (another node's program
// published it) takes its depth from there, in a tree of its own: a loop
// through programs of several Managers stops MaxHops deep, and
// MaxDescendants counts each Manager's emits alone.
//
// The lineage of the last Options.LineageSize messages is kept. A message
// published under a contract of one of the Manager's bindings whose
// lineage was forgotten counts as lost, and its handler's emits are
// refused: forgetting never starts a fresh lineage, which an
// amplifier could reach by publishing faster than its messages are
// delivered. Nor does it give the message a conservative depth (one hop
// short of MaxHops, say): its descendants, forgotten in turn once the
// backlog outgrows LineageSize again, would each start over at that
// depth, and a loop would go on without end. Work a downstream program
// does on a backlog of more than LineageSize program messages is refused
// instead, with a warning (lostWarn) that names the bound.
type lineage struct {
	maxHops int   // negative: no bound
	maxDesc int64 // negative: no bound
	size    int   // Options.LineageSize

	// warned is when (Unix nanoseconds) a refusal for a forgotten
	// lineage was last logged.
	warned atomic.Int64

	mu        sync.Mutex
	msgs      fifo[msgKey, hop]
	contracts fifo[string, struct{}]
}

// lostWarnEvery is how often, at most, a Manager logs that it refused an
// emit for a forgotten lineage: a backlog refuses one per message.
const lostWarnEvery = time.Minute

// lostWarn reports whether a refusal for a forgotten lineage at now is
// to be logged: the first one, then at most one every lostWarnEvery.
func (l *lineage) lostWarn(now time.Time) bool {
	last := l.warned.Load()
	if last != 0 && now.UnixNano()-last < int64(lostWarnEvery) {
		return false
	}
	return l.warned.CompareAndSwap(last, now.UnixNano())
}

func newLineage(o *Options) *lineage {
	return &lineage{maxHops: o.MaxHops, maxDesc: o.MaxDescendants, size: o.LineageSize,
		msgs: newFIFO[msgKey, hop](o.LineageSize), contracts: newFIFO[string, struct{}](maxProgramContracts)}
}

// contract notes the contract of a binding: a message published under it
// was published by a program.
func (l *lineage) contract(id string) {
	l.mu.Lock()
	l.contracts.put(id, struct{}{})
	l.mu.Unlock()
}

// of is the place of a delivered message: the one its publishing program
// noted, in a tree of its own for a message this Manager's programs did
// not publish (one from outside the programs, or another Manager's), and
// lost for a program's message whose lineage was forgotten. Its depth is
// never less than the message's Hops, which the broker set from its
// publisher's caller: a program of another Manager (a cluster's other
// node) published it that many programs deep, and its descendants here
// go on from there.
func (l *lineage) of(m *pigeon.Message) hop {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.msgs.get(msgKey{m.Subject, m.ID}); ok {
		h.depth = max(h.depth, int(m.Hops))
		return h
	}
	if _, ok := l.contracts.get(m.ContractID); ok && m.ContractID != "" {
		return hop{lost: true, root: &tree{}, depth: int(m.Hops)}
	}
	return hop{root: &tree{}, depth: int(m.Hops)}
}

// hops is the Message.Hops of a message emitted while one at h is
// handled: one more than h's depth (at most the largest a Hops holds,
// which only a Manager without a MaxHops bound reaches).
func (h hop) hops() uint32 {
	return uint32(min(int64(h.depth)+1, math.MaxUint32))
}

// admit reports whether a message handled at h may emit one more: its
// lineage is known, its depth within MaxHops and its tree's count within
// MaxDescendants (counted; give it back with unadmit when the emit fails).
func (l *lineage) admit(h hop) bool {
	if h.lost || (l.maxHops >= 0 && h.depth+1 > l.maxHops) {
		return false
	}
	if n := h.root.emitted.Add(1); l.maxDesc >= 0 && n > l.maxDesc {
		h.root.emitted.Add(-1)
		return false
	}
	return true
}

func (l *lineage) unadmit(h hop) { h.root.emitted.Add(-1) }

// published notes m, published while a message at h was handled. Its
// key is a copy of m's subject and id: as m holds them they are views of
// the one allocation of all its text fields (the decoder's), which each
// of the Options.LineageSize entries would otherwise keep alive.
func (l *lineage) published(h hop, m *pigeon.Message) {
	k := msgKey{strings.Clone(m.Subject), strings.Clone(m.ID)}
	l.mu.Lock()
	l.msgs.put(k, hop{depth: h.depth + 1, root: h.root})
	l.mu.Unlock()
}

// fifo is a map of at most n entries that forgets the oldest first.
type fifo[K comparable, V any] struct {
	n    int
	m    map[K]V
	ring []K // the keys, oldest at next once it holds n
	next int
}

func newFIFO[K comparable, V any](n int) fifo[K, V] {
	return fifo[K, V]{n: max(n, 1), m: make(map[K]V)}
}

func (f *fifo[K, V]) get(k K) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}

func (f *fifo[K, V]) put(k K, v V) {
	if _, ok := f.m[k]; ok {
		f.m[k] = v
		return
	}
	if len(f.ring) < f.n {
		f.ring = append(f.ring, k)
	} else {
		delete(f.m, f.ring[f.next])
		f.ring[f.next] = k
		f.next = (f.next + 1) % len(f.ring)
	}
	f.m[k] = v
}
