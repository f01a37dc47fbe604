package readpool

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

var (
	alice = Key{Principal: "alice"}
	bob   = Key{Principal: "bob"}
	carol = Key{Principal: "carol"}
)

// waiting is how many reads wait in p.
func waiting(p *Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, k := range p.keys {
		n += k.waiters.Len()
	}
	return n
}

// forgotten reports whether p holds and remembers nothing: no key, none in
// line.
func forgotten(p *Pool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used == 0 && len(p.keys) == 0 && p.ready.Len() == 0
}

// reads reserves in p in goroutines and reports each outcome.
type reads struct {
	t    *testing.T
	p    *Pool
	done chan got
}

type got struct {
	name string
	n    int64 // -1: refused
	err  error
}

func newReads(t *testing.T, p *Pool) *reads { return &reads{t: t, p: p, done: make(chan got, 16)} }

// wait starts a read of n for who that must wait: it returns once the read
// is in p's line.
func (r *reads) wait(ctx context.Context, name string, who Key, n int64) {
	r.t.Helper()
	before := waiting(r.p)
	go func() {
		got := got{name: name}
		got.n, got.err = r.p.Reserve(ctx, who, n)
		if got.err != nil {
			got.n = -1
		}
		r.done <- got
	}()
	require.Eventually(r.t, func() bool { return waiting(r.p) == before+1 }, 10*time.Second, time.Millisecond, "%s waits", name)
}

// next is the next read to finish.
func (r *reads) next() got {
	r.t.Helper()
	select {
	case g := <-r.done:
		return g
	case <-time.After(10 * time.Second):
		r.t.Fatal("no read finished")
		return got{}
	}
}

// none checks that no read has finished.
func (r *reads) none() {
	r.t.Helper()
	select {
	case g := <-r.done:
		r.t.Fatalf("%s finished with %d (%v); it should wait", g.name, g.n, g.err)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestShareOf: a quarter of the pool by default, the whole pool when
// negative, never less than one reservation nor more than the pool.
func TestShareOf(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		limit, share, reserve, want int64
	}{
		{"default: a quarter", 256 << 20, 0, 33 << 20, 64 << 20},
		{"default below a reservation: one reservation", 20 << 20, 0, 17 << 20, 17 << 20},
		{"set", 256 << 20, 100 << 20, 33 << 20, 100 << 20},
		{"set below a reservation: one reservation", 256 << 20, 1 << 20, 33 << 20, 33 << 20},
		{"set above the pool: the pool", 256 << 20, 1 << 40, 33 << 20, 256 << 20},
		{"reservation above the pool: the pool", 16 << 20, 0, 33 << 20, 16 << 20},
		{"negative: the pool", 256 << 20, -1, 33 << 20, 256 << 20},
		{"no pool: nothing", -1, 0, 33 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, ShareOf(tc.limit, tc.share, tc.reserve))
		})
	}
}

// TestKeyOf: a principal's id, or an anonymous caller's source.
func TestKeyOf(t *testing.T) {
	src := pigeon.SourceOfAddr(netip.MustParseAddr("192.0.2.1"))
	require.Equal(t, Key{Principal: "alice"}, KeyOf(&pigeon.Principal{ID: "alice"}, src))
	require.Equal(t, Key{Source: src}, KeyOf(nil, src))
	require.NotEqual(t, KeyOf(nil, src), KeyOf(&pigeon.Principal{ID: "192.0.2.1"}, pigeon.Source{}))
}

// TestShare: a key holds at most its share; a read beyond it is refused
// RATE_LIMITED naming the share's setting, while other keys' reads go
// through; one larger than the share is clamped to it and runs alone.
func TestShare(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Share: 50, Wait: 20 * time.Millisecond, LimitName: "MaxTest", ShareName: "MaxShare"})

	a, err := p.Reserve(ctx, alice, 40)
	require.NoError(t, err)
	_, err = p.Reserve(ctx, alice, 20)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err), "40 + 20 > alice's 50")
	require.Contains(t, err.Error(), "MaxShare", "the refusal names the share's setting")
	require.Contains(t, err.Error(), "principal")
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, int64(1000), pe.Details["retryAfterMs"])

	b, err := p.Reserve(ctx, bob, 50)
	require.NoError(t, err, "bob has his share though alice is at hers")
	_, err = p.Reserve(ctx, carol, 20)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err), "40 + 50 + 20 > 100")
	require.Contains(t, err.Error(), "MaxTest", "a full pool's refusal names the pool's setting")
	require.NotContains(t, err.Error(), "MaxShare")
	require.EqualValues(t, 2, p.Refused())

	p.Resize(bob, b, 0)
	big, err := p.Reserve(ctx, bob, 1000)
	require.NoError(t, err)
	require.EqualValues(t, 50, big, "a read larger than the share takes it all, alone")
	require.EqualValues(t, 60, p.Resize(bob, big, 60), "a read that has been made may pass its share")
	_, err = p.Reserve(ctx, bob, 1)
	require.Equal(t, pigeon.CodeRateLimited, pigeon.ErrorCode(err))
	require.Contains(t, err.Error(), "MaxShare")

	p.Resize(alice, a, 0)
	p.Resize(bob, 60, 0)
	require.True(t, forgotten(p), "keys are forgotten once they hold nothing")

	// Without a share of its own, a key may take the whole pool.
	whole := New(&Options{Limit: 100, Wait: 20 * time.Millisecond, LimitName: "MaxTest"})
	a, err = whole.Reserve(ctx, alice, 100)
	require.NoError(t, err)
	require.EqualValues(t, 100, a)
	_, err = whole.Reserve(ctx, alice, 1)
	require.Contains(t, err.Error(), "MaxTest", "the pool, not a share, refused it")
	whole.Resize(alice, a, 0)
	require.True(t, forgotten(whole))
}

// TestNoHeadOfLineBlocking: a read that waits for its own key's share
// holds no place in the line: room given back goes to a later read of
// another key, and the waiting read is woken only once its own key gives
// room back (and the pool has it).
func TestNoHeadOfLineBlocking(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Share: 50, Wait: time.Minute})
	r := newReads(t, p)

	a, err := p.Reserve(ctx, alice, 50)
	require.NoError(t, err)
	b, err := p.Reserve(ctx, bob, 50)
	require.NoError(t, err)
	r.wait(ctx, "alice's second", alice, 30) // beyond her share
	r.wait(ctx, "carol's", carol, 30)        // the pool is full

	p.Resize(bob, b, 0)
	require.Equal(t, got{name: "carol's", n: 30}, r.next(), "carol goes first: alice waits on her own share")
	require.EqualValues(t, 80, p.InUse(), "alice's read was not granted")
	r.none()

	p.Resize(alice, a, 20) // alice's first read kept 20 of its 50
	require.Equal(t, got{name: "alice's second", n: 30}, r.next(), "20 + 30 fits her share")
	require.EqualValues(t, 80, p.InUse())

	p.Resize(alice, 20, 0)
	p.Resize(alice, 30, 0)
	p.Resize(carol, 30, 0)
	require.True(t, forgotten(p))

	// A read first in line that its key's own growth puts past the share
	// leaves the line at once, and the read behind it goes through.
	a, err = p.Reserve(ctx, alice, 40)
	require.NoError(t, err)
	c, err := p.Reserve(ctx, carol, 50)
	require.NoError(t, err)
	d, err := p.Reserve(ctx, Key{Principal: "dave"}, 1)
	require.NoError(t, err)
	r.wait(ctx, "alice's 10", alice, 10) // within her share; the pool has 9
	r.wait(ctx, "bob's 5", bob, 5)       // would fit, but alice came first
	r.none()
	p.Resize(alice, a, 41) // her read grew once made: her 10 no longer fits her share
	require.Equal(t, got{name: "bob's 5", n: 5}, r.next(), "bob's read is no longer behind alice's")
	require.EqualValues(t, 97, p.InUse())
	p.Resize(alice, 41, 0)
	require.Equal(t, got{name: "alice's 10", n: 10}, r.next())
	p.Resize(alice, 10, 0)
	p.Resize(bob, 5, 0)
	p.Resize(carol, c, 0)
	p.Resize(Key{Principal: "dave"}, d, 0)
	require.True(t, forgotten(p))
}

// TestFairOrder: reads within their share are served in the order they
// came across keys (a later one that would fit does not pass an earlier
// one that does not), and in their order within a key, even when a
// later read of the key would fit its share and an earlier one not.
func TestFairOrder(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Share: 60, Wait: time.Minute})
	r := newReads(t, p)

	a, err := p.Reserve(ctx, alice, 50)
	require.NoError(t, err)
	b, err := p.Reserve(ctx, bob, 50)
	require.NoError(t, err)
	r.wait(ctx, "carol's 60", carol, 60)
	r.wait(ctx, "bob's 10", bob, 10)
	p.Resize(alice, a, 0)
	r.none() // 50 + 10 would fit, but carol came first
	require.EqualValues(t, 50, p.InUse())
	p.Resize(bob, b, 0)
	require.ElementsMatch(t, []got{{name: "carol's 60", n: 60}, {name: "bob's 10", n: 10}}, []got{r.next(), r.next()})
	require.EqualValues(t, 70, p.InUse())
	p.Resize(carol, 60, 0)
	p.Resize(bob, 10, 0)
	require.True(t, forgotten(p))

	// Within a key: alice holds 40 of her 60; her read of 30 waits for her
	// share, and her read of 10, which would fit, waits behind it.
	a, err = p.Reserve(ctx, alice, 40)
	require.NoError(t, err)
	r.wait(ctx, "alice's 30", alice, 30)
	r.wait(ctx, "alice's 10", alice, 10)
	r.none()
	b, err = p.Reserve(ctx, bob, 20)
	require.NoError(t, err, "bob does not queue behind alice's waiting reads")
	p.Resize(alice, a, 0)
	require.ElementsMatch(t, []got{{name: "alice's 30", n: 30}, {name: "alice's 10", n: 10}}, []got{r.next(), r.next()})
	require.EqualValues(t, 60, p.InUse())
	p.Resize(alice, 30, 0)
	p.Resize(alice, 10, 0)
	p.Resize(bob, b, 0)
	require.True(t, forgotten(p))
}

// TestWaiterGivesUp: a read waiting for its share or for the pool that
// gives up (its context ends, or its wait) holds nothing and leaves
// nothing behind, and the next in line goes through.
func TestWaiterGivesUp(t *testing.T) {
	ctx := context.Background()
	p := New(&Options{Limit: 100, Share: 50, Wait: time.Minute})
	r := newReads(t, p)

	a, err := p.Reserve(ctx, alice, 50)
	require.NoError(t, err)
	b, err := p.Reserve(ctx, bob, 40)
	require.NoError(t, err)
	aliceGone, cancelAlice := context.WithCancel(ctx)
	r.wait(aliceGone, "alice's", alice, 10) // beyond her share
	carolGone, cancelCarol := context.WithCancel(ctx)
	r.wait(carolGone, "carol's 20", carol, 20) // the pool has 10
	r.wait(ctx, "bob's 10", bob, 10)           // behind carol

	cancelAlice()
	g := r.next()
	require.Equal(t, "alice's", g.name)
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(g.err))
	cancelCarol()
	g = r.next()
	require.Equal(t, "carol's 20", g.name)
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(g.err))
	require.Equal(t, got{name: "bob's 10", n: 10}, r.next(), "carol gone, bob's fits")
	require.EqualValues(t, 2, p.Refused())

	p.Resize(alice, a, 0)
	p.Resize(bob, b, 0)
	p.Resize(bob, 10, 0)
	require.True(t, forgotten(p), "nothing is remembered of the reads that gave up")

	// A read refused when its wait runs out, waiting for its share.
	short := New(&Options{Limit: 100, Share: 50, Wait: 20 * time.Millisecond, ShareName: "MaxShare"})
	a, err = short.Reserve(ctx, alice, 50)
	require.NoError(t, err)
	_, err = short.Reserve(ctx, alice, 50)
	require.Contains(t, err.Error(), "MaxShare")
	short.Resize(alice, a, 0)
	require.True(t, forgotten(short))
}

// TestPoolUnderLoad: many readers of a few keys reserving, resizing and
// giving up at once never take a key past its share nor the pool past its
// bound, and leave nothing behind (run it with -race).
func TestPoolUnderLoad(t *testing.T) {
	p := New(&Options{Limit: 1000, Share: 300, Wait: 5 * time.Millisecond})
	check := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		require.LessOrEqual(t, p.used, p.limit)
		var sum int64
		for _, k := range p.keys {
			require.LessOrEqual(t, k.used, p.share)
			require.True(t, k.used > 0 || k.waiters.Len() > 0, "a key holding and waiting for nothing is forgotten")
			sum += k.used
		}
		require.Equal(t, p.used, sum)
	}
	keys := []Key{alice, bob, carol, {Principal: "dave"}}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 200 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3))*time.Millisecond)
				who := keys[(i+j)%len(keys)]
				n, err := p.Reserve(ctx, who, int64(1+rand.IntN(200)))
				cancel()
				if err != nil {
					continue
				}
				kept := p.Resize(who, n, int64(rand.IntN(int(n)+1))) // never more than reserved: the share holds
				if rand.IntN(4) == 0 {
					time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
				}
				p.Resize(who, kept, 0)
			}
		})
	}
	stop := make(chan struct{})
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-stop:
				return
			default:
				check()
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-checked
	require.True(t, forgotten(p))
}
