package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// vouching is what a Watch knows of whether this node is current
// (CurrentUntil). It is the Watch's own.
type vouching struct {
	// sent is when the last write of this node's record that succeeded
	// was sent, in the present spell of writes each of which followed
	// the one before within currentFor (zero: none yet).
	sent time.Time
	// current: this node has applied every change made before the first
	// write of the spell; target, when set, is what it must apply to be.
	current bool
	target  catchUp
}

// catchUp is the last entry of the directory's keys and of the contracts
// bucket, read at once after a write of this node's record.
type catchUp struct {
	dir, con uint64
	at       time.Time // when it was read; zero: not read
}

// CurrentUntil implements pigeon.ClusterCurrent: the moment until which
// this node's engine may authorize on what it applied. Another node's
// barrier waits for this one while its record in <P>_applied is younger
// than Options.Liveness, as stamped by the server that stored it; this
// node is vouched for until two thirds of Liveness (currentFor) after it
// sent its last write of that record that succeeded, so its engine stops
// authorizing a third of Liveness before any other node stops waiting
// for it: room for the nodes' clocks to differ and for the engine to
// look. It is vouched for
//
//   - from NewCluster's write of the record, which comes before the
//     engine's first load of the directory;
//   - while the writes of the record succeed each within currentFor of
//     the last one that did, and this node has caught up with every
//     change made before the first of them (Watch: the directory read
//     again when its watches begin, the contracts changed since the last
//     watch applied; afterwards, the last entries of the directory and of
//     the contracts, read after that first write, applied).
//
// A write that comes later than that (the store unreachable from this
// node, a stalled link, a watch that stalled) may come after the others
// stopped waiting for this node and reported a change done that it has
// not heard of; it begins a new spell, and the node is vouched for again
// only once it has caught up as above. Options.Liveness is the one
// setting: the bound, the beat (a third of it) and the others' wait all
// follow from it.
func (c *Cluster) CurrentUntil() time.Time {
	if n := c.until.Load(); n > 0 {
		return time.Unix(0, int64(n))
	}
	return time.Time{}
}

// currentFor is how long after a write of this node's record that
// succeeded it is vouched for: two thirds of Options.Liveness, so that
// one beat (every third) may fail and the node still be current, and the
// others wait a third of Liveness longer.
func (c *Cluster) currentFor() time.Duration { return 2 * c.s.opts.Liveness / 3 }

// vouch moves CurrentUntil to currentFor after sent, unless it is later
// already.
func (c *Cluster) vouch(sent time.Time) {
	if until := sent.Add(c.currentFor()).UnixNano(); until > 0 {
		maxRev(&c.until, uint64(until))
	}
}

// restart forgets the spell of writes: a Watch begins, or ends.
func (c *Cluster) restart() { c.vouching = vouching{} }

// put writes done to this node's record in <P>_applied, within
// currentFor: a write that takes longer keeps the node current no more.
func (c *Cluster) put(ctx context.Context) error {
	b, _ := json.Marshal(c.done)
	ctx, cancel := context.WithTimeout(ctx, c.currentFor())
	defer cancel()
	_, err := c.applied.Put(ctx, c.recordKey(), b)
	return err
}

// confirm writes what this node applied to its record in <P>_applied. A
// failed write is made up for by the next one. A write that ends
// currentFor or more after the last one that succeeded was sent ends the
// spell (see CurrentUntil); one that succeeds then begins the next, and
// the last entries it must catch up with are read.
func (c *Cluster) confirm(ctx context.Context) {
	sent := time.Now()
	c.confirmed = sent
	err := c.put(ctx)
	if !c.sent.IsZero() && time.Since(c.sent) >= c.currentFor() {
		c.restart()
	}
	if err != nil {
		return
	}
	c.sent = sent
	if !c.current && c.target.at.IsZero() {
		c.aim(ctx)
	}
	c.settle()
}

// aim reads the last entries of the directory's keys and of the
// contracts bucket, from their streams' leaders: once this node has
// applied them, it has applied every change made before the spell's
// first write. A read that fails is made again after the next write.
func (c *Cluster) aim(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.currentFor())
	defer cancel()
	last, err := c.s.directoryLast(ctx)
	if err != nil {
		return
	}
	con, err := leaderLastOp(ctx, c.s.nc, c.s.bucketName("contracts"), ">")
	if err != nil {
		return
	}
	t := catchUp{at: time.Now()}
	for _, rev := range last {
		t.dir = max(t.dir, rev)
	}
	if con != nil {
		t.con = con.Sequence
	}
	c.target = t
}

// settle vouches for this node from the spell's last write, once it has
// caught up.
func (c *Cluster) settle() {
	if !c.current {
		if c.target.at.IsZero() || c.done.Dir < c.target.dir || c.done.Con < c.target.con {
			return
		}
		c.current = true
	}
	if !c.sent.IsZero() {
		c.vouch(c.sent)
	}
}

// stuck fails when this node has not caught up within Options.Liveness of
// reading what it must apply (an entry removed before the watch read it,
// a watch that no longer delivers): the watch starts again, and reads
// anew what changed before it began.
func (c *Cluster) stuck() error {
	if c.current || c.target.at.IsZero() || time.Since(c.target.at) < c.s.opts.Liveness {
		return nil
	}
	return fmt.Errorf("jetstream: this node's watch has not caught up with the changes made before %s in %s; starting again",
		c.target.at.Format(time.RFC3339Nano), c.s.opts.Liveness)
}
