package memory

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// A chunk's arena is fresh memory: the first write to each of its pages
// costs a page fault, a few microseconds in the kernel, taken by whoever
// writes there first. Left to Append, that is the appending goroutine, with
// the log's lock held, once every few messages. So as soon as a subject
// log's chunk begins (its first message), a goroutine of its own makes the
// chunk after it, sized as the last full one, and writes a zero into each
// page of its headers and of the arena its messages are expected to fill
// (maybePrepare); the chunk waits in the log's spare, and the Append that
// begins the next chunk takes it, unless it is much smaller than the last
// full one, instead of making one (push, takeSpare). The faults are taken on
// that goroutine, beside the appends rather than within them.
//
// The goroutine is given the time of a whole chunk because it may wait that
// long: Go runs a goroutine an Append starts on the appending one's own
// processor, when that blocks, unless another processor is idle and takes
// it; publishing in process on two busy cores, one started when the chunk
// was three quarters full was not ready for a quarter of the chunks.
//
// A log prepares only once a chunk of it has filled (its arena size is
// known then), so a quiet subject never does; the spares a store holds or
// is preparing at once are bounded by maxSpareBytes, and one left over
// (the subject went quiet) is taken by the log's next chunk.

// spareAt is how many messages a log's last chunk holds when the next one
// is prepared: as soon as it begins.
const spareAt = 1

// maxSpareBytes bounds the arena bytes of the chunks a store holds as
// spares, or is preparing, at once.
const maxSpareBytes = 64 << 20

// pageSize is the step at which prepare touches a chunk: the smallest page
// size of the systems Go runs on, so that every page is touched whatever
// the size.
const pageSize = 4096

// spares is what a store's logs share of their spares: the goroutines
// preparing them, and the bytes they hold.
type spares struct {
	running sync.WaitGroup
	bytes   atomic.Int64
}

// spareState is a subject log's spare chunk, and whether one is being
// prepared.
type spareState struct {
	// ready is the prepared chunk, nil until one is ready.
	ready atomic.Pointer[chunk]
	// preparing is set, under the log's lock, from the start of a
	// prepare until the next chunk is begun.
	preparing bool
}

// maybePrepare starts preparing the chunk after sl's last one when that
// holds spareAt messages, its arena size is known, none is being prepared
// and the store's spares leave room. Call it with the log's lock held,
// after a push.
func (sl *subjectLog) maybePrepare(sp *spares) {
	c := &sl.chunks[len(sl.chunks)-1]
	if len(c.hdrs) != spareAt || sl.arenaSize == 0 || sl.spare.preparing || sl.spare.ready.Load() != nil {
		return // a spare made too late for the last chunk serves the next one
	}
	// The arena the next chunk is expected to want: the size of the last
	// full one's, and the bytes that took, which is what gets written.
	size := sl.arenaSize
	est := size - size/(arenaSlack+1)
	if sp.bytes.Add(int64(size)) > maxSpareBytes {
		sp.bytes.Add(-int64(size))
		return
	}
	sl.spare.preparing = true
	sp.running.Add(1)
	go func() {
		defer sp.running.Done()
		next := &chunk{hdrs: make([]msgHeader, 0, chunkLen), arena: arena{data: make([]byte, 0, size)}}
		touch(next.hdrs, chunkLen)
		touch(next.data, min(est, size)) // the room past what the chunk is expected to fill may never be written
		if old := sl.spare.ready.Swap(next); old != nil {
			sp.bytes.Add(-int64(cap(old.data)))
		}
	}()
}

// takeSpare returns the prepared chunk when one is ready and its arena
// holds at least three quarters of size, what the last full chunk took
// (the chunk spills what does not fit); a smaller one is dropped. Call it
// with the log's lock held.
func (sl *subjectLog) takeSpare(sp *spares, size int) (chunk, bool) {
	sl.spare.preparing = false
	c := sl.spare.ready.Swap(nil)
	if c == nil {
		return chunk{}, false
	}
	sp.bytes.Add(-int64(cap(c.data)))
	if cap(c.data) < size-size/4 {
		return chunk{}, false
	}
	return *c, true
}

// touch writes a zero into every page of the first n elements of s's
// backing array (n <= cap(s)), which nothing has written yet; where the
// system can, it has the kernel fault the pages in at once instead
// (populate), which costs about half the processor time of a fault per
// page.
func touch[T any](s []T, n int) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s[:n]))), uintptr(n)*unsafe.Sizeof(*new(T)))
	if populate(b) {
		return
	}
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
}
