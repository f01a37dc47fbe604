package memory

// expiry is the queue item of an idempotency entry: when it expires, and
// the hash of its key and the message that claimed it, which name the entry
// without holding the key. It keeps the stamp and the msgLoc as their
// fields, which take 32 bytes where the two structs would take 40.
type expiry struct {
	sec  int64
	hash uint64
	seq  uint64
	nsec int32
	log  uint32
}

func newExpiry(at stamp, hash uint64, loc msgLoc) expiry {
	return expiry{sec: at.sec, nsec: at.nsec, hash: hash, log: loc.log, seq: loc.seq}
}

func (e expiry) at() stamp   { return stamp{sec: e.sec, nsec: e.nsec} }
func (e expiry) loc() msgLoc { return msgLoc{log: e.log, seq: e.seq} }

// expiryQueue orders the entries' items for eviction. Expiries mostly come
// in order (the broker sets them to the message time plus the subject's
// fixed TTL), so an item that is not before the last one queued goes to a
// FIFO, O(1) to push and pop and never copied as it grows; only an item that
// comes out of order goes to a heap, O(log n). popDue takes the earliest
// of the two.
type expiryQueue struct {
	fifo expiryFIFO
	heap expiryHeap
	// earliest is the earliest at queued, when any is. Every Append asks
	// whether an item is due; this answers without touching the items,
	// which have gone cold since they were pushed.
	earliest stamp
}

func (q *expiryQueue) len() int { return q.fifo.n + len(q.heap) }

func (q *expiryQueue) push(e expiry) {
	if q.len() == 0 || e.at().before(q.earliest) {
		q.earliest = e.at()
	}
	if last, ok := q.fifo.last(); ok && e.at().before(last.at()) {
		q.heap.push(e)
		return
	}
	q.fifo.push(e)
}

// popDue removes and returns the earliest item when it expires at or
// before cutoff.
func (q *expiryQueue) popDue(cutoff stamp) (expiry, bool) {
	if q.len() == 0 || cutoff.before(q.earliest) {
		return expiry{}, false
	}
	var e expiry
	if f, ok := q.fifo.first(); ok && (len(q.heap) == 0 || !q.heap[0].at().before(f.at())) {
		e = q.fifo.pop()
	} else {
		e = q.heap.pop()
	}
	if f, ok := q.fifo.first(); ok {
		q.earliest = f.at()
	}
	if len(q.heap) > 0 && (q.fifo.n == 0 || q.heap[0].at().before(q.earliest)) {
		q.earliest = q.heap[0].at()
	}
	return e, true
}

// fifoChunk is how many items a full chunk of an expiryFIFO holds.
const fifoChunk = 512

// expiryFIFO is a queue of items in chunks: it grows by a chunk at a time
// and lets each go once its items have been popped.
type expiryFIFO struct {
	chunks [][]expiry
	// head is the index in chunks[0] of the first item.
	head int
	n    int
}

func (f *expiryFIFO) push(e expiry) {
	last := len(f.chunks) - 1
	if last < 0 || len(f.chunks[last]) == fifoChunk {
		var c []expiry
		if last >= 0 {
			c = make([]expiry, 0, fifoChunk)
		} // else a first chunk grows by append: a quiet store stays small
		f.chunks = append(f.chunks, c)
		last++
	}
	f.chunks[last] = append(f.chunks[last], e)
	f.n++
}

func (f *expiryFIFO) first() (expiry, bool) {
	if f.n == 0 {
		return expiry{}, false
	}
	return f.chunks[0][f.head], true
}

func (f *expiryFIFO) last() (expiry, bool) {
	if f.n == 0 {
		return expiry{}, false
	}
	c := f.chunks[len(f.chunks)-1]
	return c[len(c)-1], true
}

// pop removes the first item; the FIFO must not be empty.
func (f *expiryFIFO) pop() expiry {
	e := f.chunks[0][f.head]
	f.head++
	f.n--
	switch {
	case f.n == 0:
		// Empty: keep the last chunk, emptied, for the next push.
		c := f.chunks[len(f.chunks)-1][:0]
		clear(f.chunks)
		f.chunks = append(f.chunks[:0], c)
		f.head = 0
	case f.head == len(f.chunks[0]):
		f.chunks[0] = nil
		f.chunks = f.chunks[1:]
		f.head = 0
	}
	return e
}

// expiryHeap is a binary min-heap on at. It is written out rather than built
// on container/heap to keep items out of interfaces: no allocation per push.
type expiryHeap []expiry

func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].at().before(q[p].at()) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *expiryHeap) pop() expiry {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q[r].at().before(q[l].at()) {
			c = r
		}
		if !q[c].at().before(q[i].at()) {
			break
		}
		q[i], q[c] = q[c], q[i]
		i = c
	}
	*h = q
	return top
}
