package programs

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// The tracker's position is the end of the settled prefix of what was
// handed over: out-of-order answers, retries, exhausted attempts and
// messages given back by a stopping subscription.
func TestTracker(t *testing.T) {
	ctx := context.Background()
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	fail := errors.New("trap")
	type step struct {
		begin   uint64 // hand over (attempt 1) when not 0
		end     uint64 // settle when not 0
		attempt int
		err     error
		ctx     context.Context
	}
	for _, tc := range []struct {
		name  string
		from  position
		steps []step
		want  position
		skips []uint64 // begins that report "handled before"
	}{
		{name: "in order", steps: []step{{begin: 3}, {end: 3}, {begin: 5}, {end: 5}}, want: position{Seq: 5}},
		{name: "out of order", steps: []step{{begin: 1}, {begin: 2}, {begin: 3}, {end: 3}, {end: 2}},
			want: position{Seq: 0, Done: []uint64{2, 3}}},
		{name: "retried then acknowledged", steps: []step{{begin: 1}, {begin: 2}, {end: 2}, {end: 1, err: fail}, {end: 1, attempt: 2}},
			want: position{Seq: 2}},
		{name: "exhausted settles", steps: []step{{begin: 1}, {end: 1, err: fail}, {end: 1, attempt: 3, err: fail}}, want: position{Seq: 1}},
		{name: "given back stays", steps: []step{{begin: 1}, {begin: 2}, {end: 2}, {end: 1, attempt: 3, err: pigeon.ErrUndelivered}},
			want: position{Seq: 0, Done: []uint64{2}}},
		{name: "stopping stays", steps: []step{{begin: 1}, {end: 1, attempt: 3, err: fail, ctx: stopped}}, want: position{Seq: 0}},
		{name: "a redelivery is not a new message", steps: []step{{begin: 1}, {begin: 1, attempt: 2}, {end: 1}}, want: position{Seq: 1}},
		{name: "resumed", from: position{Seq: 4, Done: []uint64{6, 9}},
			steps: []step{{begin: 5}, {begin: 6}, {end: 5}, {begin: 7}}, skips: []uint64{6},
			want: position{Seq: 6, Done: []uint64{9}}},
		{name: "skips the route no longer selects are dropped", from: position{Seq: 4, Done: []uint64{6}},
			steps: []step{{begin: 7}, {end: 7}}, want: position{Seq: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.from.Subject = "s"
			tr := newTracker("s", 3, tc.from)
			var skips []uint64
			for _, s := range tc.steps {
				a := max(s.attempt, 1)
				if s.begin != 0 && tr.begin(s.begin, a) {
					skips = append(skips, s.begin)
				}
				if s.end != 0 {
					c := s.ctx
					if c == nil {
						c = ctx
					}
					tr.end(c, s.end, a, s.err)
				}
			}
			tc.want.Subject = "s"
			got, _ := tr.position(-1)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.skips, skips)
		})
	}
}
