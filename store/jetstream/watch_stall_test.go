package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
)

// pauseWatches pauses, on the NATS server, the consumers that deliver to
// inbox (one node's connection, given its own inbox prefix) from the
// streams of the directory and of the contracts: the node's watches of
// them stall without an error, the server still sending their heartbeats,
// so that the client sees nothing amiss, while the rest of the node's
// traffic (its record's writes, its reads) goes on. It returns what
// resumes them; a consumer gone meanwhile (the watch started again) is
// left alone.
func pauseWatches(ctx context.Context, t *testing.T, s *Store, inbox string) (resume func()) {
	t.Helper()
	return pauseConsumers(ctx, t, s, inbox, "kv", "contracts")
}

// pauseConsumers pauses, as pauseWatches does, the consumers that
// deliver to inbox from the streams of the named buckets of s's prefix.
func pauseConsumers(ctx context.Context, t *testing.T, s *Store, inbox string, buckets ...string) (resume func()) {
	t.Helper()
	type paused struct{ stream, name string }
	var held []paused
	for _, bucket := range buckets {
		stream := "KV_" + s.bucketName(bucket)
		st, err := s.js.Stream(ctx, stream)
		require.NoError(t, err)
		// A watch started again between the listing and the pause (its
		// consumer gone, a new one made: a slow machine can miss a
		// heartbeat) is looked for again, in a new listing.
		for deadline := time.Now().Add(30 * time.Second); ; {
			found, gone := 0, false
			list := st.ListConsumers(ctx)
			for info := range list.Info() {
				if !strings.HasPrefix(info.Config.DeliverSubject, inbox+".") {
					continue
				}
				_, err := s.js.PauseConsumer(ctx, stream, info.Name, time.Now().Add(time.Hour))
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					gone = true
					continue
				}
				require.NoError(t, err)
				held = append(held, paused{stream, info.Name})
				found++
			}
			require.NoError(t, list.Err())
			if found > 0 && !gone {
				break
			}
			require.True(t, time.Now().Before(deadline), "no watch of %s to pause", stream)
			time.Sleep(10 * time.Millisecond)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			// The pause ends a moment from now rather than at once: a
			// consumer resumed (ResumeConsumer) delivers nothing until
			// its stream gets a new message, one whose pause ran out
			// delivers what it holds.
			for _, p := range held {
				_, _ = s.js.PauseConsumer(context.WithoutCancel(ctx), p.stream, p.name, time.Now().Add(10*time.Millisecond))
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestClusterWatchStalledStopsAuthorizing: node b's watches of the
// directory and the contracts stop delivering (their consumers paused on
// the NATS server, which goes on sending their heartbeats: no error for
// the client to see), while everything else b does with NATS works, its
// record's writes included. Node a revokes a grant; its barrier waits for
// b, which never confirms, and the call fails CLUSTER_UNCONFIRMED naming
// b. Before, b's Cluster went on vouching for it (CurrentUntil moved on
// with every write of its record, the catch-up having been done when its
// watch began), and b went on authorizing the revoked grant for as long
// as the stall lasted. Now every beat reads the last entries of the
// directory and the contracts again, and b is vouched for no longer than
// Liveness after the last such read its watch applied: CurrentUntil
// stops moving, b refuses every authorization STORE_UNAVAILABLE, and it
// serves again, the grant revoked, once its watch delivers again, or,
// when it does not, once the watch is started again.
func TestClusterWatchStalledStopsAuthorizing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume bool // the paused watches resume; otherwise b's watch starts again
	}{
		{"the watch resumes", true},
		{"the watch is started again", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			prefix := freshPrefix()
			const inbox = "_INBOX_b"
			var bLog testlog.Buffer
			// a waits a second for b to confirm its revocation, not five.
			a := clusterEngine(ctx, t, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true, BarrierTimeout: time.Second}, nil).e
			nb := clusterEngine(ctx, t, connect(t, srv.ClientURL(), nats.CustomInboxPrefix(inbox)), &Options{Prefix: prefix, Node: "b", Memory: true, BarrierTimeout: time.Second}, func(o *pigeon.Options) {
				o.Logger = bLog.Logger()
			})
			b, sb, cb := nb.e, nb.s, nb.cl

			g := memberGrant(ctx, t, a)
			revoked, other := grantSessions(ctx, t, b, g)
			_, err := revoked.Publish(ctx, roomMsg("before"))
			require.NoError(t, err)

			resume := pauseWatches(ctx, t, sb, inbox)
			// b's record is written still, so a waits for b, which never
			// confirms: the revocation is made, but unconfirmed.
			err = a.RevokeGrant(ctx, g.JTI)
			requireCode(t, err, pigeon.CodeClusterUnconfirmed)
			require.ErrorContains(t, err, "nodes b did not confirm")

			// b stops authorizing: it has not heard of the revocation.
			require.Eventually(t, func() bool { return time.Now().After(cb.CurrentUntil()) },
				30*time.Second, 10*time.Millisecond, "b's Cluster goes on vouching for it while its watch delivers nothing")
			require.Eventually(t, func() bool {
				return strings.Contains(bLog.String(), "can no longer be sure it has heard every change")
			}, 10*time.Second, 10*time.Millisecond)
			requireAuthorizesNothing(ctx, t, b, revoked, other, "while stalled")

			// b serves again once its watch delivers: the grant revoked.
			if tc.resume {
				resume()
			}
			requireServesAgain(ctx, t, other, "b serves again once its watch delivers")
			_, err = revoked.Publish(ctx, roomMsg("after"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			requireLogged(t, &bLog, "has caught up with the other nodes")
			if !tc.resume {
				requireLogged(t, &bLog, "has not applied the changes made before")
			}
		})
	}
}

// TestClusterWatchKeepingUpStaysVouchedFor: while another node changes
// the directory and the contracts as fast as it can, node b's watch,
// which keeps up, has applied at every beat what the beat before read
// again, so b's Cluster vouches for it all along (CurrentUntil never
// passes), and b confirms the last change once the stream of changes
// ends. Its watch of the nodes' records keeps up too: every write of b's
// own record comes back through it, so each barrier b begins meanwhile
// is confirmed, and the watch never starts again.
func TestClusterWatchKeepingUpStaysVouchedFor(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	prefix := freshPrefix()
	const liveness = 1500 * time.Millisecond
	sa, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true, Liveness: liveness})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sa.Close(context.Background()) })
	var bLog testlog.Buffer
	cb := clusterEngine(ctx, t, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "b", Memory: true, Liveness: liveness}, func(o *pigeon.Options) {
		o.Logger = bLog.Logger()
	}).cl
	require.Eventually(t, func() bool { // b's watch began and caught up
		_, err := cb.applied.Get(ctx, cb.recordKey())
		return err == nil && time.Now().Before(cb.CurrentUntil())
	}, 10*time.Second, 10*time.Millisecond)

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			role := fmt.Sprintf(`{"name":"churn%d","permissions":[]}`, i%50)
			if err := sa.Put(ctx, "roles", fmt.Sprintf("churn%d", i%50), []byte(role)); err != nil {
				done <- err
				return
			}
			c := store.ContractRecord{ID: fmt.Sprintf("churn%d", i%50), Principal: carol, IssuedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), Revoked: i%2 == 1}
			if err := sa.PutContract(ctx, c); err != nil {
				done <- err
				return
			}
		}
	}()
	barriers := make(chan error, 1)
	go func() { // barriers on b, one after the other, while the changes go on
		n := 0
		for {
			select {
			case <-stop:
				if n == 0 {
					barriers <- errors.New("no barrier ran")
					return
				}
				barriers <- nil
				return
			default:
			}
			if err := cb.Barrier(ctx); err != nil {
				barriers <- err
				return
			}
			n++
		}
	}()
	require.Never(t, func() bool { return !time.Now().Before(cb.CurrentUntil()) },
		4*liveness, 5*time.Millisecond, "b's Cluster stopped vouching for it while its watch kept up")
	close(stop)
	require.NoError(t, <-done)
	require.NoError(t, <-barriers, "a barrier on b was not confirmed while its watch kept up")
	require.NotContains(t, bLog.String(), "cluster watch failed", "b's watch started again while it kept up")

	dir, err := lastRevision(ctx, sa.kv)
	require.NoError(t, err)
	con, err := lastRevision(ctx, sa.contracts)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // b applied and confirmed the last change
		e, err := cb.applied.Get(ctx, cb.recordKey())
		if err != nil {
			return false
		}
		var r appliedRevs
		require.NoError(t, json.Unmarshal(e.Value(), &r))
		return r.Dir >= dir && r.Con >= con
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, time.Now().Before(cb.CurrentUntil()))
}
