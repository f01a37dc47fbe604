package programs_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/programs"
)

func group(g string) func(*programs.Manifest) {
	return func(m *programs.Manifest) { m.Route.Group = g }
}

// A program that loops forever, one that allocates without bound and one
// that traps each fail their deliveries only: the message is redelivered,
// then quarantined as DELIVERY_EXHAUSTED, while another program on the
// same route and the broker go on.
func TestFailuresStayInTheirDelivery(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	for _, p := range []struct {
		name   string
		module []byte
		mut    func(*programs.Manifest)
	}{
		{"loop", modLoop, func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }},
		{"grow", modGrow, func(m *programs.Manifest) { m.Limits.MemoryPages = 4 }},
		{"trap", modTrap, func(*programs.Manifest) {}},
		{"fail", modFail, func(*programs.Manifest) {}},
		{"ok", modOK, func(*programs.Manifest) {}},
	} {
		_, err := f.mg.Deploy(ctx, admin, p.name, manifest(group(p.name), p.mut), p.module)
		require.NoError(t, err, p.name)
	}
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 4 }, "each failing program's delivery is exhausted")
	codes := map[string]int{}
	for _, r := range f.audited(t, pigeon.EventProgramFailed) {
		codes[r.Code]++
		require.Equal(t, progAcc, r.Principal)
	}
	require.Equal(t, map[string]int{"PROGRAM_TIMEOUT": 2, "PROGRAM_LIMIT_EXCEEDED": 2, "PROGRAM_TRAPPED": 4}, codes, "two attempts each")
	f.publish(t, "orders.in", `{"n":2}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 2 }, "the sound program handles both messages")
	for _, n := range []string{"loop", "grow", "trap", "ok"} {
		in, err := f.mg.Get(ctx, n)
		require.NoError(t, err)
		require.True(t, in.Bound, n)
	}
}

// The enricher adds a field and republishes; a field the next subject
// forbids is quarantined under the program's principal.
func TestEnricher(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	env := func(field string) func(*programs.Manifest) {
		return func(m *programs.Manifest) {
			m.Env = map[string]string{"ENRICH_FIELD": field, "ENRICH_VALUE": "gold", "ENRICH_TO": "orders.out"}
		}
	}
	out := f.collect(t, "orders.out")
	_, err := f.mg.Deploy(ctx, admin, "enricher", manifest(env("tier")), example(t, "enricher"))
	require.NoError(t, err)
	in := f.publish(t, "orders.in", `{"order":"o-1"}`)
	m := next(t, out)
	require.JSONEq(t, `{"order":"o-1","tier":"gold"}`, string(m.Data))
	require.Equal(t, progAcc, m.Source, "published as the program's account")

	// Version 2 writes a forbidden field: the emitted message is refused
	// and quarantined under the program's principal, and the delivery
	// fails until it is exhausted.
	info, err := f.mg.Deploy(ctx, admin, "enricher", manifest(env("secret")), example(t, "enricher"))
	require.NoError(t, err)
	require.Equal(t, 2, info.Version)
	require.Len(t, info.History, 1)
	f.publish(t, "orders.in", `{"order":"o-2"}`)
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeSensitiveFieldDenied)) > 0 }, "the forbidden field is quarantined")
	q := f.quarantined(t, pigeon.CodeSensitiveFieldDenied)[0]
	require.Equal(t, progAcc, q.Principal)
	require.Equal(t, "orders.out", q.Subject)
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 1 }, "the input is exhausted")
	_ = in
}

// The responder answers requests through the reply host function.
func TestResponder(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "quotes", programs.Manifest{Route: programs.Route{Subject: "quotes"}, Account: progAcc, Env: map[string]string{"PRICE": "7"}}, example(t, "responder"))
	require.NoError(t, err)
	r, err := f.cli.Request(ctx, &pigeon.Message{Type: "quote", Subject: "quotes", Intent: "record", Classification: "internal", Data: json.RawMessage(`{"item":"nut","qty":3}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"item":"nut","qty":3,"price":21}`, string(r.Data))
}

// The router fans out by content; emitting past limits.maxEmits fails
// the delivery with PROGRAM_LIMIT_EXCEEDED.
func TestRouter(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	eu, us := f.collect(t, "orders.eu"), f.collect(t, "orders.us")
	_, err := f.mg.Deploy(ctx, admin, "router", manifest(func(m *programs.Manifest) {
		m.Publishes = []string{"orders.eu", "orders.us"}
		m.Limits.MaxEmits = 2
		m.Env = map[string]string{"ROUTE_FIELD": "region", "ROUTES": "eu=orders.eu,us=orders.us,all=orders.eu+orders.us+orders.eu"}
	}), example(t, "router"))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"region":"eu","n":1}`)
	f.publish(t, "orders.in", `{"region":"us","n":2}`)
	require.JSONEq(t, `{"region":"eu","n":1}`, string(next(t, eu).Data))
	require.JSONEq(t, `{"region":"us","n":2}`, string(next(t, us).Data))
	f.publish(t, "orders.in", `{"region":"all","n":3}`)
	eventually(t, func() bool {
		for _, r := range f.audited(t, pigeon.EventProgramFailed) {
			if r.Code == string(pigeon.CodeProgramLimit) {
				return true
			}
		}
		return false
	}, "a third emit is over the limit")
}

// Swapping versions under load loses no delivery and runs none on both
// versions: every message is logged by exactly one version (the module
// logs what it handles) and acknowledged exactly once.
func TestSwapUnderLoad(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, logs := loggedManager(t, f, programs.Options{})
	man := manifest(func(m *programs.Manifest) { m.Route.MaxInFlight = 4 })
	_, err := mg.Deploy(ctx, admin, "p", man, modLog)
	require.NoError(t, err)
	const n, versions = 300, 6
	deployUnderLoad(t, f, mg, "orders.in", n, versions, func(int) programs.Manifest { return man })
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) >= n }, "every message is handled")
	acked := f.ackedSeqs(t, "orders.in")
	require.Len(t, acked, n, "no message is acknowledged twice")
	slices.Sort(acked)
	require.Len(t, slices.Compact(acked), n)

	seen := handled(t, logs)
	require.Len(t, seen, n, "every message handled")
	for id, c := range seen {
		require.Equal(t, 1, c, "message %s handled once", id)
	}
	require.Empty(t, f.audited(t, pigeon.EventProgramFailed))
	require.Len(t, f.audited(t, pigeon.EventProgramSwapped), versions-1)
	in, err := mg.Get(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, versions, in.Version)
}

// loggedManager is a Manager of f's engine with o (and the shared
// compilation cache) whose log is kept for handled; it closes when the
// test ends.
func loggedManager(t *testing.T, f *fixture, o programs.Options) (*programs.Manager, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	o.Cache, o.Logger = cache, slog.New(slog.NewJSONHandler(logs, nil))
	mg, err := programs.New(context.Background(), f.e, &o)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
	return mg, logs
}

// deployUnderLoad publishes n messages on subject while it deploys
// versions 2..versions of program "p" (modLog, manifest man(i)), each
// bound, and returns when both are done.
func deployUnderLoad(t *testing.T, f *fixture, mg *programs.Manager, subject string, n, versions int, man func(i int) programs.Manifest) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			f.publish(t, subject, `{"n":`+strconv.Itoa(i)+`}`)
		}
	})
	for i := 1; i < versions; i++ {
		in, err := mg.Deploy(context.Background(), admin, "p", man(i), modLog)
		require.NoError(t, err)
		require.True(t, in.Bound)
	}
	wg.Wait()
}

// requireHandledOnce waits until modLog logged n messages and requires
// each of them once.
func requireHandledOnce(t *testing.T, logs *testlog.Buffer, n int, what string) {
	t.Helper()
	eventually(t, func() bool { return len(handled(t, logs)) == n }, what)
	for id, c := range handled(t, logs) {
		require.Equal(t, 1, c, "message %s handled once", id)
	}
}

// handled counts the messages modLog logged, by id.
func handled(t *testing.T, logs *testlog.Buffer) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Msg string `json:"msg"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		var m pigeon.Message
		if json.Unmarshal([]byte(rec.Msg), &m) != nil || m.ID == "" {
			continue // not a handled message
		}
		seen[m.ID]++
	}
	return seen
}

// A binding whose contract ends (here: revoked) is renewed with a fresh
// contract, and the program goes on handling its route.
func TestBindingRenewed(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	in, err := f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	require.NoError(t, f.e.RevokeContract(ctx, &pigeon.Principal{ID: progAcc}, in.ContractID))
	eventually(t, func() bool {
		now, err := f.mg.Get(ctx, "p")
		return err == nil && now.Bound && now.ContractID != in.ContractID
	}, "a new contract is negotiated")
	require.NotEmpty(t, f.audited(t, pigeon.EventProgramBound))
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "the renewed binding handles the route")
}

// A binding's contract is renewed in place before it expires: over three
// of its lifetimes the program handles its route under one contract,
// bound once, and nothing it was sent is lost.
func TestBindingContractRenewedInPlace(t *testing.T) {
	const ttl = 600 * time.Millisecond
	f := newFixtureWith(t, nil, func(o *pigeon.Options) { o.ContractTTL = ttl })
	ctx := context.Background()
	in, err := f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	bound := len(f.audited(t, pigeon.EventProgramBound))
	end := time.Now().Add(3 * ttl)
	n := 0
	for ; time.Now().Before(end); n++ {
		f.publish(t, "orders.in", `{"n":`+strconv.Itoa(n)+`}`)
		time.Sleep(ttl / 10)
	}
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == n }, "every message is handled")
	now, err := f.mg.Get(ctx, "p")
	require.NoError(t, err)
	require.True(t, now.Bound)
	require.Equal(t, in.ContractID, now.ContractID, "the same contract throughout")
	require.Len(t, f.audited(t, pigeon.EventProgramBound), bound, "never bound again")
	require.NotEmpty(t, f.audited(t, pigeon.EventContractRenewed))
}

// Options.Interpreter runs the same programs on wazero's interpreter.
func TestInterpreter(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	mg, err := programs.New(ctx, f.e, &programs.Options{Interpreter: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, mg.Close(context.Background())) })
	_, err = mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	_, err = mg.Deploy(ctx, admin, "loop", manifest(group("loop"), func(m *programs.Manifest) { m.Limits.TimeoutMs = 50 }), modLoop)
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	eventually(t, func() bool { return len(f.ackedSeqs(t, "orders.in")) == 1 }, "handled on the interpreter")
	eventually(t, func() bool { return len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) == 1 }, "a loop times out on the interpreter too")
}
