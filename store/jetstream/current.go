package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	// check, while current: the last entries read again at a beat, which
	// the watch has not applied yet (zero: none waiting); checked is
	// when the last of them (or the spell's target) that it applied was
	// read: every change made before it is applied.
	check   catchUp
	checked time.Time
}

// catchUp is the last entry of the directory's keys and of the contracts
// bucket, read at once after a write of this node's record.
type catchUp struct {
	dir, con uint64
	at       time.Time // when the read began; zero: not read
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
//     the contracts, read after that first write, applied);
//   - and, all along, no longer than Liveness after the last such read
//     its watch applied: at every beat the last entries are read again
//     (once the watch applied the ones read before), so a watch that
//     stops delivering while the writes still succeed (a consumer that
//     stalls without an error) has the node refuse less than Liveness
//     after the first change it did not deliver, rather than authorize
//     on what it applied for as long as the writes go on. So do reads
//     that fail for Liveness: the node cannot tell what it missed.
//
// A write that comes later than that (the store unreachable from this
// node, a stalled link, a watch that stalled) may come after the others
// stopped waiting for this node and reported a change done that it has
// not heard of; it begins a new spell, and the node is vouched for again
// only once it has caught up as above. A read the watch has not applied
// within Liveness starts the watch again (stuck). Options.Liveness is the
// one setting: the bound, the beat (a third of it) and the others' wait
// all follow from it.
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

// vouch moves CurrentUntil to until, unless it is later already.
func (c *Cluster) vouch(until time.Time) {
	if n := until.UnixNano(); n > 0 {
		maxRev(&c.until, uint64(n))
	}
}

// restart forgets the spell of writes: a Watch begins, or ends.
func (c *Cluster) restart() { c.vouching = vouching{} }

// put writes done to this node's record in <P>_applied, within
// currentFor: a write that takes longer keeps the node current no more.
// A write that succeeded is awaited back through the watch (echo).
func (c *Cluster) put(ctx context.Context) error {
	b, _ := json.Marshal(c.done)
	ctx, cancel := context.WithTimeout(ctx, c.currentFor())
	defer cancel()
	sent := time.Now()
	rev, err := c.applied.Put(ctx, c.recordKey(), b)
	if err == nil {
		c.wrote(rev, sent)
	}
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

// aim reads what this node must apply to have applied every change made
// before the spell's first write (lastChanges). A read that fails is made
// again after the next write.
func (c *Cluster) aim(ctx context.Context) {
	if t, err := c.lastChanges(ctx); err == nil {
		c.target = t
	}
}

// recheck, at a beat of a node that is current, reads the last entries
// again once the watch applied those read at the beat before: the next
// bound of the node's vouching (see CurrentUntil). A read that fails is
// made again at the next beat.
func (c *Cluster) recheck(ctx context.Context) {
	if !c.current || !c.check.at.IsZero() {
		return
	}
	if t, err := c.lastChanges(ctx); err == nil {
		c.check = t
	}
	c.settle()
}

// lastChanges reads the last entries of the directory's keys and of the
// contracts bucket, from their streams' leaders: once this node has
// applied them, it has applied every change made before the read began.
// It costs two reads of one entry each: the last entry of the store's
// key-value stream, which is the directory's last as a rule, and the
// contracts bucket's; when the former is of another key (the store keeps
// a few others, rarely written) four more, one per directory bucket.
func (c *Cluster) lastChanges(ctx context.Context) (catchUp, error) {
	ctx, cancel := context.WithTimeout(ctx, c.currentFor())
	defer cancel()
	t := catchUp{at: time.Now()}
	bucket := c.s.bucketName("kv")
	m, err := leaderLastOp(ctx, c.s.nc, bucket, ">")
	if err != nil {
		return catchUp{}, err
	}
	if m != nil && isDirectoryKey(strings.TrimPrefix(m.Subject, "$KV."+bucket+".")) {
		t.dir = m.Sequence
	} else if m != nil {
		last, err := c.s.directoryLast(ctx)
		if err != nil {
			return catchUp{}, err
		}
		for _, rev := range last {
			t.dir = max(t.dir, rev)
		}
	}
	con, err := leaderLastOp(ctx, c.s.nc, c.s.bucketName("contracts"), ">")
	if err != nil {
		return catchUp{}, err
	}
	if con != nil {
		t.con = con.Sequence
	}
	return t, nil
}

// isDirectoryKey reports whether key, of the store's KV bucket, is one
// the watch of the directory delivers (a key of a directory bucket).
func isDirectoryKey(key string) bool {
	return directoryKeyBucket(key) >= 0 && strings.Count(key, ".") == 1
}

// reached reports whether this node applied t.
func (c *Cluster) reached(t catchUp) bool { return c.done.Dir >= t.dir && c.done.Con >= t.con }

// awaits reports whether rev, a directory change the watch delivered, is
// the last entry a catch-up or a check waits for (or later), not applied
// yet: it is applied at once, not only at the end of a burst of changes,
// so that a watch that keeps up under a steady stream of changes is not
// taken for one that stalled.
func (c *Cluster) awaits(rev uint64) bool {
	for _, t := range [...]catchUp{c.target, c.check} {
		if !t.at.IsZero() && c.done.Dir < t.dir && rev >= t.dir {
			return true
		}
	}
	return false
}

// settle vouches for this node from the spell's last write, once it has
// caught up, and no longer than Liveness after the last read of the last
// entries it applied.
func (c *Cluster) settle() {
	if !c.current {
		if c.target.at.IsZero() || !c.reached(c.target) {
			return
		}
		c.current, c.checked = true, c.target.at
	}
	if !c.check.at.IsZero() && c.reached(c.check) {
		c.checked, c.check = c.check.at, catchUp{}
	}
	if c.sent.IsZero() {
		return
	}
	until := c.sent.Add(c.currentFor())
	if stale := c.checked.Add(c.s.opts.Liveness); stale.Before(until) {
		until = stale
	}
	c.vouch(until)
}

// stuck fails when this node has not applied what it read it must apply
// within Options.Liveness of reading it (an entry removed before the
// watch read it, a watch that no longer delivers): the watch starts
// again, and reads anew what changed before it began.
func (c *Cluster) stuck() error {
	t := c.target
	if c.current {
		t = c.check
	}
	if t.at.IsZero() || c.reached(t) || time.Since(t.at) < c.s.opts.Liveness {
		return nil
	}
	return fmt.Errorf("jetstream: this node's watch has not applied the changes made before %s in %s; starting again",
		t.at.Format(time.RFC3339Nano), c.s.opts.Liveness)
}
