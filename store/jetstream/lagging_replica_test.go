package jetstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
)

// The store reads with JetStream's direct get, which any replica of a
// stream answers, a replica behind included (one catching up after a
// partition or a restart). Like dir_fresh_test.go, these tests stand in
// for such a replica, here with JetStream itself: the stream's own
// direct-get responder is switched off, and a mirror of it that holds
// nothing (its filter matches no subject) answers its direct gets
// (MirrorDirect), "not found" for every message. A read from the stream's
// leader (STREAM.MSG.GET) still finds what the stream holds. The store's
// handles keep the stream's configuration as it was when they were
// opened, so they go on sending direct gets.

// lagDirect makes every direct get of stream name be answered by a
// replica that holds none of its messages: a mirror that takes only a
// sentinel subject, which answers the stream's direct gets (it inherits
// them from the stream) once it has received a message, the sentinel.
// The sentinel is then purged from the stream, and the stream's own
// direct-get responder switched off.
func lagDirect(t *testing.T, s *Store, name string) {
	t.Helper()
	lagDirectHolding(t, s, name, "")
}

// lagDirectHolding is lagDirect, the replica behind holding the messages
// of subject holds of the stream (the sentinel with "").
func lagDirectHolding(t *testing.T, s *Store, name, holds string) {
	t.Helper()
	ctx := t.Context()
	js, err := jetstream.New(s.nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, name)
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.True(t, cfg.AllowDirect)
	sentinel := holds
	if holds == "" {
		sentinel = strings.TrimRight(cfg.Subjects[0], "*>") + "lagsentinel"
	}
	lag, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:    name + "_LAG",
		Storage: jetstream.MemoryStorage,
		Mirror:  &jetstream.StreamSource{Name: name, FilterSubject: sentinel},
	})
	require.NoError(t, err)
	if holds == "" {
		_, err = js.Publish(ctx, sentinel, nil)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		info, err := lag.Info(ctx)
		return err == nil && info.State.Msgs >= 1
	}, 10*time.Second, 5*time.Millisecond, "the mirror receives a message")
	if holds == "" {
		require.NoError(t, st.Purge(ctx, jetstream.WithPurgeSubject(sentinel)))
	}
	cfg.AllowDirect = false
	_, err = js.UpdateStream(ctx, cfg)
	require.NoError(t, err)
}

// storedCount is how many messages the stream of subject holds, as its
// leader has it.
func storedCount(t *testing.T, s *Store, subject string) uint64 {
	t.Helper()
	js, err := jetstream.New(s.nc)
	require.NoError(t, err)
	st, err := js.Stream(t.Context(), s.msgStream(subject))
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	return info.State.Msgs
}

// TestLaggingReplicaTakesNoKeyOver: a retry of a publish whose claim is
// older than twice the store's timeout looks its message up; a replica
// behind answers "not found" while the message is stored. The key must
// not be taken over: the retry is answered with the original message,
// and a second message is not stored under the key.
func TestLaggingReplicaTakesNoKeyOver(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	const timeout = 100 * time.Millisecond
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: timeout})
	require.NoError(t, err)

	now := time.Now().UTC()
	first := store.Message{Subject: "orders", ID: "X", Time: now, Body: []byte("first"), IdemKey: "A", IdemExpires: now.Add(time.Hour)}
	stored, dup, err := s.Append(ctx, first)
	require.NoError(t, err)
	require.False(t, dup)
	lagDirect(t, s, s.msgStream("orders"))
	_, err = s.find(ctx, "orders", "X")
	require.ErrorIs(t, err, store.ErrNotFound, "the direct get is answered by the replica behind")

	got := retryPastTheClaim(t, s, first, timeout)
	require.Equal(t, stored.ID, got.ID)
	require.Equal(t, stored.Seq, got.Seq)

	require.Equal(t, uint64(1), storedCount(t, s, "orders"), "one message stored for the key")
}

// TestLaggingReplicaTakesNoIDOver: an append of an id another message
// holds, indexed longer ago than twice the store's timeout, looks that
// message up; a replica behind answers "not found" while it is stored.
// The id must not be taken over: the append is refused (the id is
// taken), and the stream holds one message of the id.
func TestLaggingReplicaTakesNoIDOver(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	const timeout = 100 * time.Millisecond
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: timeout})
	require.NoError(t, err)

	first := store.Message{Subject: "orders", ID: "X", Time: time.Now().UTC(), Body: []byte("first")}
	_, _, err = s.Append(ctx, first)
	require.NoError(t, err)
	lagDirect(t, s, s.msgStream("orders"))

	time.Sleep(3 * timeout) // the index entry is past waiting for
	second := first
	second.Body = []byte("second")
	_, _, err = s.Append(ctx, second)
	require.ErrorIs(t, err, store.ErrExists, "the id was taken twice")

	require.Equal(t, uint64(1), storedCount(t, s, "orders"), "one message stored under the id")
}

// TestLaggingReplicaSeesNoTrim: the stream answered a publish as a
// duplicate of an earlier message of the id; only a trimmed one frees
// the id. A replica behind that does not hold it yet must not make it
// trimmed.
func TestLaggingReplicaSeesNoTrim(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)

	stored, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: "X", Time: time.Now().UTC(), Body: []byte("first")})
	require.NoError(t, err)
	lagDirect(t, s, s.msgStream("orders"))
	st, err := s.stream(ctx, "orders", false)
	require.NoError(t, err)
	gone, err := s.trimmedSeq(ctx, st, stored.Seq)
	require.NoError(t, err)
	require.False(t, gone, "a message the stream holds was read as trimmed")
}

// TestLaggingReplicaTakesNoKeyOverItsKeptCopy: a message trimmed while its
// idempotency key is live answers a retry from its kept copy, in the idem
// bucket. A replica of the bucket behind answers "not found" for the
// claim and for the copy: the retry must neither spin on the claim it
// cannot read nor take the key over once the claim is past waiting for.
func TestLaggingReplicaTakesNoKeyOverItsKeptCopy(t *testing.T) {
	srv := runServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const timeout = 100 * time.Millisecond
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: timeout})
	require.NoError(t, err)

	now := time.Now().UTC()
	first := store.Message{Subject: "orders", ID: "X", Time: now, Body: []byte("first"), IdemKey: "A", IdemExpires: now.Add(time.Hour)}
	stored, _, err := s.Append(ctx, first)
	require.NoError(t, err)
	n, err := s.TrimThrough(ctx, "orders", stored.Seq)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	lagDirect(t, s, "KV_"+s.bucketName("idem"))
	_, err = s.kept(ctx, "X", "A")
	require.ErrorIs(t, err, store.ErrNotFound, "the direct get is answered by the replica behind")

	got := retryPastTheClaim(t, s, first, timeout)
	require.Equal(t, "X", got.ID)
	require.Equal(t, "first", string(got.Body))
	require.Zero(t, storedCount(t, s, "orders"))
}

// TestLaggingReplicaLookupFindsTheID: the engine lets a reply take a
// client's id that Lookup does not find (a reply's id may not be a
// stored message's). A replica behind, of the ids bucket or of the
// message's stream, must not make a stored message's id not found.
func TestLaggingReplicaLookupFindsTheID(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)

	for _, id := range []string{"X", "Y"} {
		_, _, err := s.Append(ctx, store.Message{Subject: "orders", ID: id, Time: time.Now().UTC(), Body: []byte(id)})
		require.NoError(t, err)
	}
	lagDirect(t, s, "KV_"+s.bucketName("ids"))
	got, err := s.Lookup(ctx, "X")
	require.NoError(t, err, "the ids bucket's replica behind")
	require.Equal(t, "X", string(got.Body))

	lagDirect(t, s, s.msgStream("orders"))
	got, err = s.Lookup(ctx, "Y")
	require.NoError(t, err, "the stream's replica behind")
	require.Equal(t, "Y", string(got.Body))
	_, err = s.Lookup(ctx, "Z")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestLaggingReplicaGetFindsTheKey: the engine takes a public key whose
// owner (keys.owners) Get does not find, and, when its create finds an
// owner after all, refuses the key unless Get then reads it as the
// account's own. A replica behind must not make a stored key missing.
func TestLaggingReplicaGetFindsTheKey(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)

	require.NoError(t, s.Create(ctx, "keys.owners", "k1", []byte(`{"account":"alice"}`)))
	lagDirect(t, s, "KV_"+s.bucketName("kv"))
	v, err := s.Get(ctx, "keys.owners", "k1")
	require.NoError(t, err)
	require.JSONEq(t, `{"account":"alice"}`, string(v))
	require.ErrorIs(t, s.Create(ctx, "keys.owners", "k1", []byte(`{"account":"bob"}`)), store.ErrExists)
	_, err = s.Get(ctx, "keys.owners", "k2")
	require.ErrorIs(t, err, store.ErrNotFound)
}

// retryPastTheClaim waits until the claim of first's key is past waiting
// for (twice the store timeout), then appends a retry of first under
// another id: it must be answered as a duplicate, not stored again.
func retryPastTheClaim(t *testing.T, s *Store, first store.Message, timeout time.Duration) store.Message {
	t.Helper()
	time.Sleep(3 * timeout)
	retry := first
	retry.ID, retry.Body = "X2", []byte("retry")
	got, dup, err := s.Append(t.Context(), retry)
	require.NoError(t, err)
	require.True(t, dup, "the retry took the key over: it was stored again")
	return got
}

// TestLaggingReplicaPublishUnderATakenID: the broker looks a client's id
// up through LookupHint, which a replica behind answers "not found" for a
// message it holds; the append's claim of the id decides with authority,
// so the publish is still refused MESSAGE_ID_TAKEN and nothing is stored
// twice. Lookup, which replies rely on, confirms at the leaders.
func TestLaggingReplicaPublishUnderATakenID(t *testing.T) {
	srv := runServer(t)
	ctx := t.Context()
	const timeout = 100 * time.Millisecond
	s, err := Open(ctx, connect(t, srv.ClientURL()), &Options{Prefix: freshPrefix(), Memory: true, Timeout: timeout})
	require.NoError(t, err)
	o := clusterOptions()
	o.Store = s
	e, err := pigeon.New(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	sess, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)

	first := chatMsg("lobby", "first")
	first.ID = "msg_lag_1"
	_, err = sess.Publish(ctx, first)
	require.NoError(t, err)
	lagDirect(t, s, "KV_"+s.bucketName("ids"))
	lagDirect(t, s, s.msgStream("chat.messages"))
	_, err = s.LookupHint(ctx, "msg_lag_1")
	require.ErrorIs(t, err, store.ErrNotFound, "the hint is the replica's")
	held, err := s.Lookup(ctx, "msg_lag_1")
	require.NoError(t, err, "Lookup is the leaders'")
	require.Equal(t, "msg_lag_1", held.ID)

	time.Sleep(3 * timeout) // the id's index entry is past waiting for
	second := chatMsg("lobby", "second")
	second.ID = "msg_lag_1"
	_, err = sess.Publish(ctx, second)
	require.Equal(t, pigeon.CodeMessageIDTaken, pigeon.ErrorCode(err), "%v", err)
	require.Equal(t, uint64(1), storedCount(t, s, "chat.messages"), "one message stored under the id")
}
