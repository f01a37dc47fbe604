package jetstream

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// echo is what this node knows of its own watch of <P>_applied from its
// own record: every write of it that succeeded comes back through that
// watch, after every record stored before it (a stream delivers in
// order). A write that does not come back tells of a watch that does not
// deliver (a consumer that stalls without an error, the Watch loop held
// up) and whose view of the others' records is no longer the present's,
// however fresh or stale they look in it. Guarded by Cluster.mu.
type echo struct {
	// pending are the writes that succeeded and have not come back yet,
	// oldest first (at most maxPendingWrites: the oldest is kept, the
	// next ones make room).
	pending []write
	// sent is when the last write that came back was sent: the watch
	// has delivered every record stored before then (zero: none).
	sent time.Time
	// heard is the server's timestamp of the last entry of this node's
	// record the watch delivered: a clock the others' records' stamps
	// are comparable with.
	heard time.Time
}

// write is a write of this node's record that succeeded: its revision,
// when it was sent and when it was answered.
type write struct {
	rev        uint64
	sent, back time.Time
}

// maxPendingWrites bounds the writes an echo keeps while they do not come
// back; the watch starts again long before (see unheard).
const maxPendingWrites = 256

// wrote records a write of this node's record that succeeded: rev, sent
// at sent.
func (c *Cluster) wrote(rev uint64, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.echo.pending; len(p) == maxPendingWrites {
		c.echo.pending = append(p[:1], p[2:]...)
	}
	c.echo.pending = append(c.echo.pending, write{rev: rev, sent: sent, back: time.Now()})
}

// heardLocked records e, an entry of this node's record the watch
// delivered: every write up to its revision has come back. With c.mu
// held.
func (c *Cluster) heardLocked(e jetstream.KeyValueEntry) {
	n := 0
	for n < len(c.echo.pending) && c.echo.pending[n].rev <= e.Revision() {
		n++
	}
	if n > 0 {
		if s := c.echo.pending[n-1].sent; s.After(c.echo.sent) {
			c.echo.sent = s
		}
		c.echo.pending = append(c.echo.pending[:0], c.echo.pending[n:]...)
	}
	if e.Created().After(c.echo.heard) {
		c.echo.heard = e.Created()
	}
}

// forgetWrites drops the writes not come back: a Watch begins, and its
// watch of <P>_applied delivers this node's record anew.
func (c *Cluster) forgetWrites() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.echo.pending = c.echo.pending[:0]
}

// gone reports whether p's record is older than Options.Liveness both by
// this node's clock and by the watch's own: the watch delivered a write
// of this node's record stored more than Liveness after p's last, so p
// wrote nothing in between. A record that only looks old (the watch
// stalled, or holds the next write back) is not gone. With c.mu held.
func (c *Cluster) gone(p peer) bool {
	l := c.s.opts.Liveness
	return time.Since(p.at) > l && c.echo.heard.Sub(p.at) > l
}

// unproven reports whether p's record is older than Options.Liveness by
// this node's clock but not yet by the watch's (gone): a write of this
// node's record would tell. With c.mu held.
func (c *Cluster) unproven(p peer) bool {
	return time.Since(p.at) > c.s.opts.Liveness && !c.gone(p)
}

// heardSince reports whether the watch has delivered a write of this
// node's record sent at since or later: it has delivered every record
// stored before since. With c.mu held.
func (c *Cluster) heardSince(since time.Time) bool { return !c.echo.sent.Before(since) }

// ask has the Watch write this node's record at once (see Barrier),
// unless it is asked already.
func (c *Cluster) ask() {
	select {
	case c.probe <- struct{}{}:
	default:
	}
}

// unheard fails when a write of this node's record that succeeded has not
// come back through the watch within Options.Liveness of its answer: the
// watch starts again and reads every record anew. The Watch calls it
// having taken what the watch holds for it, so a loop held up (a reload)
// does not count; a watch that delivers comes back within milliseconds.
func (c *Cluster) unheard() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.echo.pending) == 0 {
		return nil
	}
	w := c.echo.pending[0]
	if ago := time.Since(w.back); ago >= c.s.opts.Liveness {
		return fmt.Errorf("jetstream: this node's watch of %s has not delivered this node's own record, written %s ago (revision %d); starting again",
			c.s.bucketName("applied"), ago.Round(time.Millisecond), w.rev)
	}
	return nil
}

// drainRecords hands see every entry the watch of <P>_applied holds now;
// false when the watch ended.
func (c *Cluster) drainRecords(w jetstream.KeyWatcher) bool {
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return false
			}
			c.see(e)
		default:
			return true
		}
	}
}
