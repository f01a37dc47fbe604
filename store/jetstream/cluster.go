package jetstream

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
	"pigeon/store"
)

// A reply whose notice is not written is told to its replier
// (pigeon.ClusterReplyNotifier).
var _ pigeon.ClusterReplyNotifier = (*Cluster)(nil)

// Cluster is a pigeon.Cluster over the store's NATS connection:
//
//   - Notify of a new message is a core NATS publish (at most once: a lost
//     one is made up for by the fan-out's periodic look at the store,
//     within a second); of a reply, a key of the <P>_replies bucket (in
//     parts when it is larger than a NATS message may be);
//   - Watch reports other nodes' notices, and changes to the access
//     directory and to contracts seen through KV watches, which resume
//     after a reconnect;
//   - leases are keys of the <P>_leases bucket, taken with create or
//     compare-and-set, so one node holds a message's lease at a time, and
//     extended with compare-and-set while a handler runs (Extend).
//
// Rate limits stay per node.
//
// Barrier makes a revocation strict: each node keeps, in the <P>_applied
// bucket under its name and process, the highest revisions of the
// directory and the contracts it has applied, refreshed at least every
// third of Options.Liveness; a revoking node waits until every node whose
// record is fresh has applied its change. CurrentUntil holds the other
// side of that bound: a node stops authorizing before the others stop
// waiting for it.
type Cluster struct {
	s                        *Store
	leases, replies, applied jetstream.KeyValue
	done                     appliedRevs   // what this node applied; Watch's own, but Inst, set once
	confirmed                time.Time     // when Watch last wrote done
	vouching                               // Watch's own (see CurrentUntil)
	until                    atomic.Uint64 // CurrentUntil, in Unix nanoseconds
	dirWant                  dirRevs       // per directory bucket, the last change Watch delivered
	// repDone is the revision of the last reply notice Watch read (at
	// first, the <P>_replies bucket's last when the Cluster was made): a
	// watch begun again after a failure reads the notices written while
	// none ran, so a requester on this node is not left to time out.
	repDone uint64
	// knownDir and knownCon are the highest revisions of a directory key
	// and of a contract this node's watch has read (at its start, or
	// delivered), applied or about to be: what a barrier waits for
	// besides this node's own writes (see Barrier).
	knownDir, knownCon atomic.Uint64

	probe chan struct{} // a barrier asks Watch to write this node's record (ask)

	mu    sync.Mutex
	peers map[string]peer // by record key (node and process), from the <P>_applied bucket
	ready bool            // Watch runs and peers holds every record
	echo  echo            // this node's own record, as its watch delivers it back
	moved chan struct{}   // closed and replaced when peers or echo changes
	live  atomic.Int32    // LiveNodes: 1 + the peers live at the last count

	lostReplies atomic.Uint64 // LostReplies
}

var (
	_ pigeon.Cluster        = (*Cluster)(nil)
	_ pigeon.ClusterBarrier = (*Cluster)(nil)
	_ pigeon.ClusterCurrent = (*Cluster)(nil)
	_ pigeon.ClusterSize    = (*Cluster)(nil)
	_ pigeon.LeaseExtender  = (*Cluster)(nil)
)

// appliedRevs is a node's record in the <P>_applied bucket: the highest
// revisions of the directory keys and of the contracts bucket it applied.
type appliedRevs struct {
	Dir uint64 `json:"dir"`
	Con uint64 `json:"con"`
	// Inst names this process among those given its node name: in its
	// record's key (recordKey), its leases and its notices.
	Inst string `json:"inst,omitempty"`
}

// peer is another node's last record, with when it was written.
type peer struct {
	appliedRevs
	at time.Time
}

// appliedTTL is how long a node's record outlives its last refresh; only
// a record refreshed within Options.Liveness counts.
const appliedTTL = time.Hour

// leaseMarkerTTL is how long a settled message's lease key is kept; after
// it, Acquire finds the message done in the group's stored progress.
const leaseMarkerTTL = 24 * time.Hour

// replyTTL is how long a reply routed to other nodes is kept for them: as
// long as the engine parks an unclaimed reply.
const replyTTL = 5 * time.Minute

// NewCluster returns the Cluster of the nodes sharing s's prefix.
func NewCluster(ctx context.Context, s *Store) (*Cluster, error) {
	c := &Cluster{s: s, peers: map[string]peer{}, moved: make(chan struct{}), probe: make(chan struct{}, 1)}
	c.done.Inst = rand.Text()
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		ttl  time.Duration
	}{{&c.leases, "leases", leaseMarkerTTL}, {&c.replies, "replies", replyTTL}, {&c.applied, "applied", appliedTTL}} {
		full := s.bucketName(b.name)
		kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: full, History: 1, TTL: b.ttl, Storage: s.storage(), Replicas: s.opts.Replicas})
		if err != nil {
			return nil, s.fail(ctx, fmt.Errorf("jetstream: bucket %s: %w", full, err))
		}
		*b.kv = kv
	}
	// The first watch reports every contract change made from now on: the
	// engine this Cluster is given to loads no contract before it is
	// built, but serves (and loads contracts) before its watch begins.
	con, err := lastRevision(ctx, s.contracts)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	c.done.Con = con
	if c.repDone, err = lastRevision(ctx, c.replies); err != nil {
		return nil, s.fail(ctx, err)
	}
	// The record is written now, before the engine loads the directory:
	// the others wait for this node from now on (it applied nothing
	// yet), so its engine may serve on what it loads until its watch has
	// caught up, within currentFor of this write.
	sent := time.Now()
	if c.put(ctx) == nil {
		c.vouch(sent.Add(c.currentFor()))
	}
	return c, nil
}

// notice is a change one node tells the others.
type notice struct {
	Node string `json:"node"`
	// Inst is the process that sent it (appliedRevs.Inst): a notice of
	// another process given this node's name is not this one's own.
	Inst   string               `json:"inst,omitempty"`
	Change pigeon.ClusterChange `json:"change"`
	// Parts and Ref: a reply's notice too large for one NATS message
	// (max_payload) is kept in Parts keys of the <P>_replies bucket
	// (partKey of Ref), written before this notice, which carries no
	// reply; the other nodes read them from the bucket's leader.
	Parts int    `json:"parts,omitempty"`
	Ref   string `json:"ref,omitempty"`
}

// maxReplyParts bounds the parts of one reply's notice a node reads.
const maxReplyParts = 1024

// partKey is the key of part i of the reply notice ref: three tokens,
// where a notice's key is one, so that the watch of notices (the keys of
// one token) does not carry the parts.
func partKey(ref string, i int) string { return "p." + ref + "." + strconv.Itoa(i) }

// noticeSizes returns how large a reply's notice written whole may be
// (the server's max_payload less room for the subject and headers), and
// how many bytes of a larger one each part carries: three quarters of
// that, so that a part read back through the JetStream API (its data in
// base64) fits in one NATS message too.
func (c *Cluster) noticeSizes() (whole, part int) {
	limit := int(c.s.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	whole = max(limit-1024, limit/2)
	return whole, whole * 3 / 4
}

// own reports whether this process sent n.
func (c *Cluster) own(n notice) bool { return n.Node == c.s.opts.Node && n.Inst == c.done.Inst }

func (c *Cluster) eventSubject() string { return c.s.pfx + ".ev" }

// Notify implements pigeon.Cluster. A new message's notice is a core NATS
// publish; a reply is kept in the <P>_replies bucket (for as long as a
// node parks a reply), which every node watches, so that it reaches its
// requester also across a reconnect. A reply's notice larger than one
// NATS message may be (max_payload: the reply's data, base64 in JSON,
// grows by a third) is written in parts first, and its notice then
// names them (notice.Parts), rather than refused by the server and lost.
//
// A reply's notice is written as NotifyReply writes it, within
// Options.Timeout; one it could not write is counted (LostReplies).
func (c *Cluster) Notify(ch pigeon.ClusterChange) {
	if ch.Kind != pigeon.ChangeReply {
		b, err := json.Marshal(notice{Node: c.s.opts.Node, Inst: c.done.Inst, Change: ch})
		if err == nil {
			_ = c.s.nc.Publish(c.eventSubject(), b)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.Timeout)
	defer cancel()
	_ = c.NotifyReply(ctx, ch)
}

// NotifyReply writes the notice of the reply ch (pigeon.ChangeReply) for
// the other nodes, and returns an error (store.ErrNoQuorum, when the
// bucket's replicas did not answer) if it could not before ctx ends: the
// requester, should it wait on another node, then gets no reply but its
// timeout. A write the bucket did not answer (no quorum, its leader
// moving) is tried again, with pauses as contended writes take them, each
// try bounded by a quarter of Options.Timeout; every try of a write
// carries one deduplication id, so a try that was kept although its
// answer was lost is not kept twice, and the notice reaches each node at
// most once. A notice not written counts in LostReplies.
func (c *Cluster) NotifyReply(ctx context.Context, ch pigeon.ClusterChange) error {
	err := c.notifyReply(ctx, ch)
	if err != nil {
		c.lostReplies.Add(1)
	}
	return err
}

// LostReplies returns how many reply notices this Cluster could not
// write (NotifyReply failed) since it was made.
func (c *Cluster) LostReplies() uint64 { return c.lostReplies.Load() }

func (c *Cluster) notifyReply(ctx context.Context, ch pigeon.ClusterChange) error {
	n := notice{Node: c.s.opts.Node, Inst: c.done.Inst, Change: ch}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	ref := rand.Text()
	if whole, size := c.noticeSizes(); len(b) > whole {
		n.Ref, n.Parts, n.Change.Reply = ref, (len(b)+size-1)/size, nil
		if n.Parts > maxReplyParts {
			return fmt.Errorf("jetstream: reply to %q is %d bytes, over the %d parts of %d bytes a notice may have", ch.RequestID, len(b), maxReplyParts, size)
		}
		for i := range n.Parts {
			if err := c.putReply(ctx, partKey(n.Ref, i), ref+"."+strconv.Itoa(i), b[i*size:min(len(b), (i+1)*size)]); err != nil {
				return err
			}
		}
		if b, err = json.Marshal(n); err != nil {
			return err
		}
	}
	return c.putReply(ctx, token(ch.RequestID), ref, b)
}

// putReply writes val under key of the <P>_replies bucket, with the
// deduplication id msgID, trying again (see NotifyReply) while the
// bucket does not answer.
func (c *Cluster) putReply(ctx context.Context, key, msgID string, val []byte) error {
	bucket := c.s.bucketName("replies")
	msg := nats.NewMsg("$KV." + bucket + "." + key)
	msg.Data = val
	pause := 10 * time.Millisecond
	for {
		tctx, cancel := context.WithTimeout(ctx, c.s.opts.Timeout/4)
		_, err := c.s.js.PublishMsg(tctx, msg, jetstream.WithExpectStream("KV_"+bucket), jetstream.WithMsgID(msgID))
		cancel()
		if err == nil {
			return nil
		}
		// A try's own timeout, or the bucket's replicas not answering,
		// is store.ErrNoQuorum (fail, with a ctx that has not ended).
		err = c.s.fail(context.WithoutCancel(ctx), err)
		if ctx.Err() != nil || !errors.Is(err, store.ErrNoQuorum) {
			return fmt.Errorf("jetstream: reply notice %s not written: %w", key, err)
		}
		t := time.NewTimer(pause/2 + mrand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("jetstream: reply notice %s not written: %w", key, err)
		case <-t.C:
		}
		pause = min(2*pause, casPauseMax)
	}
}

// replyParts reads the reply notice n names in parts (notice.Parts) from
// the <P>_replies bucket's leader, which has every part: they were
// written before n. False when a part is missing or the notice they make
// is not n's.
func (c *Cluster) replyParts(ctx context.Context, n notice) (notice, bool) {
	if n.Parts > maxReplyParts {
		return notice{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.opts.Timeout)
	defer cancel()
	var b []byte
	for i := range n.Parts {
		m, err := leaderLast(ctx, c.s.nc, c.s.bucketName("replies"), partKey(n.Ref, i))
		if err != nil || m == nil {
			return notice{}, false
		}
		b = append(b, m.Data...)
	}
	var whole notice
	if json.Unmarshal(b, &whole) != nil || whole.Node != n.Node || whole.Inst != n.Inst || whole.Change.RequestID != n.Change.RequestID {
		return notice{}, false
	}
	return whole, true
}

// Watch implements pigeon.Cluster. It reports a directory change as soon
// as its watches are in place, so that nothing changed before is missed,
// and confirms in the <P>_applied bucket what it applied (see Barrier).
// Only one Watch of a Cluster runs at a time.
//
// It renews this node's record first, and fails if it cannot: from then
// on the others wait for this node, so what the watches miss (what
// changed before they began) is all they may have passed it over for,
// and that is read when the watches begin. Only once it is applied does
// Watch vouch for the node (CurrentUntil).
func (c *Cluster) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	c.restart()
	defer c.restart()
	c.forgetWrites()
	if c.confirm(ctx); c.sent.IsZero() {
		return c.s.fail(ctx, fmt.Errorf("jetstream: this node's record in %s could not be written", c.s.bucketName("applied")))
	}
	ch := make(chan *nats.Msg, 1024)
	sub, err := c.s.nc.ChanSubscribe(c.eventSubject(), ch)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var dirKeys []string
	for _, b := range directoryBuckets {
		dirKeys = append(dirKeys, token(b)+".*")
	}
	dir, err := c.s.kv.WatchFiltered(ctx, dirKeys, jetstream.UpdatesOnly())
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer dir.Stop()
	// A watch replays the contracts changed since the last one it applied
	// (the first: since NewCluster), so that a revocation made while the
	// engine served without a watch (starting, or after a failure) is
	// applied before it is confirmed.
	// Deletions included: a catch-up (aim) waits for the bucket's last
	// entry, whatever it is.
	con, err := c.s.contracts.WatchAll(ctx, jetstream.ResumeFromRevision(c.done.Con+1))
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer con.Stop()
	// Notices only (keys of one token): not the parts of a large one.
	// From the first this node has not read: those written while no
	// watch ran (the engine starting, or a failed watch down) included.
	rep, err := c.replies.WatchFiltered(ctx, []string{"*"}, jetstream.ResumeFromRevision(c.repDone+1), jetstream.IgnoreDeletes())
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer rep.Stop()
	peers, err := c.applied.WatchAll(ctx)
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer peers.Stop()
	// What changed before the watches began (while the engine started, or
	// while a failed watch was down) is read once now; the directory as
	// it was then counts as applied.
	dirRev, err := lastRevision(ctx, c.s.kv)
	if err != nil {
		return c.s.fail(ctx, err)
	}
	// The directory counts as applied once a reload has read every
	// bucket's last change: the replica that answers it may be behind.
	last, err := c.s.directoryLast(ctx)
	if err != nil {
		return c.s.fail(ctx, err)
	}
	for i := range last {
		c.dirWant[i] = max(c.dirWant[i], last[i])
		maxRev(&c.knownDir, last[i])
	}
	maxRev(&c.knownCon, c.done.Con)
	c.s.raiseFloor(c.dirWant)
	defer c.unwatched(ctx)
	c.applyDirectory(ctx, fn, dirRev)
	c.confirm(ctx)
	beat := time.NewTicker(c.s.opts.Liveness / 3)
	defer beat.Stop()
	revoked := false // a revocation among the contract changes not confirmed yet
	for {
		c.settle()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-beat.C:
			c.confirm(ctx)
			c.recheck(ctx)
			// The records the watch holds are taken first: a write of
			// this node's record still to come back is then one the
			// watch has not delivered, not one this loop was slow to
			// take.
			if !c.drainRecords(peers) {
				return errors.New("jetstream: applied watch ended")
			}
			c.count()
			if err := c.stuck(); err != nil {
				return err
			}
			if err := c.unheard(); err != nil {
				return err
			}
		case <-c.probe:
			c.confirm(ctx)
		case e, ok := <-peers.Updates():
			if !ok {
				return errors.New("jetstream: applied watch ended")
			}
			c.see(e)
		case m := <-ch:
			var n notice
			if json.Unmarshal(m.Data, &n) == nil && !c.own(n) && n.Change.Kind == pigeon.ChangeAppended {
				fn(n.Change)
			}
		case e, ok := <-rep.Updates():
			if !ok {
				return errors.New("jetstream: reply watch ended")
			}
			if e == nil {
				continue
			}
			c.repDone = max(c.repDone, e.Revision())
			var n notice
			if json.Unmarshal(e.Value(), &n) != nil || c.own(n) || n.Change.Kind != pigeon.ChangeReply {
				continue
			}
			if n.Parts > 0 {
				var ok bool
				if n, ok = c.replyParts(ctx, n); !ok {
					continue
				}
			}
			fn(n.Change)
		case e, ok := <-dir.Updates():
			if !ok {
				return errors.New("jetstream: directory watch ended")
			}
			if e == nil {
				continue
			}
			if i := directoryKeyBucket(e.Key()); i >= 0 {
				c.dirWant[i] = max(c.dirWant[i], e.Revision())
				c.s.raiseFloor(c.dirWant)
				maxRev(&c.knownDir, e.Revision())
			}
			// A burst of changes is one reload, whether the stream held
			// more when it sent this one (Delta) or the watch holds more
			// already, which a reload now would read as well; the change
			// a catch-up or a check waits for is applied at once.
			if (e.Delta() == 0 && len(dir.Updates()) == 0) || c.awaits(e.Revision()) {
				c.applyDirectory(ctx, fn, e.Revision())
				c.confirm(ctx)
			}
		case e, ok := <-con.Updates():
			if !ok {
				return errors.New("jetstream: contract watch ended")
			}
			if e == nil {
				continue
			}
			maxRev(&c.knownCon, e.Revision())
			// The watched value is the change itself: no read of a replica
			// that may not have it yet.
			var rec store.ContractRecord
			id, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(e.Key(), "k"))
			if err == nil && json.Unmarshal(e.Value(), &rec) == nil && rec.Revoked {
				fn(pigeon.ClusterChange{Kind: pigeon.ChangeContract, ContractID: string(id), Revoked: true})
				revoked = true
			}
			c.done.Con = max(c.done.Con, e.Revision())
			// A new contract waits for the next beat; a revocation, which a
			// barrier waits for, is confirmed at once.
			if revoked && e.Delta() == 0 {
				c.confirm(ctx)
				revoked = false
			}
		}
	}
}

// directoryBuckets are the store.KV buckets of the access directory.
var directoryBuckets = [...]string{"accounts", "roles", "grants", "grants.revoked"}

// dirRevs holds one revision per directory bucket.
type dirRevs [len(directoryBuckets)]uint64

// directoryBucket returns b's index in directoryBuckets, or -1.
func directoryBucket(b string) int { return slices.Index(directoryBuckets[:], b) }

// directoryKeyBucket returns the index in directoryBuckets of the bucket
// of a key of the store's KV bucket, or -1.
func directoryKeyBucket(key string) int {
	tok, _, _ := strings.Cut(key, ".")
	for i, b := range directoryBuckets {
		if token(b) == tok {
			return i
		}
	}
	return -1
}

// directoryLast returns, per directory bucket, the revision of its last
// change (a deletion included), read from the stream's leader.
func (s *Store) directoryLast(ctx context.Context) (dirRevs, error) {
	var out dirRevs
	for i, b := range directoryBuckets {
		m, err := leaderLastOp(ctx, s.nc, s.bucketName("kv"), token(b)+".*")
		if err != nil {
			return out, err
		}
		if m != nil {
			out[i] = m.Sequence
		}
	}
	return out, nil
}

// lastRevision is the last revision written to kv.
func lastRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("jetstream: bucket %s: no stream state", st.Bucket())
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// applyDirectory has the engine reload the directory, again until every
// bucket's read came from a replica that has the last change the watch
// delivered of it: a replica a moment behind the one the watch read from
// must not undo a change. rev is the last change's revision. Meanwhile
// this node keeps confirming what it applied before, so a revocation
// waits for it (or fails unconfirmed) rather than pass it over as dead.
func (c *Cluster) applyDirectory(ctx context.Context, fn func(pigeon.ClusterChange), rev uint64) {
	pause := 10 * time.Millisecond
	for {
		c.s.seenMu.Lock()
		c.s.dirSeen = dirRevs{}
		c.s.seenMu.Unlock()
		fn(pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
		c.s.seenMu.Lock()
		seen := c.s.dirSeen
		c.s.seenMu.Unlock()
		fresh := true
		for i, want := range c.dirWant {
			fresh = fresh && seen[i] >= want
		}
		if fresh {
			c.done.Dir = max(c.done.Dir, rev)
			return
		}
		if time.Since(c.confirmed) >= c.s.opts.Liveness/3 {
			c.confirm(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// recordKey is the key of this process's record in <P>_applied: the
// node's name, then the process (appliedRevs.Inst). Two processes given
// one node name (see peerKey) each keep a record of their own: under one
// key, the others would see only whichever wrote last, and a revocation
// one of them confirmed would not wait for the other.
func (c *Cluster) recordKey() string { return token(c.s.opts.Node) + "." + c.done.Inst }

// recordNode returns the node name of a record's key in <P>_applied
// (recordKey, or the node's name alone).
func recordNode(key string) string {
	node, _, _ := strings.Cut(key, ".")
	name, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(node, "k"))
	if err != nil {
		return key
	}
	return string(name)
}

// unwatched marks the others' records unknown when the watch ends. When
// ctx ended (the engine shuts down) it removes this node's record, so that
// a node shut down cleanly is not waited for until its record goes stale;
// a watch that failed and will resume leaves it to go stale.
func (c *Cluster) unwatched(watchCtx context.Context) {
	c.mu.Lock()
	c.ready = false
	c.mu.Unlock()
	if watchCtx.Err() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.Timeout)
	defer cancel()
	_ = c.applied.Delete(ctx, c.recordKey())
}

// see records another node's record (or its removal), or this node's
// own as its watch delivers it back (echo); nil marks the end of the
// records there were when the watch began.
func (c *Cluster) see(e jetstream.KeyValueEntry) {
	key, other := c.peerKey(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	var r appliedRevs
	switch {
	case e == nil:
		c.ready = true
	case !other:
		c.heardLocked(e)
	case e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &r) != nil:
		delete(c.peers, key)
	default:
		c.peers[key] = peer{appliedRevs: r, at: e.Created()}
	}
	close(c.moved)
	c.moved = make(chan struct{})
	c.countLocked()
}

// peerKey is the key among c.peers of the process whose record e is;
// false for this process's own record. A record under this node's name
// that another process wrote (two processes given one node name: a
// copied configuration, a replacement started while the old process
// still serves) is a node of its own, which a revocation waits for and
// the live nodes count: skipping it as this node's would let a
// revocation return before a process that serves clients applied it.
func (c *Cluster) peerKey(e jetstream.KeyValueEntry) (string, bool) {
	if e == nil {
		return "", true
	}
	return e.Key(), e.Key() != c.recordKey()
}

// LiveNodes implements pigeon.ClusterSize: this node and the others whose
// record in <P>_applied was refreshed within Options.Liveness, as counted
// when a record last changed or at the last beat (every Liveness/3). It
// is 1 until this node's watch has read every record. A node drops out
// only once the watch has delivered a write of this node's own record
// stored more than Liveness after that node's last (see Barrier): a watch
// that stalls keeps the count it had rather than lose every other node.
func (c *Cluster) LiveNodes() int { return max(1, int(c.live.Load())) }

// count recounts the live nodes: a node that stops refreshing its record
// drops out once Liveness passed, without any change to report it.
func (c *Cluster) count() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.countLocked()
}

// countLocked is count with c.mu held.
func (c *Cluster) countLocked() {
	if !c.ready {
		return
	}
	n := 1
	for _, p := range c.peers {
		if !c.gone(p) {
			n++
		}
	}
	c.live.Store(int32(n))
}

// barrierWait is what a barrier waits for, as this node's watch of
// <P>_applied last told.
type barrierWait struct {
	late []string // the live nodes that have not applied the change
	// unheard: the watch has not delivered a write of this node's record
	// sent since the barrier began, so a record written meanwhile (a
	// node that started, or confirmed) may be missing from its view.
	unheard bool
	// unproven: a node among late looks stale by this node's clock, not
	// yet by the watch's (gone); a write of this node's record tells.
	unproven bool
	moved    <-chan struct{} // closed at the next change of any record
}

// lagging returns the live nodes that have not applied want yet, and a
// channel closed at the next change of any node's record.
func (c *Cluster) lagging(want appliedRevs) ([]string, <-chan struct{}) {
	w := c.waiting(want, time.Time{})
	return w.late, w.moved
}

// waiting returns what a barrier that began at began waits for, to have
// every live node apply want.
func (c *Cluster) waiting(want appliedRevs, began time.Time) barrierWait {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return barrierWait{late: []string{"(this node's watch of the others is not running)"}, moved: c.moved}
	}
	w := barrierWait{unheard: !c.heardSince(began), moved: c.moved}
	for k, p := range c.peers {
		if c.gone(p) || (p.Dir >= want.Dir && p.Con >= want.Con) {
			continue
		}
		w.unproven = w.unproven || c.unproven(p)
		name := recordNode(k)
		if name == c.s.opts.Node {
			name += " (another process)"
		}
		w.late = append(w.late, name)
	}
	slices.Sort(w.late)
	return w
}

// err is the error of a barrier that ended waiting for w.
func (w barrierWait) err(cause error) error {
	const unheard = "this node's watch of the others' records is not delivering (a write of its own record made since the wait began has not come back), so a node may be missed"
	switch {
	case len(w.late) == 0:
		return fmt.Errorf("jetstream: the change could not be confirmed: %s: %w", unheard, cause)
	case w.unheard:
		return fmt.Errorf("jetstream: nodes %s did not confirm the change, and %s: %w", strings.Join(w.late, ", "), unheard, cause)
	}
	return fmt.Errorf("jetstream: nodes %s did not confirm the change: %w", strings.Join(w.late, ", "), cause)
}

// Barrier implements pigeon.ClusterBarrier: it waits until every other
// node whose record in <P>_applied was refreshed within Options.Liveness
// has applied every directory and contract change this node wrote, or
// its watch read, or it read revoked (GetContract), before the call. Not
// only its own writes: a revocation retried after CLUSTER_UNCONFIRMED
// may reach another node, which applied it from the first one, or loads
// the contract revoked before its watch delivered the change, and writes
// nothing (a grant already revoked, a contract already revoked); its
// answer must wait for the node that lagged all the same. A node that
// stops refreshing (killed, cut off) drops out after Liveness; the wait
// ends with an error naming the nodes that did not confirm when ctx ends
// or Options.BarrierTimeout passes.
//
// What this node's watch of <P>_applied says is taken on evidence only,
// never on a guess: each write of this node's own record that succeeded
// comes back through that watch after every record stored before it
// (echo). The barrier has the Watch write the record when it begins, and
// confirms nothing until that write (or a later one) came back: every
// record stored before the barrier began has been seen, a node that
// started meanwhile included. And it passes a node over only once the
// watch has delivered a write of this node's record stored (by the
// server's clock, the one that stamps every record) more than Liveness
// after that node's last: it wrote nothing for Liveness. A watch that
// stalls without an error (a consumer paused, the Watch held up) so holds
// every barrier up, and it fails naming the cause, rather than pass every
// node over as its records seem to age; the Watch starts again once a
// write has not come back within Liveness (unheard).
func (c *Cluster) Barrier(ctx context.Context) error {
	began := time.Now()
	want := appliedRevs{
		Dir: max(c.s.dirRev.Load(), c.knownDir.Load()),
		Con: max(c.s.conRev.Load(), c.knownCon.Load()),
	}
	ctx, cancel := context.WithTimeout(ctx, c.s.opts.BarrierTimeout)
	defer cancel()
	recheck := time.NewTicker(max(c.s.opts.Liveness/10, time.Millisecond))
	defer recheck.Stop()
	c.ask()
	for {
		w := c.waiting(want, began)
		if len(w.late) == 0 && !w.unheard {
			return nil
		}
		select {
		case <-ctx.Done():
			return w.err(ctx.Err())
		case <-w.moved:
		case <-recheck.C: // a node's record may have gone stale
			// A write asked for may have failed; a node that looks stale
			// is passed over once a write tells.
			if w.unheard || w.unproven {
				c.ask()
			}
		}
	}
}

// leaseVal is the value of a lease key.
type leaseVal struct {
	Node string `json:"node,omitempty"`
	// Inst is the process holding it (appliedRevs.Inst): two processes
	// given one node name (a copied configuration, a replacement started
	// while the old process still serves) each hold only their own
	// leases, and a process restarted waits for its predecessor's to run
	// out, as any other node does.
	Inst    string `json:"inst,omitempty"`
	Until   int64  `json:"until,omitempty"` // Unix nanoseconds
	Attempt int    `json:"attempt,omitempty"`
	// Done: settled; Node and Inst then name the process that settled it
	// (none in a marker written before they did).
	Done bool `json:"done,omitempty"`
	// Released: the holder gave the lease up before Until (a nack, its
	// retry time), which Extend does not undo: an Extend the engine
	// started before the nack reports the lease lost rather than hold
	// the message a whole ack wait again. Acquire writes a lease anew.
	Released bool `json:"released,omitempty"`
}

// mine reports whether this process holds l (not done).
func (c *Cluster) mine(l leaseVal) bool {
	return !l.Done && l.Node == c.s.opts.Node && l.Inst == c.done.Inst
}

func leaseKey(key store.GroupKey, seq uint64) string {
	return progressKey(key) + "." + strconv.FormatUint(seq, 10)
}

// Acquire implements pigeon.Leaser. A lease nobody holds, or whose holder
// let it run out, is taken unless the group's stored progress has seq done.
// A lease found changed since it was read (another node took it, or a
// replica behind answered the read) is read again from the leaders of the
// leases and progress buckets, pausing longer each time (casRetry); when
// ctx ends meanwhile, Acquire fails with a *ContendedError.
func (c *Cluster) Acquire(ctx context.Context, key store.GroupKey, seq uint64, deadline time.Time) (pigeon.LeaseState, error) {
	k := leaseKey(key, seq)
	var out pigeon.LeaseState
	err := casRetry(ctx, c.s.bucketName("leases"), k, func(leader bool) (bool, error) {
		val, rev, marker, err := c.readLease(ctx, k, leader)
		if err != nil {
			return false, err
		}
		var prev leaseVal
		if val != nil {
			if err := json.Unmarshal(val, &prev); err != nil {
				return false, &store.CorruptError{File: c.s.bucketName("leases"), Reason: err.Error()}
			}
			if prev.Done {
				out = pigeon.LeaseState{Done: true}
				return true, nil
			}
			if until := time.Unix(0, prev.Until); time.Now().Before(until) && !c.mine(prev) {
				out = pigeon.LeaseState{Until: until}
				return true, nil
			}
		}
		g, _, _, err := c.s.loadGroupFrom(ctx, key, leader)
		if err != nil {
			return false, err
		}
		if g.IsDone(seq) {
			out = pigeon.LeaseState{Done: true}
			return true, nil
		}
		next := leaseVal{Node: c.s.opts.Node, Inst: c.done.Inst, Until: deadline.UnixNano(), Attempt: max(prev.Attempt, g.Attempts[seq]) + 1}
		b, _ := json.Marshal(next)
		if rev == 0 && !marker {
			_, err = c.leases.Create(ctx, k, b)
		} else {
			_, err = c.leases.Update(ctx, k, b, rev)
		}
		done, err := casDone(err)
		if done {
			out = pigeon.LeaseState{Acquired: true, Attempt: next.Attempt}
		}
		return done, c.s.fail(ctx, err)
	})
	if err != nil {
		return pigeon.LeaseState{}, err
	}
	return out, nil
}

// readLease reads lease key k: its value (nil when there is none) and
// revision, with a direct get or from the leases bucket's leader; marker
// is set when the leader holds a delete or purge marker of it, at rev.
func (c *Cluster) readLease(ctx context.Context, k string, leader bool) (val []byte, rev uint64, marker bool, err error) {
	if leader {
		m, err := leaderLastOp(ctx, c.s.nc, c.s.bucketName("leases"), k)
		if m == nil || err != nil {
			return nil, 0, false, c.s.fail(ctx, err)
		}
		if isMarker(m) {
			return nil, m.Sequence, true, nil
		}
		return m.Data, m.Sequence, false, nil
	}
	e, err := direct(ctx, c.s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return c.leases.Get(ctx, k) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, c.s.fail(ctx, err)
	}
	return e.Value(), e.Revision(), false, nil
}

// Release implements pigeon.Leaser. Every release is a compare-and-set
// of this process's lease at attempt, retried as Acquire's (casRetry,
// through ownLease): a write between its read and its own (this node's
// Extend, a replica behind answering the read) sends it back to read
// again rather than give up. A lease that is not this process's at
// attempt, as the bucket's leader tells (another process holds or
// settled it, taken after this one's ran out; this process leased the
// message again since, at a later attempt; or it is gone), is left as it
// is, and the release fails with a *pigeon.Error of code ACK_NOT_ALLOWED
// (errLeaseNotHeld): a release sent late, after this node's lock was let
// go, never ends the lease that followed it.
//
// A lease given up early (not done) is marked released with retryAt as
// its deadline; one released so already, as early or earlier, is no
// change. A done release marks this node's lease settled, or finds it
// settled by this process already (a release repeated): the answer
// settled nothing otherwise, and another node may run the message.
func (c *Cluster) Release(ctx context.Context, key store.GroupKey, seq uint64, attempt int, done bool, retryAt time.Time) error {
	if done {
		return c.settleLease(ctx, key, seq, attempt)
	}
	held, err := c.ownLease(ctx, leaseKey(key, seq), func(l leaseVal, present bool) (held, already bool, next leaseVal) {
		next = l
		next.Until, next.Released = retryAt.UnixNano(), true
		return present && c.mine(l) && l.Attempt == attempt, l.Released && l.Until <= retryAt.UnixNano(), next
	})
	if err != nil {
		return err
	}
	if !held {
		return errLeaseNotHeld(seq, attempt)
	}
	return nil
}

var _ pigeon.LeaseReturner = (*Cluster)(nil)

// Return implements pigeon.LeaseReturner: a compare-and-set of this
// process's lease of seq, at attempt, to attempt-1, released, due at
// retryAt, retried as Release's (casRetry). Acquire counts from the
// larger of the lease's attempt and the group's stored one: the engine
// lowers the stored one first, from attempt only (Store.LowerAttempt, a
// compare-and-set of the group's progress). A lease that is not this
// process's at attempt (another process's, settled by any, at another
// attempt, or gone), as the bucket's leader tells, is left as it is, and
// the answer is a *pigeon.Error of code ACK_NOT_ALLOWED (errNotReturned).
// One this process gave back already, as this call would (a Return
// repeated after its write's answer was lost), is no change.
func (c *Cluster) Return(ctx context.Context, key store.GroupKey, seq uint64, attempt int, retryAt time.Time) error {
	held, err := c.ownLease(ctx, leaseKey(key, seq), func(l leaseVal, present bool) (held, already bool, next leaseVal) {
		returned := l.Released && l.Attempt == attempt-1 && l.Until == retryAt.UnixNano()
		l2 := l
		l2.Attempt, l2.Until, l2.Released = attempt-1, retryAt.UnixNano(), true
		return present && c.mine(l) && (l.Attempt == attempt || returned), returned, l2
	})
	if err != nil {
		return err
	}
	if !held {
		return errNotReturned(seq, attempt)
	}
	return nil
}

// errNotReturned is the answer of a Return of a lease this process does
// not hold at attempt: ACK_NOT_ALLOWED, nothing written.
func errNotReturned(seq uint64, attempt int) error {
	return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is not this node's at attempt %d: another node took it after it ran out (and may have settled it), this node leased it again, or it is gone; nothing was given back", seq, attempt)
}

// settleLease marks this node's lease of seq at attempt done (Release,
// done): by compare-and-set at the revision read, so that a lease another
// node took meanwhile, or this node's next one, is never ended by a late
// answer. The marker names the process that settled it: a release
// repeated by it finds its own marker and writes nothing (settled, the
// message is leased at no attempt again). A lease that is not this
// process's at attempt (held or settled by another, at another attempt,
// or gone), as the bucket's leader tells, is left as it is, and the
// answer is errLeaseNotHeld. A marker naming nobody (written before
// markers named their process) counts as this node's.
func (c *Cluster) settleLease(ctx context.Context, key store.GroupKey, seq uint64, attempt int) error {
	held, err := c.ownLease(ctx, leaseKey(key, seq), func(l leaseVal, present bool) (held, already bool, next leaseVal) {
		settled := l.Done && (l.Node == "" || l.Node == c.s.opts.Node && l.Inst == c.done.Inst)
		return present && (settled || c.mine(l) && l.Attempt == attempt), settled, leaseVal{Node: c.s.opts.Node, Inst: c.done.Inst, Done: true}
	})
	if err != nil {
		return err
	}
	if !held {
		return errLeaseNotHeld(seq, attempt)
	}
	return nil
}

// ownLease changes lease key k by compare-and-set, retried as Acquire's
// (casRetry), when decide, given the lease as read (present false: no
// lease), finds it this process's (held): to next, unless the change is
// made already (already). A lease that is not held, as the bucket's
// leader tells (a replica behind may not have this node's lease yet), is
// left as it is, and held is false. A lease that does not decode is a
// *store.CorruptError.
func (c *Cluster) ownLease(ctx context.Context, k string, decide func(l leaseVal, present bool) (held, already bool, next leaseVal)) (bool, error) {
	held := true
	err := casRetry(ctx, c.s.bucketName("leases"), k, func(leader bool) (bool, error) {
		val, rev, _, err := c.readLease(ctx, k, leader)
		if err != nil {
			return false, err
		}
		var l leaseVal
		if val != nil {
			if err := json.Unmarshal(val, &l); err != nil {
				return false, &store.CorruptError{File: c.s.bucketName("leases"), Reason: err.Error()}
			}
		}
		var already bool
		var next leaseVal
		held, already, next = decide(l, val != nil)
		switch {
		case !held:
			return leader, nil
		case already:
			return true, nil
		}
		b, _ := json.Marshal(next)
		_, err = c.leases.Update(ctx, k, b, rev)
		done, err := casDone(err)
		return done, c.s.fail(ctx, err)
	})
	return held, err
}

// errLeaseNotHeld is the answer of a release of a lease this node does
// not hold at attempt: ACK_NOT_ALLOWED, as the engine refuses an answer
// to a delivery whose lease was lost, and as errNotReturned. It names the
// sequence and the attempt only: a group's name is the caller's text (the
// engine logs the subject beside it).
func errLeaseNotHeld(seq uint64, attempt int) error {
	return pigeon.NewError(pigeon.CodeAckNotAllowed, "the cluster lease of sequence %d is not this node's at attempt %d: another node took it after it ran out (and may have settled it), this node leased it again, or it is gone; the release changed nothing", seq, attempt)
}

// extendParallel bounds the lease keys one Extend call writes at once.
const extendParallel = 16

// Extend implements pigeon.LeaseExtender: each lease key is read and, when
// this node still holds it (not done, not another node's), written with
// the new deadline by compare-and-set, retried as Acquire's (casRetry), up
// to extendParallel keys at a time. A lease key another node took, or a
// node settled, or that is gone, as the bucket's leader tells, is
// reported lost. Each lease costs a read and a write (a second read and
// write when a replica behind answered the first read).
func (c *Cluster) Extend(ctx context.Context, key store.GroupKey, seqs []uint64, deadline time.Time) ([]uint64, error) {
	var (
		mu    sync.Mutex
		lost  []uint64
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, extendParallel)
	)
	for _, seq := range seqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			held, err := c.extend(ctx, leaseKey(key, seq), deadline)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if first == nil {
					first = err
				}
			case !held:
				lost = append(lost, seq)
			}
		}()
	}
	wg.Wait()
	slices.Sort(lost)
	return lost, first
}

// extend moves the deadline of this node's lease key k to deadline; false
// when this node does not hold it.
func (c *Cluster) extend(ctx context.Context, k string, deadline time.Time) (bool, error) {
	return c.ownLease(ctx, k, func(l leaseVal, present bool) (held, already bool, next leaseVal) {
		// Not held: gone, settled, another process's, or released by a
		// nack. Already: as long.
		next = l
		next.Until = deadline.UnixNano()
		return present && c.mine(l) && !l.Released, l.Until >= deadline.UnixNano(), next
	})
}
