package pigeon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pigeon/internal/testclock"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func newClock() *testclock.Clock {
	return testclock.New(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
}

// fixture is an engine on the demo catalog.
type fixture struct {
	t     *testing.T
	e     *pigeon.Engine
	clock *testclock.Clock
}

func newFixture(t *testing.T, mutate ...func(*pigeon.Options)) *fixture {
	t.Helper()
	clk := newClock()
	opts := &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(demo.Tokens()...),
		Catalog:       demo.Catalog(),
		Region:        "uk",
		Now:           clk.Now,
		RetryBase:     time.Millisecond,
	}
	for _, m := range mutate {
		m(opts)
	}
	e, err := pigeon.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return &fixture{t: t, e: e, clock: clk}
}

func (f *fixture) connect(token string, subjects ...string) pigeon.Session {
	f.t.Helper()
	s, err := f.e.Connect(context.Background(), token, subjects)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// callerOf is the caller an in-process session acts as.
func callerOf(s pigeon.Session) pigeon.Caller {
	return s.(interface{ Caller() pigeon.Caller }).Caller()
}

// requireCode asserts err is a *pigeon.Error with code.
func requireCode(t *testing.T, err error, code pigeon.Code) *pigeon.Error {
	t.Helper()
	require.Error(t, err)
	var pe *pigeon.Error
	require.True(t, errors.As(err, &pe), "error %v is not *pigeon.Error", err)
	require.Equal(t, code, pe.Code, "error: %v", err)
	return pe
}

var ctx = context.Background()

// requireStopped waits (up to 30 s) for sub to stop and requires it
// stopped with code.
func requireStopped(t *testing.T, sub pigeon.Subscription, code pigeon.Code) {
	t.Helper()
	select {
	case <-sub.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the subscription did not stop")
	}
	requireCode(t, sub.Err(), code)
}

// auditCount counts e's audit records of type typ with code.
// refusalCount counts the refusals of type typ with code in e's audit
// log, a coalesced record for as many as it stands for.
func refusalCount(t *testing.T, e *pigeon.Engine, typ pigeon.Event, code pigeon.Code) int {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	n := 0
	for _, r := range recs {
		if r.Type == string(typ) && r.Code == string(code) {
			k, ok := coalescedCount(r)
			if !ok {
				k = 1
			}
			n += k
		}
	}
	return n
}

func auditCount(t *testing.T, e *pigeon.Engine, typ pigeon.Event, code pigeon.Code) int {
	t.Helper()
	recs, err := e.Audit(ctx, 0, 0)
	require.NoError(t, err)
	n := 0
	for _, r := range recs {
		if r.Type == string(typ) && r.Code == string(code) {
			n++
		}
	}
	return n
}

// answer is a request's outcome: its reply or its error.
type answer struct {
	m   *pigeon.Message
	err error
}

// requestAsync sends m as a request from s in the background, within 30
// s, and returns the channel its answer comes on.
func requestAsync(t *testing.T, s pigeon.Session, m *pigeon.Message) <-chan answer {
	t.Helper()
	done := make(chan answer, 1)
	rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	go func() {
		r, err := s.Request(rctx, m)
		done <- answer{r, err}
	}()
	return done
}
