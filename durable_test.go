package pigeon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/testlog"
	"pigeon/internal/wire"
	"pigeon/store"
	"pigeon/store/memory"
	"pigeon/store/wal"
	"pigeon/store/wal/crashtest"
)

// openDurable starts an engine on a WAL store in dir, with the demo
// catalog and tokens and whatever mutate changes in its options.
func openDurable(t testing.TB, dir string, now func() time.Time, mutate ...func(*pigeon.Options)) (*pigeon.Engine, *wal.Store) {
	t.Helper()
	st, err := wal.Open(dir, nil)
	require.NoError(t, err)
	opts := &pigeon.Options{
		Store:         st,
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
		Now:           now,
	}
	for _, m := range mutate {
		m(opts)
	}
	e, err := pigeon.New(context.Background(), opts)
	if err != nil {
		_ = st.Close(context.Background())
	}
	require.NoError(t, err)
	return e, st
}

func closeDurable(t testing.TB, e *pigeon.Engine, st *wal.Store) {
	t.Helper()
	require.NoError(t, e.Shutdown(context.Background()))
	require.NoError(t, st.Close(context.Background()))
}

func TestRestartKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	e, st := openDurable(t, dir, clk.Now)
	checkout, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	gateway, err := e.Connect(ctx, "gateway-token", []string{"payments.authorize"})
	require.NoError(t, err)
	first, err := checkout.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	_, err = checkout.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err)
	leased, err := gateway.Receive(ctx, "payments.authorize", 1)
	require.NoError(t, err)
	require.Len(t, leased, 1)
	leaky := demo.Payment("o-3")
	leaky.Region = "us"
	_, err = checkout.Publish(ctx, leaky)
	pe := requireCode(t, err, pigeon.CodeRegionDenied)
	qid := pe.Details["quarantineId"].(string)
	checkoutContract, gatewayContract := checkout.Contract().ID(), gateway.Contract().ID()
	before, err := e.VerifyAudit(ctx)
	require.NoError(t, err)
	closeDurable(t, e, st)

	e, st = openDurable(t, dir, clk.Now)
	n, err := e.VerifyAudit(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, before)
	cp, err := e.Authenticate(ctx, "checkout-token")
	require.NoError(t, err)
	gp, err := e.Authenticate(ctx, "gateway-token")
	require.NoError(t, err)
	checkoutC := pigeon.Caller{Principal: cp, Region: "uk", ContractID: checkoutContract}
	gatewayC := pigeon.Caller{Principal: gp, Region: "uk", ContractID: gatewayContract}

	// The contract keeps working; a retry is still a duplicate.
	dup, err := e.Publish(ctx, checkoutC, demo.Payment("o-1"))
	require.NoError(t, err)
	require.Equal(t, pigeon.StatusDuplicate, dup.Status)
	require.Equal(t, first.Message.ID, dup.Message.ID)
	next, err := e.Publish(ctx, checkoutC, demo.Payment("o-4"))
	require.NoError(t, err)
	require.Equal(t, uint64(3), next.Message.Sequence)

	// The lease live at the restart counts as expired: redelivered, not lost.
	got, err := e.Receive(ctx, gatewayC, "payments.authorize", 10)
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, leased[0].ID, got[0].ID)
	for _, m := range got {
		require.NoError(t, e.Ack(ctx, gatewayC, "payments.authorize", m.ID))
	}
	rec, err := e.QuarantineRecord(ctx, qid)
	require.NoError(t, err)
	require.Equal(t, string(pigeon.CodeRegionDenied), rec.Code)

	// Offline verification agrees.
	closeDurable(t, e, st)
	count, err := wal.VerifyAudit(dir)
	require.NoError(t, err)
	require.Greater(t, count, n)
}

// TestBrokerCrash kills a child that publishes through the broker on a WAL
// store at random moments; every publish the child saw accepted must be
// there exactly once, with gapless sequences and a verifying audit chain.
func TestBrokerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash rounds take seconds")
	}
	crashtest.Run(t, crashtest.Config{
		Child:  "TestBrokerCrashChild",
		Rounds: 8,
		Check: func(t *testing.T, dir string, acks []string) {
			e, st := openDurable(t, dir, nil)
			defer closeDurable(t, e, st)
			_, err := e.VerifyAudit(ctx)
			require.NoError(t, err)
			ops, err := e.Connect(ctx, "notify-replay-token", []string{"notifications.send"})
			require.NoError(t, err)
			msgs, err := ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "crash check", Max: 1000})
			require.NoError(t, err)
			all := msgs
			for len(msgs) == 1000 {
				msgs, err = ops.Replay(ctx, pigeon.ReplayRequest{Subject: "notifications.send", Reason: "crash check", FromSequence: all[len(all)-1].Sequence + 1, Max: 1000})
				require.NoError(t, err)
				all = append(all, msgs...)
			}
			byID := map[string]int{}
			for i, m := range all {
				require.Equal(t, uint64(i+1), m.Sequence, "sequences have no gaps")
				byID[m.ID]++
			}
			for _, a := range acks {
				f := strings.Fields(a)
				require.Len(t, f, 3)
				require.Equal(t, 1, byID[f[1]], "accepted message %s present exactly once", f[1])
			}
		},
	})
}

func TestBrokerCrashChild(t *testing.T) {
	dir, ok := crashtest.ChildDir()
	if !ok {
		t.Skip("runs as the child of TestBrokerCrash")
	}
	st, err := wal.Open(dir, nil)
	require.NoError(t, err)
	e, err := pigeon.New(context.Background(), &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
			if err != nil {
				panic(err)
			}
			for i := 0; ; i++ {
				key := fmt.Sprintf("%d-%d-%d", time.Now().UnixNano(), w, i)
				res, err := s.Publish(ctx, demo.Notification(key))
				if err != nil {
					panic(err)
				}
				crashtest.Ack(res.Status, res.Message.ID, strconv.FormatUint(res.Message.Sequence, 10))
			}
		}()
	}
	wg.Wait()
}

func TestRetentionTrimsInBackground(t *testing.T) {
	dir := t.TempDir()
	clk := newClock()
	st, err := wal.Open(dir, nil)
	require.NoError(t, err)
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
		Region: "uk", Now: clk.Now, SweepInterval: 5 * time.Millisecond, ContractTTL: 10 * 24 * time.Hour, MaxContractTTL: 10 * 24 * time.Hour})
	require.NoError(t, err)
	defer closeDurable(t, e, st)
	orders, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	_, err = orders.Publish(ctx, demo.Notification("old"))
	require.NoError(t, err)
	clk.Advance(4 * 24 * time.Hour) // notifications.send keeps 3 days
	_, err = orders.Publish(ctx, demo.Notification("new"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		first, last, err := st.Bounds(ctx, "notifications.send")
		return err == nil && first == 2 && last == 2
	}, 30*time.Second, 5*time.Millisecond)
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// failingAudit is a memory store whose audit appends fail while fail is set.
type failingAudit struct {
	store.Store
	fail   atomic.Bool
	probes atomic.Int64 // failed writes of an audit.resumed record: a paused caller probing
}

func (f *failingAudit) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if f.fail.Load() {
		if slices.ContainsFunc(recs, func(r store.AuditRecord) bool { return r.Type == string(pigeon.EventAuditResumed) }) {
			f.probes.Add(1)
		}
		return fmt.Errorf("disk on fire: %w", store.ErrFull)
	}
	return f.Store.AppendAudit(ctx, recs...)
}

// failingAuditEngine is an engine on the demo catalog whose store fails
// every audit write while its fail flag is set.
func failingAuditEngine(t *testing.T, logger *slog.Logger) (*failingAudit, *pigeon.Engine) {
	t.Helper()
	st := &failingAudit{Store: memory.New(nil)}
	t.Cleanup(func() { _ = st.Close(ctx) })
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk", Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
	return st, e
}

func TestAuditStoreFailureKeepsChain(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)
	st.fail.Store(true)
	_, err = s.Publish(ctx, demo.Payment("o-2"))
	require.NoError(t, err, "accepted before its own record fails to be written in the background")
	_, _ = e.Audit(ctx, 0, 0) // flush while failing
	st.fail.Store(false)
	_, err = s.Publish(ctx, demo.Payment("o-3"))
	require.NoError(t, err)
	n, err := e.VerifyAudit(ctx)
	require.NoError(t, err, "the chain still verifies after a failed write")
	require.Positive(t, n)
}

// fullStore is a store whose appends fail with ErrFull while full is set.
type fullStore struct {
	store.Store
	full atomic.Bool
}

func (f *fullStore) Append(ctx context.Context, m store.Message) (store.Message, bool, error) {
	if f.full.Load() {
		return store.Message{}, false, fmt.Errorf("append: %w", store.ErrFull)
	}
	return f.Store.Append(ctx, m)
}

func TestDiskFullFailsPublishKeepsReads(t *testing.T) {
	st := &fullStore{Store: memory.New(nil)}
	defer st.Close(ctx)
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(), Region: "uk"})
	require.NoError(t, err)
	defer e.Shutdown(ctx)
	orders, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	first, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	st.full.Store(true)
	_, err = orders.Publish(ctx, demo.Notification("k-2"))
	pe := requireCode(t, err, pigeon.CodeStoreFull)
	require.ErrorIs(t, err, pigeon.ErrStore)
	require.Equal(t, 507, wire.HTTPStatus(pe.Code))
	// Reads keep working and see only what was accepted.
	w, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"})
	require.NoError(t, err)
	got, err := w.Receive(ctx, "notifications.send", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, first.Message.ID, got[0].ID)
	st.full.Store(false)
	res, err := orders.Publish(ctx, demo.Notification("k-2"))
	require.NoError(t, err, "the retry after space returns is accepted, not a duplicate")
	require.Equal(t, pigeon.StatusAccepted, res.Status)
	require.Equal(t, uint64(2), res.Message.Sequence)
}

// TestRecoveryIsAudited: a torn tail dropped after a crash is logged by the
// store and recorded in the audit log when the broker starts.
func TestRecoveryIsAudited(t *testing.T) {
	dir := t.TempDir()
	e, st := openDurable(t, dir, nil)
	checkout, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	for i := range 3 {
		_, err = checkout.Publish(ctx, demo.Payment(fmt.Sprint("o-", i)))
		require.NoError(t, err)
	}
	closeDurable(t, e, st)
	// A crash instead of that clean shutdown: no marker, a torn last record.
	require.NoError(t, os.Remove(filepath.Join(dir, "CLEAN")))
	segs, err := filepath.Glob(filepath.Join(dir, "messages", "*", "*"))
	require.NoError(t, err)
	var last string
	for _, s := range segs {
		base := filepath.Base(s)
		if strings.Trim(base, "0123456789") != "" {
			continue // not a segment
		}
		if fi, err := os.Stat(s); err == nil && fi.Size() > 0 && s > last {
			last = s
		}
	}
	require.NotEmpty(t, last, "segments: %v", segs)
	fi, err := os.Stat(last)
	require.NoError(t, err)
	require.NoError(t, os.Truncate(last, fi.Size()-3))

	e, st = openDurable(t, dir, nil)
	defer closeDurable(t, e, st)
	require.NotEmpty(t, st.Recovered())
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var found *pigeon.AuditRecord
	for i := range recs {
		if recs[i].Type == "store.truncated" {
			found = &recs[i]
		}
	}
	require.NotNil(t, found, "the truncation is in the audit log")
	require.Equal(t, "subject payments.authorize", found.Subject)
	require.Contains(t, found.Ref, "bytes dropped")
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestAuditFailsClosed: while the audit log cannot be written, operations
// that must leave evidence are refused (and logged); revocations still
// work; once a write succeeds the broker goes on and the log says how many
// records were lost.
func TestAuditFailsClosed(t *testing.T) {
	var logs testlog.Buffer
	st, e := failingAuditEngine(t, slog.New(slog.NewJSONHandler(&logs, nil)))
	s, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err)
	_, err = s.Publish(ctx, demo.Payment("o-1"))
	require.NoError(t, err)

	// A negotiation whose evidence cannot be written issues no contract.
	st.fail.Store(true)
	_, err = e.Connect(ctx, "gateway-token", []string{"payments.authorize"})
	requireCode(t, err, pigeon.CodeStoreFull)
	require.Contains(t, logs.String(), "audit log cannot be written")

	refused := []struct {
		name string
		op   func() error
	}{
		{"publish", func() error { _, err := s.Publish(ctx, demo.Payment("o-2")); return err }},
		{"connect", func() error { _, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"}); return err }},
		{"receive", func() error { _, err := s.Receive(ctx, "payments.authorize", 1); return err }},
		{"grant", func() error { _, err := e.IssueGrant(ctx, "checkout-api", nil, time.Minute); return err }},
	}
	for _, tt := range refused {
		requireCode(t, tt.op(), pigeon.CodeStoreFull)
	}
	// Revocation never waits for the audit log.
	p := s.(interface{ Caller() pigeon.Caller }).Caller().Principal
	require.NoError(t, e.RevokeContract(ctx, p, s.Contract().ID()))

	st.fail.Store(false)
	s2, err := e.Connect(ctx, "checkout-token", []string{"payments.authorize"})
	require.NoError(t, err, "the first operation after recovery goes on")
	_, err = s2.Publish(ctx, demo.Payment("o-3"))
	require.NoError(t, err)
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	var resumed []pigeon.AuditRecord
	for _, r := range recs {
		if r.Type == "audit.resumed" {
			resumed = append(resumed, r)
		}
	}
	require.Len(t, resumed, 1)
	require.Regexp(t, `^[1-9][0-9]* records could not be written$`, resumed[0].Ref)
	_, err = e.VerifyAudit(ctx)
	require.NoError(t, err)
}

// TestAuditFailurePausesDeliveries: a running subscription delivers nothing
// while the audit log cannot be written, and everything once it can.
func TestAuditFailurePausesDeliveries(t *testing.T) {
	st, e := failingAuditEngine(t, nil)
	orders, err := e.Connect(ctx, "orders-token", []string{"notifications.send"})
	require.NoError(t, err)
	notifier, err := e.Connect(ctx, "notifier-token", []string{"notifications.send"})
	require.NoError(t, err)
	got := make(chan string, 10)
	hold := make(chan struct{})
	sub, err := notifier.Subscribe(ctx, "notifications.send", func(_ context.Context, d *pigeon.Delivery) error {
		got <- d.Message.ID
		<-hold
		return nil
	})
	require.NoError(t, err)
	defer sub.Unsubscribe(ctx)
	first, err := orders.Publish(ctx, demo.Notification("k-1"))
	require.NoError(t, err)
	require.Equal(t, first.Message.ID, <-got) // the handler now holds k-1
	second, err := orders.Publish(ctx, demo.Notification("k-2"))
	require.NoError(t, err)

	// Break the log: the record of a refusal cannot be written.
	st.fail.Store(true)
	bad := demo.Notification("k-3")
	bad.Subject = "no.such.subject"
	_, err = orders.Publish(ctx, bad)
	require.Error(t, err)
	probes := st.probes.Load()
	close(hold) // k-2 is next, and must wait
	// Before a delivery the subscription probes the log, and waits while
	// the probe fails: two probes since the handler was freed, and k-2 has
	// still not come.
	require.Eventually(t, func() bool { return st.probes.Load() >= probes+2 }, 30*time.Second, time.Millisecond,
		"the subscription probes the audit log")
	require.Empty(t, got, "nothing is delivered while the audit log cannot be written")
	st.fail.Store(false)
	select {
	case id := <-got:
		require.Equal(t, second.Message.ID, id)
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never resumed")
	}
}
