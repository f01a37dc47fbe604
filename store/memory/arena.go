package memory

// arena holds the bytes of a chunk's items (a subject log's messages, or
// audit records) one after the other; each item's header says where it
// ends.
//
// An arena made to a size (every chunk but a log's first, which grows by
// append so that a quiet log stays small) is never regrown: once an item
// does not fit in data, it and the chunk's later items go to spill, made
// for them. Regrowing would copy the arena and leave the old one to the
// garbage collector; keeping room for the largest chunk instead would leave
// bytes unused in every arena, which count towards the heap the collector
// lets grow before it runs, and so towards the memory the process maps.
type arena struct {
	data []byte
	// spill holds the items from spillAt on, when data filled up before
	// the chunk; nil otherwise.
	spill   []byte
	spillAt int
	// grows is set for a log's first chunk, whose data grows by append
	// and never spills.
	grows bool
}

// arenaSlack sizes an arena made ahead: the bytes it is expected to hold
// plus 1/arenaSlack of them. A chunk whose items turn out larger spills.
const arenaSlack = 64

// withSlack is n bytes and the room an arena made for them keeps beyond.
func withSlack(n int) int { return n + n/arenaSlack }

// newChunk returns the headers and arena of a log's next chunk, which holds
// n items. full is how many bytes the last full chunk's items took (-1 for
// the first chunk). The first chunk grows by append, so a quiet log stays
// small; every later one gets all its headers at once and an arena sized
// from the last one's (withSlack). size keeps that size between calls.
func newChunk[H any](n, full int, size *int) ([]H, arena) {
	if full >= 0 {
		*size = withSlack(full)
	}
	if *size == 0 {
		return nil, arena{grows: true}
	}
	return make([]H, 0, n), arena{data: make([]byte, 0, *size)}
}

// room returns the slice that item k of a chunk of max items, of at most n
// bytes, is appended to: data, or spill once data, made to a size, has no
// room for it. A spill is made for this item and the ones left to the
// chunk, each as large as the chunk's average so far (the size data was
// made for, before any), plus a quarter; should it fill up too, it grows
// by append.
func (a *arena) room(k, max, n int) *[]byte {
	switch {
	case a.spill != nil:
		return &a.spill
	case a.grows || len(a.data)+n <= cap(a.data):
		return &a.data
	}
	a.spillAt = k
	avg := cap(a.data) / max
	if k > 0 {
		avg = len(a.data) / k
	}
	rest := (max - k - 1) * avg
	a.spill = make([]byte, 0, n+rest+rest/4)
	return &a.spill
}

// used is how many bytes the arena's items take.
func (a *arena) used() int { return len(a.data) + len(a.spill) }

// item returns item j's bytes, which end at end; prev is where item j-1
// ends (any value for j == 0). Read them, do not keep or hand them out.
func (a *arena) item(j, prev, end int) []byte {
	d := a.data
	if a.spill != nil && j >= a.spillAt {
		d = a.spill
		if j == a.spillAt {
			prev = 0
		}
	} else if j == 0 {
		prev = 0
	}
	return d[prev:end]
}
