package ws

import (
	"time"

	"pigeon"
)

// SetReadWait sets how long a replay or receive frame waits for room in
// the read pool of servers made after it; the returned func restores it.
func SetReadWait(d time.Duration) (restore func()) {
	old := readWait
	readWait = d
	return func() { readWait = old }
}

// SetPublishBatchLimit sets how many messages the client puts in one
// frame, for benchmarks that compare batches with corked single frames;
// the returned func restores it. Not for concurrent use with sessions.
func SetPublishBatchLimit(n int) (restore func()) {
	old := publishBatchLimit
	publishBatchLimit = n
	return func() { publishBatchLimit = old }
}

// PendingDeliveries returns how many deliveries of the server's
// subscriptions wait for the client's answer, their frames written or not.
func (s *Server) PendingDeliveries() int {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		for _, ss := range c.subs {
			ss.mu.Lock()
			n += len(ss.pending)
			ss.mu.Unlock()
		}
		c.mu.Unlock()
	}
	return n
}

// QueuedDeliveries returns how many deliveries of a client subscription
// wait for a worker.
func QueuedDeliveries(sub pigeon.Subscription) int {
	cs := sub.(*clientSub)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.queue)
}

// ReceivedThrough returns the highest sequence that reached a client
// subscription, queued for a worker or dropped (at most once).
func ReceivedThrough(sub pigeon.Subscription) uint64 {
	return sub.(*clientSub).lastSeq.Load()
}

// ParkedWorkers returns how many op workers are parked waiting for an op
// (or about to): goroutines that count in runtime.NumGoroutine but belong
// to no connection.
func ParkedWorkers() int { return int(opWorkers.idle.Load()) }

// HoldWriter takes the write lock of s's connection, as its writer does
// for a burst; release gives it back.
func HoldWriter(s *Session) (release func()) {
	cc, err := s.conn()
	if err != nil {
		panic(err)
	}
	cc.wmu.Lock()
	return cc.wmu.Unlock
}

// QueuedFrames returns how many frames of s's connection wait for its
// writer in the call queue.
func QueuedFrames(s *Session) int64 {
	cc, err := s.conn()
	if err != nil {
		panic(err)
	}
	return cc.queued.Load()
}

// MaxOrphanEnds is how many subscriptions it never opened a connection
// ends at once.
const MaxOrphanEnds = maxOrphanEnds
