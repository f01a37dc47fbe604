package pigeon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/store"
	"pigeon/store/wal"
	"pigeon/store/wal/crashtest"
)

// The mixed crash test: a child runs, at once, publishes (single and
// batch) to a pubsub and a work-queue subject, pull receives with acks and
// nacks, a push subscription acking, a pubsub pull cursor, retention
// trims by count (small bounds, so that trims and segment cuts happen all
// the time), audit and quarantine retention (short periods, so that the
// checkpoint is rewritten and the audit log cut), quarantine and release,
// and contract negotiation, renewal and revocation, on a WAL store with
// small segments and frequent metadata snapshots. It prints an ACK line
// only after each operation returned success, and is SIGKILLed at a
// random moment. The check reopens the store and requires every
// acknowledged operation to have survived (see checkMixed).
const (
	mxEvents    = "crash.events" // pubsub: pub publishes, reader pulls, dave's large orders are quarantined
	mxJobs      = "crash.jobs"   // work queue: pub publishes, worker pulls and pushes
	mxEventKeep = 16             // crash.events retention.maxMessages
	mxJobKeep   = 48             // crash.jobs retention.maxMessages
	mxPushGroup = "pushers"

	mxPub    = "spiffe://crash/ns/a/sa/pub"
	mxWorker = "spiffe://crash/ns/a/sa/worker"
	mxReader = "spiffe://crash/ns/a/sa/reader"
	mxDave   = "spiffe://crash/ns/a/sa/dave"
	mxCarol  = "spiffe://crash/ns/a/sa/carol"
	mxChurn  = "spiffe://crash/ns/a/sa/churn"
)

// mxAuditKeep is how long the audit log keeps records (retention.auditMs)
// and mxQuarantineKeep quarantine records: short, so that both are cut
// while the child runs.
const (
	mxAuditKeep      = 1500 * time.Millisecond
	mxQuarantineKeep = time.Second
)

func mixedCatalog() *pigeon.Catalog {
	all := []string{mxPub, mxDave, mxCarol, mxChurn}
	return &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{
		{
			Name: mxEvents, Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"order"},
			Delivery:   pigeon.DeliveryPolicy{Idempotency: pigeon.IdempotencyPolicy{Key: "idempotencyKey", TTLMs: time.Hour.Milliseconds()}},
			Retention:  pigeon.RetentionPolicy{MaxMessages: mxEventKeep, AuditMs: mxAuditKeep.Milliseconds()},
			Quarantine: pigeon.QuarantinePolicy{OnPolicyViolation: true},
			Rules:      []pigeon.QualityRule{{Name: "review-large", Expr: `principal.id != "` + mxDave + `" || message.data.amount <= 100.0`, OnFailure: "quarantine"}},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: all}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{mxReader}}},
				pigeon.OpAck:     {{Effect: "allow", Principals: []string{mxReader}}},
			},
		},
		{
			Name: mxJobs, Version: "v1", Mode: pigeon.ModeWorkQueue, Intents: []string{"run"},
			Delivery: pigeon.DeliveryPolicy{
				Retry:       pigeon.RetryPolicy{MaxAttempts: 1000, Backoff: "fixed"},
				Idempotency: pigeon.IdempotencyPolicy{Required: true, Key: "idempotencyKey", TTLMs: time.Hour.Milliseconds()},
			},
			Retention: pigeon.RetentionPolicy{MaxMessages: mxJobKeep},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: "allow", Principals: []string{mxPub}}},
				pigeon.OpReceive: {{Effect: "allow", Principals: []string{mxWorker}}},
				pigeon.OpAck:     {{Effect: "allow", Principals: []string{mxWorker}}},
			},
		},
	}}
}

// openMixed opens the store in dir (small segments, frequent snapshots)
// and an engine on it sweeping every sweep.
func openMixed(t testing.TB, dir string, sweep time.Duration) (*pigeon.Engine, *wal.Store) {
	t.Helper()
	st, err := wal.Open(dir, &wal.Options{SegmentSize: 4 << 10, CompactAfter: 256})
	require.NoError(t, err, "the store opens (no STORE_CORRUPT, no tampering)")
	e, err := pigeon.New(context.Background(), &pigeon.Options{
		Store: st,
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "pub-token", Principal: mxPub},
			pigeon.StaticToken{Token: "worker-token", Principal: mxWorker},
			pigeon.StaticToken{Token: "reader-token", Principal: mxReader},
			pigeon.StaticToken{Token: "dave-token", Principal: mxDave},
			pigeon.StaticToken{Token: "carol-token", Principal: mxCarol},
			pigeon.StaticToken{Token: "churn-token", Principal: mxChurn},
		),
		Catalog:                  mixedCatalog(),
		Region:                   "uk",
		RetryBase:                5 * time.Millisecond,
		SweepInterval:            sweep,
		QuarantineRetention:      mxQuarantineKeep,
		NegotiateRate:            pigeon.RateLimitPolicy{PerSecond: -1},
		QuarantineRate:           pigeon.RateLimitPolicy{PerSecond: -1},
		MaxContractsPerPrincipal: -1,
		ContractTTL:              time.Hour,
		Logger:                   mxLogger,
	})
	if err != nil {
		_ = st.Close(context.Background())
	}
	require.NoError(t, err)
	return e, st
}

var mxLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func mxOrder(subject, key string, amount int) *pigeon.Message {
	intent := "order"
	if subject == mxJobs {
		intent = "run"
	}
	return &pigeon.Message{Type: "crash." + intent, Subject: subject, Intent: intent, IdempotencyKey: key,
		Data: json.RawMessage(`{"amount":` + strconv.Itoa(amount) + `,"key":"` + key + `"}`)}
}

func TestCrashMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("crash rounds take seconds")
	}
	rounds := 8
	if n, err := strconv.Atoi(os.Getenv("PIGEON_CRASH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	crashtest.Run(t, crashtest.Config{
		Child:  "TestCrashMixedChild",
		Rounds: rounds,
		MinRun: 50 * time.Millisecond,
		MaxRun: 400 * time.Millisecond,
		Check:  checkMixed,
	})
}

// mxMsg is an accepted message as an ACK line names it.
type mxMsg struct {
	subject, id, key string
	seq              uint64
	at               time.Time // its acceptance time: the time of its publish.accepted record
	round            int
}

func mxTime(t *testing.T, s string) time.Time {
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}

func mxSeq(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return n
}

// checkMixed requires, after each kill, for every acknowledged operation:
//   - the store opens (no STORE_CORRUPT), and the audit chain verifies
//     offline (wal.VerifyAudit, before and after the reopen), through the
//     store (store.VerifyAudit) and the engine (Engine.VerifyAudit);
//   - an accepted message (publish, batch publish, quarantine release) is
//     retained under its sequence, unless the count bound could have
//     removed it (its sequence at most the subject's last minus the bound;
//     sequences are never reused, so the last after the crash is at least
//     the last any trim saw), and its publish.accepted record is in the
//     chain exactly once, unless audit retention could have removed it (its
//     time before the first record the chain keeps: a trim removes a prefix
//     of records older than its cut and stops at the first that is not);
//     no message has two acceptance records;
//   - a work-queue message acked (pull, or push once Unsubscribe returned)
//     is done in its group's stored progress (or trimmed), and a pubsub
//     message a pull returned is past the cursor; on a copy of the
//     directory, draining the groups hands out none of them, and hands out
//     every retained accepted work-queue message whose ack was not started;
//   - a negotiated contract is stored, a renewed one expires no earlier
//     than the renewal said, a revoked one is revoked and refuses use;
//   - a quarantined record is kept (unless quarantine retention could have
//     removed it), a released one is released and a second release of it
//     refused;
//   - an idempotent retry of an accepted message (the last round's) is
//     answered duplicate with the original.
func checkMixed(t *testing.T, dir string, acks []string) {
	checkStart := time.Now()
	var (
		msgs                       []mxMsg
		wqAcking                   = map[string]bool{}
		wqAcked, pushAcked, cursor []mxMsg
		negotiated                 = map[string]time.Time{}
		renewed                    = map[string]time.Time{}
		revoked                    = map[string]bool{}
		quarantined                = map[string]time.Time{} // id -> a time at or before the record's
		released                   = map[string]bool{}
		round                      = 0
	)
	rounds := map[string]int{} // the ACK line's round, by "pid"
	for _, a := range acks {
		f := strings.Fields(a)
		require.NotEmpty(t, f)
		// Every child line starts with its pid: rounds are told apart by it.
		pid := f[0]
		if _, ok := rounds[pid]; !ok {
			rounds[pid] = len(rounds)
		}
		round = rounds[pid]
		f = f[1:]
		switch f[0] {
		case "fail":
			t.Fatalf("the child failed an operation: %s", a)
		case "pub", "rel":
			// pub SUBJECT ID SEQ TIME KEY / rel QID SUBJECT ID SEQ TIME
			if f[0] == "rel" {
				released[f[1]] = true
				f = f[1:]
			}
			m := mxMsg{subject: f[1], id: f[2], seq: mxSeq(t, f[3]), at: mxTime(t, f[4]), round: round}
			if len(f) > 5 && f[5] != "-" {
				m.key = f[5]
			}
			msgs = append(msgs, m)
		case "wqacking":
			wqAcking[f[1]] = true
		case "wqack", "pushack", "recv":
			m := mxMsg{subject: mxJobs, id: f[1], seq: mxSeq(t, f[2]), round: round}
			switch f[0] {
			case "wqack":
				wqAcked = append(wqAcked, m)
			case "pushack":
				pushAcked = append(pushAcked, m)
			default:
				m.subject = mxEvents
				cursor = append(cursor, m)
			}
		case "neg":
			negotiated[f[1]] = mxTime(t, f[2])
		case "renew":
			renewed[f[1]] = mxTime(t, f[2])
		case "revoke":
			revoked[f[1]] = true
		case "quar":
			quarantined[f[1]] = mxTime(t, f[2])
		default:
			t.Fatalf("unknown ACK line %q", a)
		}
	}
	last := round

	// Offline, as `pigeon audit verify --data` reads it after the crash.
	_, err := wal.VerifyAudit(dir)
	require.NoError(t, err, "offline audit verify after the kill")

	e, st := openMixed(t, dir, time.Hour)
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
	_, err = store.VerifyAudit(ctx, st)
	require.NoError(t, err)
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	// Audit retention removed records older than its cut, a prefix of the
	// chain ending before the first record it kept: an acceptance record
	// may be gone only if it is older than that one.
	auditKept := recs[0].Time
	type sk struct {
		subject string
		seq     uint64
	}
	acceptance := map[sk][]string{}
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) {
			k := sk{r.Subject, mxSeq(t, r.Seqs)}
			acceptance[k] = append(acceptance[k], r.MessageID)
		}
	}
	for k, ids := range acceptance {
		require.Len(t, ids, 1, "acceptance records of %s #%d: %v", k.subject, k.seq, ids)
	}
	_, auditCP, err := st.AuditHead(ctx)
	require.NoError(t, err)
	bounds := map[string][2]uint64{}
	for _, s := range []string{mxEvents, mxJobs} {
		first, lastSeq, err := st.Bounds(ctx, s)
		require.NoError(t, err)
		bounds[s] = [2]uint64{first, lastSeq}
	}
	keep := map[string]uint64{mxEvents: mxEventKeep, mxJobs: mxJobKeep}
	retained := func(m mxMsg) bool { return m.seq >= bounds[m.subject][0] && bounds[m.subject][0] > 0 }
	var trimmed, unaudited int
	for _, m := range msgs {
		b := bounds[m.subject]
		require.GreaterOrEqual(t, b[1], m.seq, "accepted %s #%d is within the subject's bounds %v", m.subject, m.seq, b)
		if retained(m) {
			sm, err := st.Lookup(ctx, m.id)
			require.NoError(t, err, "accepted message %s (%s #%d) is retained", m.id, m.subject, m.seq)
			require.Equal(t, m.seq, sm.Seq)
			require.Equal(t, m.subject, sm.Subject)
		} else {
			require.LessOrEqual(t, m.seq+keep[m.subject], b[1], "accepted %s #%d was trimmed, though the newest %d (of %v) are kept", m.subject, m.seq, keep[m.subject], b)
			trimmed++
		}
		ids := acceptance[sk{m.subject, m.seq}]
		if len(ids) == 0 {
			require.True(t, m.at.Before(auditKept), "accepted message %s (%s #%d, %s, round %d) has no publish.accepted record, though audit retention kept every record from %s",
				m.id, m.subject, m.seq, m.at.Format(time.RFC3339Nano), m.round, auditKept.Format(time.RFC3339Nano))
			unaudited++
		} else {
			require.Equal(t, m.id, ids[0], "the acceptance record of %s #%d", m.subject, m.seq)
		}
	}
	groupDone := func(key store.GroupKey, list []mxMsg, what string) {
		g, err := st.LoadGroup(ctx, key)
		require.NoError(t, err)
		for _, m := range list {
			require.True(t, !retained(m) || g.IsDone(m.seq), "%s %s (#%d) is done in %s/%s (floor %d)", what, m.id, m.seq, key.Subject, key.Group, g.Floor)
		}
	}
	groupDone(store.GroupKey{Subject: mxJobs, Group: pigeon.DefaultGroup}, wqAcked, "pull-acked")
	groupDone(store.GroupKey{Subject: mxJobs, Group: mxPushGroup}, pushAcked, "push-acked")
	groupDone(store.GroupKey{Subject: mxEvents, Group: "cursor:" + mxReader}, cursor, "pulled")
	for id, exp := range negotiated {
		rec, err := st.GetContract(ctx, id)
		require.NoError(t, err, "negotiated contract %s is stored", id)
		require.False(t, rec.ExpiresAt.Before(exp), "contract %s expires at %s, negotiated for %s", id, rec.ExpiresAt, exp)
	}
	for id, exp := range renewed {
		rec, err := st.GetContract(ctx, id)
		require.NoError(t, err, "renewed contract %s is stored", id)
		require.False(t, rec.ExpiresAt.Before(exp), "contract %s expires at %s, renewed to %s", id, rec.ExpiresAt, exp)
	}
	for id := range revoked {
		rec, err := st.GetContract(ctx, id)
		require.NoError(t, err, "revoked contract %s is stored", id)
		require.True(t, rec.Revoked, "contract %s stays revoked", id)
	}
	for id, at := range quarantined {
		rec, err := st.GetQuarantine(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			require.True(t, at.Before(checkStart.Add(-mxQuarantineKeep)), "quarantine record %s (from %s) is gone, though retention keeps %s", id, at, mxQuarantineKeep)
			continue
		}
		require.NoError(t, err)
		require.True(t, rec.Released || !released[id], "released quarantine record %s stays released", id)
	}
	for id := range released {
		_, ok := quarantined[id]
		require.True(t, ok, "released %s was acknowledged quarantined first", id)
	}
	var quarGone int
	for id := range quarantined {
		if _, err := st.GetQuarantine(ctx, id); errors.Is(err, store.ErrNotFound) {
			quarGone++
		}
	}
	t.Logf("accepted %d (%d trimmed, %d acceptance records cut by audit retention, checkpoint at %d), pull-acked %d, push-acked %d, pulled %d, contracts %d/%d/%d, quarantined %d (%d trimmed), released %d; bounds %v",
		len(msgs), trimmed, unaudited, auditCP.Seq, len(wqAcked), len(pushAcked), len(cursor), len(negotiated), len(renewed), len(revoked), len(quarantined), quarGone, len(released), bounds)
	closeDurable(t, e, st)
	_, err = wal.VerifyAudit(dir)
	require.NoError(t, err, "offline audit verify after a clean shutdown")

	// What is checked by using it, on a copy: the next child starts on the
	// directory as the check left it.
	cp := t.TempDir()
	require.NoError(t, os.CopyFS(cp, os.DirFS(dir)))
	require.NoError(t, filepath.WalkDir(cp, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			err = os.Chmod(p, map[bool]os.FileMode{true: 0o700, false: 0o600}[d.IsDir()])
		}
		return err
	}))
	e, st = openMixed(t, cp, time.Hour)
	defer closeDurable(t, e, st)
	caller := func(token string, subjects ...string) pigeon.Caller {
		s, err := e.Connect(ctx, token, subjects)
		require.NoError(t, err)
		return s.(interface{ Caller() pigeon.Caller }).Caller()
	}
	worker := caller("worker-token", mxJobs)
	handed := map[string]bool{}
	for {
		got, err := e.Receive(ctx, worker, mxJobs, 500)
		require.NoError(t, err)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			require.False(t, handed[m.ID], "%s handed out twice in one drain", m.ID)
			handed[m.ID] = true
			require.NoError(t, e.Ack(ctx, worker, mxJobs, m.ID))
		}
	}
	for _, m := range wqAcked {
		require.False(t, handed[m.id], "pull-acked %s (#%d, round %d) is delivered again", m.id, m.seq, m.round)
	}
	for _, m := range msgs {
		if m.subject == mxJobs && retained(m) && !wqAcking[m.id] {
			require.True(t, handed[m.id], "accepted job %s (#%d), whose ack never started, is delivered", m.id, m.seq)
		}
	}
	reader := caller("reader-token", mxEvents)
	again := map[string]bool{}
	for {
		got, err := e.Receive(ctx, reader, mxEvents, 500)
		require.NoError(t, err)
		if len(got) == 0 {
			break
		}
		for _, m := range got {
			again[m.ID] = true
		}
	}
	for _, m := range cursor {
		require.False(t, again[m.id], "pulled %s (#%d) is handed out again", m.id, m.seq)
	}
	carol := caller("carol-token", mxEvents)
	for id := range released {
		_, err := e.ReleaseQuarantine(ctx, carol, id)
		require.Error(t, err, "released %s again", id)
		code := pigeon.ErrorCode(err)
		require.True(t, code == pigeon.CodeBadRequest || code == pigeon.CodeQuarantineNotFound, "second release of %s: %v", id, err)
	}
	churn, err := e.Authenticate(ctx, "churn-token")
	require.NoError(t, err)
	for id := range revoked {
		_, err := e.Publish(ctx, pigeon.Caller{Principal: churn, Region: "uk", ContractID: id}, mxOrder(mxEvents, "revoked-"+id, 1))
		requireCode(t, err, pigeon.CodeContractRevoked)
	}
	pub := caller("pub-token", mxEvents, mxJobs)
	for _, m := range msgs {
		if m.round != last || m.key == "" {
			continue
		}
		res, err := e.Publish(ctx, pub, mxOrder(m.subject, m.key, 1))
		require.NoError(t, err)
		require.Equal(t, pigeon.StatusDuplicate, res.Status, "retry of %s (key %s)", m.id, m.key)
		require.Equal(t, m.id, res.Message.ID)
	}
}

func TestCrashMixedChild(t *testing.T) {
	dir, ok := crashtest.ChildDir()
	if !ok {
		t.Skip("runs as the child of TestCrashMixed")
	}
	e, _ := openMixed(t, dir, 10*time.Millisecond)
	pid := strconv.Itoa(os.Getpid())
	ack := func(fields ...any) { crashtest.Ack(append([]any{pid}, fields...)...) }
	// fail reports an unexpected error for the check to fail on, and
	// stops the goroutine.
	fail := func(what string, err error) {
		ack("fail", what, strconv.Quote(err.Error()))
		select {}
	}
	connect := func(token string, subjects ...string) pigeon.Session {
		s, err := e.Connect(ctx, token, subjects)
		if err != nil {
			fail("connect "+token, err)
		}
		return s
	}
	callerOf := func(s pigeon.Session) pigeon.Caller { return s.(interface{ Caller() pigeon.Caller }).Caller() }
	accepted := func(res *pigeon.Result, key string) {
		if res.Status != pigeon.StatusAccepted {
			fail("publish "+key, fmt.Errorf("status %s", res.Status))
		}
		m := res.Message
		ack("pub", m.Subject, m.ID, m.Sequence, m.Time, key)
	}
	var wg sync.WaitGroup
	pub := connect("pub-token", mxEvents, mxJobs)
	for w := range 6 {
		subject := mxEvents
		if w%2 == 1 {
			subject = mxJobs
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("%s-%d-%d", pid, w, i)
				m := mxOrder(subject, key, i%100)
				if w == 0 {
					// Without a key: a trim of it keeps no copy, so it
					// reaches the truncation sooner.
					m.IdempotencyKey, key = "", "-"
				}
				res, err := pub.Publish(ctx, m)
				if err != nil {
					fail("publish", err)
				}
				accepted(res, key)
				// Publishers that never pause keep a subject's log
				// writing batch after batch, and a trim waits long for
				// a moment between two (see the report).
				time.Sleep(time.Duration(rand.N(1000)) * time.Microsecond)
			}
		})
	}
	wg.Go(func() { // batches of both subjects
		c := callerOf(pub)
		for i := 0; ; i++ {
			var batch []*pigeon.Message
			for j := range 6 {
				subject := mxEvents
				if j%2 == 1 {
					subject = mxJobs
				}
				batch = append(batch, mxOrder(subject, fmt.Sprintf("%s-b-%d-%d", pid, i, j), j))
			}
			for _, r := range e.PublishBatch(ctx, c, batch) {
				if r.Err != nil {
					fail("publish batch", r.Err)
				}
				accepted(r.Result, r.Result.Message.IdempotencyKey)
			}
			time.Sleep(time.Duration(rand.N(2000)) * time.Microsecond)
		}
	})
	for range 2 { // pull workers: ack three in four, nack the rest
		worker := connect("worker-token", mxJobs)
		wg.Go(func() {
			for {
				got, err := worker.Receive(ctx, mxJobs, 8)
				if err != nil {
					fail("receive", err)
				}
				for _, m := range got {
					if rand.N(4) == 0 {
						err := worker.Nack(ctx, mxJobs, m.ID, 0)
						if err != nil && !gone(err) {
							fail("nack", err)
						}
						continue
					}
					ack("wqacking", m.ID)
					err := worker.Ack(ctx, mxJobs, m.ID)
					if gone(err) {
						continue
					}
					if err != nil {
						fail("ack", err)
					}
					ack("wqack", m.ID, m.Sequence)
				}
				if len(got) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		})
	}
	pusher := connect("worker-token", mxJobs)
	wg.Go(func() { // a push subscription, started and stopped again and again
		for {
			var mu sync.Mutex
			var handled []*pigeon.Message
			sub, err := pusher.Subscribe(ctx, mxJobs, func(_ context.Context, d *pigeon.Delivery) error {
				if rand.N(5) == 0 {
					return errors.New("not now")
				}
				mu.Lock()
				handled = append(handled, d.Message)
				mu.Unlock()
				return nil
			}, pigeon.WithGroup(mxPushGroup), pigeon.WithMaxInFlight(4))
			if err != nil {
				fail("subscribe", err)
			}
			time.Sleep(time.Duration(5+rand.N(20)) * time.Millisecond)
			if err := sub.Unsubscribe(ctx); err != nil {
				fail("unsubscribe", err)
			}
			mu.Lock()
			for _, m := range handled {
				ack("pushack", m.ID, m.Sequence)
			}
			mu.Unlock()
		}
	})
	reader := connect("reader-token", mxEvents)
	wg.Go(func() { // a pubsub pull cursor
		for {
			got, err := reader.Receive(ctx, mxEvents, 4)
			if err != nil {
				fail("receive events", err)
			}
			for _, m := range got {
				ack("recv", m.ID, m.Sequence)
			}
			time.Sleep(time.Millisecond)
		}
	})
	qids := make(chan string, 64)
	dave := connect("dave-token", mxEvents)
	wg.Go(func() { // large orders from dave go to the quarantine
		for i := 0; ; i++ {
			before := time.Now()
			_, err := dave.Publish(ctx, mxOrder(mxEvents, fmt.Sprintf("%s-dave-%d", pid, i), 500))
			var pe *pigeon.Error
			if !errors.Is(err, pigeon.ErrQuarantined) || !errors.As(err, &pe) {
				fail("quarantine", fmt.Errorf("publish answered %v", err))
			}
			qid := pe.Details["quarantineId"].(string)
			ack("quar", qid, before.Format(time.RFC3339Nano))
			if i%2 == 0 {
				select {
				case qids <- qid:
				default:
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	carol := callerOf(connect("carol-token", mxEvents))
	wg.Go(func() { // carol releases some of them
		for qid := range qids {
			res, err := e.ReleaseQuarantine(ctx, carol, qid)
			if pigeon.ErrorCode(err) == pigeon.CodeQuarantineNotFound {
				continue // retention was faster
			}
			if err != nil {
				fail("release", err)
			}
			m := res.Message
			ack("rel", qid, m.Subject, m.ID, m.Sequence, m.Time)
		}
	})
	churn, err := e.Authenticate(ctx, "churn-token")
	if err != nil {
		fail("authenticate", err)
	}
	wg.Go(func() { // contracts negotiated, renewed and revoked
		for {
			k, err := e.Negotiate(ctx, churn, "uk", []string{mxEvents}, time.Hour)
			if err != nil {
				fail("negotiate", err)
			}
			ack("neg", k.ID(), k.ExpiresAt().Format(time.RFC3339Nano))
			k, err = e.RenewContract(ctx, churn, k.ID(), 2*time.Hour)
			if err != nil {
				fail("renew", err)
			}
			ack("renew", k.ID(), k.ExpiresAt().Format(time.RFC3339Nano))
			if err := e.RevokeContract(ctx, churn, k.ID()); err != nil {
				fail("revoke", err)
			}
			ack("revoke", k.ID())
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
}

// gone reports whether a settle failed because retention trimmed the
// message (its lease went with it).
func gone(err error) bool {
	c := pigeon.ErrorCode(err)
	return c == pigeon.CodeMessageNotFound || c == pigeon.CodeAckNotAllowed
}

// TestTrimmedAcceptanceSurvivesCrash: a message that retention trims
// before the store chained its acceptance record into the audit log (the
// WAL store lets acceptance records gather for a few milliseconds) keeps
// its record across a crash. The directory is copied while the engine
// runs, as a SIGKILL would leave it, right after a batch was accepted and
// a retention pass trimmed most of it.
func TestTrimmedAcceptanceSurvivesCrash(t *testing.T) {
	dir := t.TempDir()
	e, st := openMixed(t, dir, time.Hour)
	defer closeDurable(t, e, st)
	pub, err := e.Connect(ctx, "pub-token", []string{mxEvents})
	require.NoError(t, err)
	c := pub.(interface{ Caller() pigeon.Caller }).Caller()
	var batch []*pigeon.Message
	for i := range 3 * mxEventKeep {
		m := mxOrder(mxEvents, "", i)
		m.IdempotencyKey = ""
		batch = append(batch, m)
	}
	var ids []string
	for _, r := range e.PublishBatch(ctx, c, batch) {
		require.NoError(t, r.Err)
		ids = append(ids, r.Result.Message.ID)
	}
	e.EnforceRetention(ctx)
	first, _, err := st.Bounds(ctx, mxEvents)
	require.NoError(t, err)
	require.Greater(t, first, uint64(1), "retention trimmed")
	crashed := t.TempDir()
	require.NoError(t, os.CopyFS(crashed, os.DirFS(dir)))

	e2, st2 := openMixed(t, crashed, time.Hour)
	defer closeDurable(t, e2, st2)
	recs, err := e2.Audit(ctx, 0, 0)
	require.NoError(t, err)
	audited := map[string]int{}
	for _, r := range recs {
		if r.Type == string(pigeon.EventPublishAccepted) {
			audited[r.MessageID]++
		}
	}
	for i, id := range ids {
		require.Equal(t, 1, audited[id], "acceptance record of message %d (%s), first retained %d", i+1, id, first)
	}
}
