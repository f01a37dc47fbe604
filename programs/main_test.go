package programs_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"

	"pigeon"
	"pigeon/internal/leakcheck"
	"pigeon/programs"
	"pigeon/store"
	"pigeon/store/memory"
)

var (
	buildDir string
	// cache is shared by every Manager of the tests: each module compiles once.
	cache = wazero.NewCompilationCache()
)

func TestMain(m *testing.M) {
	var err error
	if buildDir, err = os.MkdirTemp("", "pigeon-programs-"); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = cache.Close(context.Background())
	_ = os.RemoveAll(buildDir)
	if code == 0 {
		if err := leakcheck.Check(10 * time.Second); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildMu sync.Mutex
	builds  = map[string]func() ([]byte, error){}
)

// example returns the example program examples/programs/<name>, built
// once per test binary with GOOS=wasip1 GOARCH=wasm -buildmode=c-shared.
func example(t testing.TB, name string) []byte {
	t.Helper()
	buildMu.Lock()
	b, ok := builds[name]
	if !ok {
		b = sync.OnceValues(func() ([]byte, error) { return buildExample(name) })
		builds[name] = b
	}
	buildMu.Unlock()
	wasm, err := b()
	require.NoError(t, err)
	return wasm
}

// buildExample builds examples/programs/<name> with the Go toolchain.
func buildExample(name string) ([]byte, error) {
	out := filepath.Join(buildDir, name+".wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./examples/programs/"+name)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, &buildError{name: name, out: string(b), err: err}
	}
	return os.ReadFile(out)
}

type buildError struct {
	name, out string
	err       error
}

func (e *buildError) Error() string { return "build " + e.name + ": " + e.err.Error() + "\n" + e.out }

// Principals of the tests.
const (
	client  = "client"
	progAcc = "svc-prog"
	other   = "svc-other"
)

func allow(ps ...string) []pigeon.RuleSpec {
	return []pigeon.RuleSpec{{Effect: pigeon.EffectAllow, Principals: ps}}
}

// testCatalog: orders.in (a work queue the programs consume, retried
// twice then quarantined), orders.out (pubsub they publish to; the field
// "secret" is forbidden and quarantined), orders.eu / orders.us (router
// targets), quotes (request/reply answered by the responder) and events
// (pubsub the programs consume).
func testCatalog() *pigeon.Catalog {
	recv := func(ps ...string) map[pigeon.Operation][]pigeon.RuleSpec {
		return map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: allow(client, progAcc, other), pigeon.OpReceive: allow(ps...), pigeon.OpAck: allow(ps...)}
	}
	retry := pigeon.DeliveryPolicy{Retry: pigeon.RetryPolicy{MaxAttempts: 2, MaxDelayMs: 5}}
	sp := func(name string, mode pigeon.Mode, pol map[pigeon.Operation][]pigeon.RuleSpec) pigeon.SubjectPolicy {
		return pigeon.SubjectPolicy{Name: name, Version: "v1", Mode: mode, Intents: []string{"record"}, Policy: pol, Delivery: retry,
			Quarantine: pigeon.QuarantinePolicy{OnHandlerFailure: true, OnPolicyViolation: true}}
	}
	out := sp("orders.out", pigeon.ModePubSub, recv(client))
	out.Data.ForbiddenFields = []string{"secret"}
	return &pigeon.Catalog{Subjects: []pigeon.SubjectPolicy{
		sp("orders.in", pigeon.ModeWorkQueue, recv(progAcc, other)),
		sp("orders.other", pigeon.ModeWorkQueue, recv(progAcc, other)),
		out,
		sp("orders.eu", pigeon.ModePubSub, recv(client)),
		sp("orders.us", pigeon.ModePubSub, recv(client)),
		sp("quotes", pigeon.ModeRequestReply, recv(progAcc)),
		sp("events", pigeon.ModePubSub, recv(progAcc, other)),
	}}
}

type fixture struct {
	e   *pigeon.Engine
	st  store.Store
	mg  *programs.Manager
	cli pigeon.Session
}

// newFixture starts an engine on st (nil: a new memory store) with the
// test catalog, the program accounts and a Manager.
func newFixture(t testing.TB, st store.Store, mw ...pigeon.Middleware) *fixture {
	t.Helper()
	return newFixtureWith(t, st, nil, mw...)
}

// newFixtureWith is newFixture with adjust (when not nil) changing the
// engine's options.
func newFixtureWith(t testing.TB, st store.Store, adjust func(*pigeon.Options), mw ...pigeon.Middleware) *fixture {
	t.Helper()
	ctx := context.Background()
	if st == nil {
		st = memory.New(nil)
		t.Cleanup(func() { _ = st.Close(ctx) })
	}
	opts := &pigeon.Options{
		Store: st,
		Authenticator: pigeon.NewStaticTokens(
			pigeon.StaticToken{Token: "client-token", Principal: client},
			pigeon.StaticToken{Token: "admin-token", Principal: "admin", Roles: []string{pigeon.RoleAdmin}},
			pigeon.StaticToken{Token: "deployer-token", Principal: progAcc, Roles: []string{"programs"}},
		),
		Catalog:   testCatalog(),
		RetryBase: time.Millisecond,
	}
	if adjust != nil {
		adjust(opts)
	}
	e, err := pigeon.New(ctx, opts)
	require.NoError(t, err)
	for _, id := range []string{progAcc, other} {
		if _, err := e.GetAccount(ctx, id); err != nil {
			_, err = e.CreateAccount(ctx, pigeon.Account{ID: id})
			require.NoError(t, err)
		}
	}
	mg, err := programs.New(ctx, e, &programs.Options{KV: st, Cache: cache, RebindDelay: 10 * time.Millisecond, Middleware: mw})
	require.NoError(t, err)
	cli, err := e.Connect(ctx, "client-token", []string{"orders.in", "orders.out", "orders.eu", "orders.us", "quotes", "events"})
	require.NoError(t, err)
	f := &fixture{e: e, st: st, mg: mg, cli: cli}
	t.Cleanup(func() { f.stop(t) })
	return f
}

// stop closes the Manager and the engine (idempotent).
func (f *fixture) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, f.mg.Close(ctx))
	require.NoError(t, f.e.Shutdown(ctx))
}

var admin = &pigeon.Principal{ID: "admin", Roles: []string{pigeon.RoleAdmin}}

// manifest is a manifest on orders.in running as progAcc.
func manifest(mut ...func(*programs.Manifest)) programs.Manifest {
	m := programs.Manifest{Route: programs.Route{Subject: "orders.in"}, Account: progAcc, Publishes: []string{"orders.out"}}
	for _, fn := range mut {
		fn(&m)
	}
	return m
}

// publish publishes data to subject as the client.
func (f *fixture) publish(t testing.TB, subject, data string) *pigeon.Message {
	t.Helper()
	res, err := f.cli.Publish(context.Background(), &pigeon.Message{Type: "order", Subject: subject, Intent: "record", Classification: "internal", Data: json.RawMessage(data)})
	require.NoError(t, err)
	return res.Message
}

// collect subscribes the client to subject and returns the channel of
// the messages delivered.
func (f *fixture) collect(t *testing.T, subject string, opts ...pigeon.SubscribeOption) <-chan *pigeon.Message {
	t.Helper()
	ch := make(chan *pigeon.Message, 1024)
	sub, err := f.cli.Subscribe(context.Background(), subject, func(_ context.Context, d *pigeon.Delivery) error {
		ch <- d.Message
		return nil
	}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe(context.Background()) })
	return ch
}

func next(t *testing.T, ch <-chan *pigeon.Message) *pigeon.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message within 30 s")
		return nil
	}
}

// eventually polls cond until it holds (or 30 s pass).
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 5*time.Millisecond, what)
}

// quarantined returns the quarantine records with code.
func (f *fixture) quarantined(t *testing.T, code pigeon.Code) []pigeon.QuarantineRecord {
	t.Helper()
	rs, err := f.e.Quarantine(context.Background(), time.Time{}, 1000)
	require.NoError(t, err)
	return slices.DeleteFunc(rs, func(r pigeon.QuarantineRecord) bool { return r.Code != string(code) })
}

// audited returns the audit records of event.
func (f *fixture) audited(t *testing.T, ev pigeon.Event) []pigeon.AuditRecord {
	t.Helper()
	rs, err := f.e.Audit(context.Background(), 0, 100000)
	require.NoError(t, err)
	return slices.DeleteFunc(rs, func(r pigeon.AuditRecord) bool { return r.Type != string(ev) })
}

// ackedSeqs returns the sequences of subject acknowledged, as the audit's
// range records (delivery.acked) list them, with repeats.
func (f *fixture) ackedSeqs(t *testing.T, subject string) []uint64 {
	t.Helper()
	var out []uint64
	for _, r := range f.audited(t, pigeon.EventDeliveryAcked) {
		if r.Subject != subject {
			continue
		}
		for _, rg := range strings.Split(r.Seqs, ",") {
			lo, hi, found := strings.Cut(rg, "-")
			a, err := strconv.ParseUint(lo, 10, 64)
			require.NoError(t, err, "seqs %q", r.Seqs)
			b := a
			if found {
				b, err = strconv.ParseUint(hi, 10, 64)
				require.NoError(t, err)
			}
			for s := a; s <= b; s++ {
				out = append(out, s)
			}
		}
	}
	return out
}
