package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// tiny is the configuration of the smoke runs: long enough for every
// scenario to move messages, too short to measure anything.
var tiny = config{warmup: 20 * time.Millisecond, duration: 100 * time.Millisecond}

// TestPayload: the measured payload is the 259-byte payment JSON.
func TestPayload(t *testing.T) {
	require.Len(t, payload, 259)
	require.True(t, json.Valid(payload))
}

// TestGovernance: the measured subject carries the payment subject's whole
// governance. The measured message is accepted and audited; each way of
// breaking one rule is refused with that rule's code.
func TestGovernance(t *testing.T) {
	ctx := context.Background()
	p, err := startPigeon(ctx, memoryStore, false)
	require.NoError(t, err)
	defer p.close()
	s, err := p.session(ctx, false, publisherToken, eventsSubject)
	require.NoError(t, err)
	defer func() { _ = s.Close(ctx) }()
	gen := &messages{subject: eventsSubject}

	res, err := s.Publish(ctx, gen.next())
	require.NoError(t, err)
	require.Equal(t, "accepted", res.Status)
	recs, err := p.e.Audit(ctx, 0, 1000)
	require.NoError(t, err)
	require.True(t, func() bool {
		for _, r := range recs {
			if r.MessageID == res.Message.ID {
				return true
			}
		}
		return false
	}(), "no audit record names the accepted message")
	_, err = p.e.VerifyAudit(ctx)
	require.NoError(t, err)

	data := func(old, new string) func(*pigeon.Message) {
		return func(m *pigeon.Message) {
			require.Contains(t, paymentJSON, old)
			m.Data = json.RawMessage(strings.Replace(paymentJSON, old, new, 1))
		}
	}
	tests := []struct {
		name   string
		mutate func(*pigeon.Message)
		code   pigeon.Code
	}{
		{"forbidden field card.pan", data(`"channel":"web"`, `"channel":"web","card":{"pan":"tok_1"}`), pigeon.CodeSensitiveFieldDenied},
		{"raw card number as the token", data(`tok_9f8e7d6c5b4a3921`, `4111111111111111`), pigeon.CodeRawPANDetected},
		{"schema: currency", data(`"GBP"`, `"gbp"`), pigeon.CodeSchemaInvalid},
		{"no idempotency key", func(m *pigeon.Message) { m.IdempotencyKey = "" }, pigeon.CodeIdempotencyRequired},
		{"classification", func(m *pigeon.Message) { m.Classification = "public" }, pigeon.CodeClassificationDenied},
		{"region", func(m *pigeon.Message) { m.Region = "us" }, pigeon.CodeRegionDenied},
		{"intent", func(m *pigeon.Message) { m.Intent = "refund" }, pigeon.CodeIntentDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := gen.next()
			tc.mutate(m)
			_, err := s.Publish(ctx, m)
			var pe *pigeon.Error
			require.True(t, errors.As(err, &pe), "got %v", err)
			require.Equal(t, tc.code, pe.Code, "error: %v", err)
		})
	}
}

// TestScenarios runs every scenario of every row for a tiny window: each
// starts its servers, moves messages (a throughput window opens only once
// every counter has moved) and stops cleanly. Numbers are not checked.
func TestScenarios(t *testing.T) {
	for _, r := range rows() {
		for _, cl := range r.cells {
			t.Run(r.name+"/"+cl.key, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				m, err := cl.run(ctx, tiny)
				require.NoError(t, err)
				if r.unit == "" {
					require.Positive(t, m.samples)
					require.Positive(t, m.p50)
					require.LessOrEqual(t, m.p50, m.p99)
				}
			})
		}
	}
}

// TestRun: the command's flags, and one row end to end with its table.
func TestRun(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"rows", []string{"-rows"}, 0, []string{"network", "inproc", "fanout", "durable", "sync", "reqreply", "http"}},
		{"one row", []string{"-only", "reqreply", "-duration", "100ms"}, 0,
			[]string{"| end to end |", "| request/reply round trip, p50 |", "nats-request", "pigeon-ws-request", "pigeon-inproc-request"}},
		{"repeated", []string{"-only", "reqreply/pigeon-inproc-request", "-duration", "100ms", "-repeat", "3"}, 0,
			[]string{"pigeon-inproc-request", "runs: "}},
		{"repeat zero", []string{"-repeat", "0"}, 2, nil},
		{"unknown row", []string{"-only", "nope"}, 2, nil},
		{"bad duration", []string{"-duration", "0s"}, 2, nil},
		{"stray argument", []string{"extra"}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, tc.code, run(ctx, tc.args, &out, &errOut), "stderr: %s", errOut.String())
			for _, s := range tc.contains {
				require.Contains(t, out.String(), s)
			}
		})
	}
}

// TestRunTakesTurns: with -repeat, a row's cells run in turns, every
// cell's first run before any cell's second.
func TestRunTakesTurns(t *testing.T) {
	var out, errOut bytes.Buffer
	args := []string{"-only", "reqreply/pigeon-inproc-request,reqreply/nats-request", "-duration", "100ms", "-repeat", "2"}
	require.Equal(t, 0, run(context.Background(), args, &out, &errOut), "stderr: %s", errOut.String())
	var order []string
	for _, line := range strings.Split(errOut.String(), "\n") {
		if i := strings.Index(line, " … "); i >= 0 {
			order = append(order, line[:i])
		}
	}
	require.Equal(t, []string{
		"reqreply/pigeon-inproc-request (1/2)", "reqreply/nats-request (1/2)",
		"reqreply/pigeon-inproc-request (2/2)", "reqreply/nats-request (2/2)",
	}, order)
	require.Contains(t, out.String(), "runs: ")
}

// TestJudge: each row's verdict, from made-up measurements on both sides
// of its targets, and "n/a" when one is missing.
func TestJudge(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		row string
		res results
		met string
	}{
		{"network", results{"nats-tcp": {rate: 500e3}, "raw-ws": {rate: 100e3}, "pigeon-ws": {rate: 60e3}}, "yes"},
		{"network", results{"nats-tcp": {rate: 500e3}, "raw-ws": {rate: 200e3}, "pigeon-ws": {rate: 60e3}}, "no: WS/raw"},
		{"network", results{"nats-tcp": {rate: 500e3}, "pigeon-ws": {rate: 60e3}}, "n/a"},
		{"network", results{"nats-tcp": {rate: 1509e3}, "raw-ws": {rate: 264e3}, "pigeon-ws": {rate: 148e3}}, "no: WS/NATS 0.0981 < 0.1"},
		{"inproc", results{"pigeon-inproc": {rate: 250e3}}, "yes"},
		{"inproc", results{"pigeon-inproc": {rate: 44e3}}, "no: in process 44k < 250k"},
		{"fanout", results{"nats-fanout": {rate: 900e3}, "pigeon-ws-fanout": {rate: 300e3, rate2: 3e3}}, "yes"},
		{"fanout", results{"nats-fanout": {rate: 900e3}, "pigeon-ws-fanout": {rate: 300e3, rate2: 250}}, "no: publisher msgs/s 250 < 3k"},
		{"durable", results{"js-nosync": {rate: 43e3}, "js-sync": {rate: 3.7e3}, "pigeon-ws-wal": {rate: 40e3}, "pigeon-inproc-wal": {rate: 60e3}}, "yes"},
		{"durable", results{"js-nosync": {rate: 43e3}, "js-sync": {rate: 3.7e3}, "pigeon-ws-wal": {rate: 7.2e3}, "pigeon-inproc-wal": {rate: 60e3}}, "no: WS 7.2k < 40k"},
		{"sync", results{"js-sync-p50": {p50: 487 * us}, "raw-fsync": {p50: 200 * us}, "pigeon-inproc-sync": {p50: 260 * us}, "pigeon-ws-sync": {p50: 300 * us}}, "yes"},
		{"sync", results{"js-sync-p50": {p50: 487 * us}, "raw-fsync": {p50: 200 * us}, "pigeon-inproc-sync": {p50: 261 * us}, "pigeon-ws-sync": {p50: 300 * us}}, "no: in process/fsync"},
		{"reqreply", results{"nats-request": {p50: 118 * us}, "pigeon-ws-request": {p50: 180 * us}, "pigeon-inproc-request": {p50: 110 * us}}, "yes"},
		{"reqreply", results{"nats-request": {p50: 118 * us}, "pigeon-ws-request": {p50: 529 * us}, "pigeon-inproc-request": {p50: 110 * us}}, "no: WS µs 529 > 180"},
		{"http", results{"bare-http": {rate: 10e3}, "pigeon-http-memory": {rate: 8.5e3}, "pigeon-http-wal": {rate: 7e3}}, "yes"},
		{"http", results{"bare-http": {rate: 10e3}, "pigeon-http-memory": {rate: 7.7e3}, "pigeon-http-wal": {rate: 4.7e3}}, "no: memory/bare 0.77 < 0.85; durable/bare 0.47 < 0.7"},
	}
	all := rows()
	http, err := selectRows(all, "http")
	require.NoError(t, err)
	v := http[0].judge(results{"bare-http": {rate: 50e3}, "bare-http-fsync": {rate: 20e3}, "pigeon-http-memory": {rate: 45e3}, "pigeon-http-wal": {rate: 18e3}})
	require.Equal(t, "memory 90%, durable 36% of bare (bare + fsync 40% of bare; durable 90% of it)", v.vsRaw)
	for _, tc := range tests {
		t.Run(tc.row+"/"+tc.met, func(t *testing.T) {
			rs, err := selectRows(all, tc.row)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(rs[0].judge(tc.res).met, tc.met), "got %q", rs[0].judge(tc.res).met)
		})
	}
}

// TestGroupSync: every record appended concurrently is in the file once
// its append returns, and concurrent appends share fsyncs.
func TestGroupSync(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "group-")
	require.NoError(t, err)
	defer f.Close()
	g := newGroupSync(f)
	const writers, each = 16, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				rec := fmt.Appendf(nil, "w%02d-%03d\n", w, i)
				require.NoError(t, g.append(rec))
				fi, err := f.Stat()
				require.NoError(t, err)
				require.GreaterOrEqual(t, fi.Size(), int64(len(rec)))
			}
		})
	}
	wg.Wait()
	b, err := os.ReadFile(f.Name())
	require.NoError(t, err)
	require.Len(t, strings.Split(strings.TrimSpace(string(b)), "\n"), writers*each)
	require.Equal(t, g.written, g.synced)
}

// TestMiddle: the table keeps the middle run, by rate or by p50, and
// lists every run in order.
func TestMiddle(t *testing.T) {
	all := rows()
	network, err := selectRows(all, "network")
	require.NoError(t, err)
	sync, err := selectRows(all, "sync")
	require.NoError(t, err)
	us := time.Microsecond
	tests := []struct {
		name string
		r    row
		runs []result
		want result
	}{
		{"one run", network[0], []result{{rate: 5e3, note: "n"}}, result{rate: 5e3, note: "n"}},
		{"rates", network[0], []result{{rate: 9e3}, {rate: 3e3, note: "refused 2"}, {rate: 5e3}},
			result{rate: 5e3, note: "runs: 9k, 3k, 5k"}},
		{"two rates: the upper", network[0], []result{{rate: 3e3}, {rate: 9e3}}, result{rate: 9e3, note: "runs: 3k, 9k"}},
		{"latencies", sync[0], []result{{p50: 300 * us, samples: 1}, {p50: 100 * us, samples: 2, note: "x"}, {p50: 200 * us, samples: 3}},
			result{p50: 200 * us, samples: 3, note: "runs: 300 µs, 100 µs, 200 µs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, middle(tc.r, tc.runs))
		})
	}
}

// TestQuantile: nearest rank on sorted samples.
func TestQuantile(t *testing.T) {
	s := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0, 1}, {1, 10}}
	for _, tc := range tests {
		require.Equal(t, tc.want, quantile(s, tc.q), "q=%v", tc.q)
	}
	require.Equal(t, time.Duration(7), quantile([]time.Duration{7}, 0.5))
}

// TestSelectRows: -only takes rows and row/cell names, keeps the rows'
// order of cells within a row, and refuses unknown names.
func TestSelectRows(t *testing.T) {
	all := rows()
	keys := func(rs []row) []string {
		var out []string
		for _, r := range rs {
			for _, c := range r.cells {
				out = append(out, r.name+"/"+c.key)
			}
		}
		return out
	}
	tests := []struct {
		only string
		want []string
		err  string
	}{
		{"http/pigeon-http-wal", []string{"http/pigeon-http-wal"}, ""},
		{"http/pigeon-http-wal,http/bare-http", []string{"http/pigeon-http-wal", "http/bare-http"}, ""},
		{"http/bare-http,http", []string{"http/bare-http", "http/bare-http-fsync", "http/pigeon-http-memory", "http/pigeon-http-wal"}, ""},
		{"http/bare-http,http/bare-http", []string{"http/bare-http"}, ""},
		{"inproc", []string{"inproc/pigeon-inproc", "inproc/pigeon-inproc-publish"}, ""},
		{"http/nope", nil, "no cell nope in row http"},
		{"nope/bare-http", nil, "no row nope"},
	}
	for _, tc := range tests {
		t.Run(tc.only, func(t *testing.T) {
			rs, err := selectRows(all, tc.only)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, keys(rs))
		})
	}
	require.Len(t, all[len(all)-1].cells, 4, "selecting a cell leaves the table's rows whole")
}
