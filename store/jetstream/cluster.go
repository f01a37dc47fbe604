package jetstream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon"
	"pigeon/store"
)

// Cluster is a pigeon.Cluster over the store's NATS connection:
//
//   - Notify of a new message is a core NATS publish (at most once: a lost
//     one is made up for by the fan-out's periodic look at the store,
//     within a second); of a reply, a key of the <P>_replies bucket;
//   - Watch reports other nodes' notices, and changes to the access
//     directory and to contracts seen through KV watches, which resume
//     after a reconnect;
//   - leases are keys of the <P>_leases bucket, taken with create or
//     compare-and-set, so one node holds a message's lease at a time.
//
// Rate limits stay per node.
type Cluster struct {
	s               *Store
	leases, replies jetstream.KeyValue
}

var _ pigeon.Cluster = (*Cluster)(nil)

// leaseMarkerTTL is how long a settled message's lease key is kept; after
// it, Acquire finds the message done in the group's stored progress.
const leaseMarkerTTL = 24 * time.Hour

// replyTTL is how long a reply routed to other nodes is kept for them: as
// long as the engine parks an unclaimed reply.
const replyTTL = 5 * time.Minute

// NewCluster returns the Cluster of the nodes sharing s's prefix.
func NewCluster(ctx context.Context, s *Store) (*Cluster, error) {
	c := &Cluster{s: s}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
		ttl  time.Duration
	}{{&c.leases, "leases", leaseMarkerTTL}, {&c.replies, "replies", replyTTL}} {
		full := s.bucketName(b.name)
		kv, err := s.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: full, History: 1, TTL: b.ttl, Storage: s.storage(), Replicas: s.opts.Replicas})
		if err != nil {
			return nil, s.fail(ctx, fmt.Errorf("jetstream: bucket %s: %w", full, err))
		}
		*b.kv = kv
	}
	return c, nil
}

// notice is a change one node tells the others.
type notice struct {
	Node   string               `json:"node"`
	Change pigeon.ClusterChange `json:"change"`
}

func (c *Cluster) eventSubject() string { return c.s.pfx + ".ev" }

// Notify implements pigeon.Cluster. A new message's notice is a core NATS
// publish; a reply is kept in the <P>_replies bucket (for as long as a
// node parks a reply), which every node watches, so that it reaches its
// requester also across a reconnect.
func (c *Cluster) Notify(ch pigeon.ClusterChange) {
	b, err := json.Marshal(notice{Node: c.s.opts.Node, Change: ch})
	if err != nil {
		return
	}
	if ch.Kind != pigeon.ChangeReply {
		_ = c.s.nc.Publish(c.eventSubject(), b)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.Timeout)
	defer cancel()
	_, _ = c.replies.Put(ctx, token(ch.RequestID), b)
}

// Watch implements pigeon.Cluster. It reports a directory change as soon
// as its watches are in place, so that nothing changed before is missed.
func (c *Cluster) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	ch := make(chan *nats.Msg, 1024)
	sub, err := c.s.nc.ChanSubscribe(c.eventSubject(), ch)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var dirKeys []string
	for _, b := range []string{"accounts", "roles", "grants", "grants.revoked"} {
		dirKeys = append(dirKeys, token(b)+".*")
	}
	dir, err := c.s.kv.WatchFiltered(ctx, dirKeys, jetstream.UpdatesOnly())
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer dir.Stop()
	con, err := c.s.contracts.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer con.Stop()
	rep, err := c.replies.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return c.s.fail(ctx, err)
	}
	defer rep.Stop()
	// What changed before the watches began (while the engine started, or
	// while a failed watch was down) is read once now.
	fn(pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-ch:
			var n notice
			if json.Unmarshal(m.Data, &n) == nil && n.Node != c.s.opts.Node && n.Change.Kind == pigeon.ChangeAppended {
				fn(n.Change)
			}
		case e, ok := <-rep.Updates():
			if !ok {
				return errors.New("jetstream: reply watch ended")
			}
			var n notice
			if e != nil && json.Unmarshal(e.Value(), &n) == nil && n.Node != c.s.opts.Node && n.Change.Kind == pigeon.ChangeReply {
				fn(n.Change)
			}
		case e, ok := <-dir.Updates():
			if !ok {
				return errors.New("jetstream: directory watch ended")
			}
			if e != nil {
				fn(pigeon.ClusterChange{Kind: pigeon.ChangeDirectory})
			}
		case e, ok := <-con.Updates():
			if !ok {
				return errors.New("jetstream: contract watch ended")
			}
			if e == nil {
				continue
			}
			if id, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(e.Key(), "k")); err == nil {
				fn(pigeon.ClusterChange{Kind: pigeon.ChangeContract, ContractID: string(id)})
			}
		}
	}
}

// leaseVal is the value of a lease key.
type leaseVal struct {
	Node    string `json:"node,omitempty"`
	Until   int64  `json:"until,omitempty"` // Unix nanoseconds
	Attempt int    `json:"attempt,omitempty"`
	Done    bool   `json:"done,omitempty"`
}

func leaseKey(key store.GroupKey, seq uint64) string {
	return progressKey(key) + "." + strconv.FormatUint(seq, 10)
}

// Acquire implements pigeon.Leaser. A lease nobody holds, or whose holder
// let it run out, is taken unless the group's stored progress has seq done.
func (c *Cluster) Acquire(ctx context.Context, key store.GroupKey, seq uint64, deadline time.Time) (pigeon.LeaseState, error) {
	k := leaseKey(key, seq)
	for {
		e, err := direct(ctx, c.s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return c.leases.Get(ctx, k) })
		var prev leaseVal
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return pigeon.LeaseState{}, c.s.fail(ctx, err)
		default:
			if err := json.Unmarshal(e.Value(), &prev); err != nil {
				return pigeon.LeaseState{}, &store.CorruptError{File: c.s.bucketName("leases"), Reason: err.Error()}
			}
			if prev.Done {
				return pigeon.LeaseState{Done: true}, nil
			}
			if until := time.Unix(0, prev.Until); time.Now().Before(until) && prev.Node != c.s.opts.Node {
				return pigeon.LeaseState{Until: until}, nil
			}
		}
		g, _, err := c.s.loadGroup(ctx, key)
		if err != nil {
			return pigeon.LeaseState{}, err
		}
		if g.IsDone(seq) {
			return pigeon.LeaseState{Done: true}, nil
		}
		next := leaseVal{Node: c.s.opts.Node, Until: deadline.UnixNano(), Attempt: max(prev.Attempt, g.Attempts[seq]) + 1}
		b, _ := json.Marshal(next)
		if e == nil {
			_, err = c.leases.Create(ctx, k, b)
		} else {
			_, err = c.leases.Update(ctx, k, b, e.Revision())
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return pigeon.LeaseState{}, c.s.fail(ctx, err)
		}
		return pigeon.LeaseState{Acquired: true, Attempt: next.Attempt}, nil
	}
}

// Release implements pigeon.Leaser.
func (c *Cluster) Release(ctx context.Context, key store.GroupKey, seq uint64, done bool, retryAt time.Time) error {
	k := leaseKey(key, seq)
	if done {
		b, _ := json.Marshal(leaseVal{Done: true})
		_, err := c.leases.Put(ctx, k, b)
		return c.s.fail(ctx, err)
	}
	e, err := direct(ctx, c.s.opts.Timeout, func() (jetstream.KeyValueEntry, error) { return c.leases.Get(ctx, k) })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return c.s.fail(ctx, err)
	}
	var l leaseVal
	if json.Unmarshal(e.Value(), &l) != nil || l.Done || l.Node != c.s.opts.Node {
		return nil
	}
	l.Until = retryAt.UnixNano()
	b, _ := json.Marshal(l)
	_, err = c.leases.Update(ctx, k, b, e.Revision())
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil // taken over meanwhile
	}
	return c.s.fail(ctx, err)
}
