package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"pigeon"
)

// column is where a cell's number goes in the table.
type column int

const (
	colNATS   column = iota // NATS / JetStream
	colRaw                  // the floor: raw WebSocket frames, raw fsync, bare net/http
	colPigeon               // Pigeon
)

// cell is one scenario of a row.
type cell struct {
	key   string // unique among all cells; the details list names it
	col   column
	label string // printed beside the number: "TCP", "WS", "in process", …
	run   func(context.Context, config) (result, error)
}

// row is one line of the table: its scenarios and how to judge
// them against the targets.
type row struct {
	name   string // for -only
	title  string
	unit   string // of rate; latency rows print µs
	rate2  string // what rate2 counts, if the row reports it
	shown2 bool   // whether the table shows rate2 beside rate (the details always do)
	cells  []cell
	judge  func(results) verdict
	target string
}

// results maps a cell's key to its measurement; a failed cell is absent.
type results map[string]result

// verdict is a row's ratios and target check. met is "yes", "no: …", or
// "n/a" when a measurement is missing.
type verdict struct{ vsNATS, vsRaw, met string }

// rows are the table, in its order.
func rows() []row {
	return []row{
		{
			name: "network", title: "1 publisher → 1 subscriber over the network", unit: "msgs/s", rate2: "publisher msgs/s",
			cells: []cell{
				{"nats-tcp", colNATS, "TCP", natsPubSub(1)},
				{"raw-ws", colRaw, "frames", rawWebSocket},
				{"pigeon-ws", colPigeon, "WS", pigeonPubSub(true, 1)},
				{"pigeon-ws-atmostonce", colPigeon, "WS at-most-once", pigeonPubSub(true, 1, pigeon.WithAtMostOnce())},
			},
			target: "≥ 55k, ≥ 50% of raw, ≥ 10% of NATS",
			judge: func(r results) verdict {
				p, n, w, ok := get3(r, "pigeon-ws", "nats-tcp", "raw-ws")
				if !ok {
					return missing()
				}
				return verdict{pct(p.rate, n.rate), pct(p.rate, w.rate), checks(
					atLeast("WS", p.rate, 55e3),
					atLeast("WS/raw", p.rate/w.rate, 0.5),
					atLeast("WS/NATS", p.rate/n.rate, 0.1),
				)}
			},
		},
		{
			name: "inproc", title: "same, in process", unit: "msgs/s", rate2: "publisher msgs/s",
			cells: []cell{
				{"pigeon-inproc", colPigeon, "in process", pigeonPubSub(false, 1)},
				{"pigeon-inproc-publish", colPigeon, "publish path alone", pigeonPubSub(false, 0)},
			},
			target: "≥ 250k",
			judge: func(r results) verdict {
				p, ok := r["pigeon-inproc"]
				if !ok {
					return missing()
				}
				return verdict{"—", "—", checks(atLeast("in process", p.rate, 250e3))}
			},
		},
		{
			name: "fanout", title: "fan-out to 100 subscribers over WebSocket", unit: "deliveries/s", rate2: "publisher msgs/s", shown2: true,
			cells: []cell{
				{"nats-fanout", colNATS, "TCP", natsPubSub(100)},
				{"pigeon-ws-fanout", colPigeon, "WS", pigeonPubSub(true, 100)},
			},
			target: "≥ 300k deliveries/s, publisher ≥ 3k msgs/s",
			judge: func(r results) verdict {
				p, ok1 := r["pigeon-ws-fanout"]
				n, ok2 := r["nats-fanout"]
				if !ok1 || !ok2 {
					return missing()
				}
				return verdict{pct(p.rate, n.rate), "—", checks(
					atLeast("deliveries/s", p.rate, 300e3),
					atLeast("publisher msgs/s", p.rate2, 3e3),
				)}
			},
		},
		{
			name: "durable", title: "durable, 64 publishers, group commit", unit: "msgs/s",
			cells: []cell{
				{"js-nosync", colNATS, "JetStream without fsync", jetStreamDurable(jetStreamNoSync, 64)},
				{"js-sync", colNATS, "JetStream fsync per message", jetStreamDurable(jetStreamSyncAlways, 64)},
				{"pigeon-ws-wal", colPigeon, "WS", pigeonDurable(true, 64)},
				{"pigeon-inproc-wal", colPigeon, "in process", pigeonDurable(false, 64)},
			},
			target: "≥ 40k WS, ≥ 60k in process, fsynced before the answer",
			judge: func(r results) verdict {
				w, ok1 := r["pigeon-ws-wal"]
				l, ok2 := r["pigeon-inproc-wal"]
				n, ok3 := r["js-nosync"]
				s, ok4 := r["js-sync"]
				if !ok1 || !ok2 || !ok3 || !ok4 {
					return missing()
				}
				vs := fmt.Sprintf("WS %s / %s, in process %s / %s of JS no fsync / fsync",
					pct(w.rate, n.rate), pct(w.rate, s.rate), pct(l.rate, n.rate), pct(l.rate, s.rate))
				return verdict{vs, "—", checks(atLeast("WS", w.rate, 40e3), atLeast("in process", l.rate, 60e3))}
			},
		},
		{
			name: "sync", title: "one synchronous durable publish, p50",
			cells: []cell{
				{"js-sync-p50", colNATS, "JetStream sync_always", jetStreamSync},
				{"raw-fsync", colRaw, "raw fsync", rawFsync},
				{"pigeon-inproc-sync", colPigeon, "in process", pigeonSync(false)},
				{"pigeon-ws-sync", colPigeon, "WS", pigeonSync(true)},
			},
			target: "≤ 1.3× raw fsync in process, ≤ 1.5× over WS",
			judge: func(r results) verdict {
				l, ok1 := r["pigeon-inproc-sync"]
				w, ok2 := r["pigeon-ws-sync"]
				f, ok3 := r["raw-fsync"]
				j, ok4 := r["js-sync-p50"]
				if !ok1 || !ok2 || !ok3 || !ok4 {
					return missing()
				}
				return verdict{
					fmt.Sprintf("in process %s, WS %s", times(l.p50, j.p50), times(w.p50, j.p50)),
					fmt.Sprintf("in process %s, WS %s", times(l.p50, f.p50), times(w.p50, f.p50)),
					checks(atMost("in process/fsync", ratio(l.p50, f.p50), 1.3), atMost("WS/fsync", ratio(w.p50, f.p50), 1.5)),
				}
			},
		},
		{
			name: "reqreply", title: "request/reply round trip, p50",
			cells: []cell{
				{"nats-request", colNATS, "", natsRequestReply},
				{"pigeon-ws-request", colPigeon, "WS", pigeonRequestReply(true)},
				{"pigeon-inproc-request", colPigeon, "in process", pigeonRequestReply(false)},
			},
			target: "≤ 180 µs over WS",
			judge: func(r results) verdict {
				w, ok1 := r["pigeon-ws-request"]
				l, ok2 := r["pigeon-inproc-request"]
				n, ok3 := r["nats-request"]
				if !ok1 || !ok2 || !ok3 {
					return missing()
				}
				return verdict{fmt.Sprintf("WS %s, in process %s", times(w.p50, n.p50), times(l.p50, n.p50)), "—",
					checks(atMost("WS µs", float64(w.p50.Microseconds()), 180))}
			},
		},
		{
			name: "http", title: "governed publish over HTTP, 32 keep-alive clients", unit: "req/s",
			cells: []cell{
				{"bare-http", colRaw, "bare net/http", bareHTTP},
				{"bare-http-fsync", colRaw, "bare + group-committed fsync", bareHTTPFsync},
				{"pigeon-http-memory", colPigeon, "memory (--sync none)", pigeonHTTP(memoryStore)},
				{"pigeon-http-wal", colPigeon, "WAL (durable)", pigeonHTTP(walStore)},
			},
			target: "≥ 85% of bare (memory), ≥ 70% (durable)",
			judge: func(r results) verdict {
				m, ok1 := r["pigeon-http-memory"]
				w, ok2 := r["pigeon-http-wal"]
				b, ok3 := r["bare-http"]
				if !ok1 || !ok2 || !ok3 {
					return missing()
				}
				ratios := fmt.Sprintf("memory %s, durable %s of bare", pct(m.rate, b.rate), pct(w.rate, b.rate))
				if f, ok := r["bare-http-fsync"]; ok {
					// The floor's own share says what the disk leaves.
					ratios += fmt.Sprintf(" (bare + fsync %s of bare; durable %s of it)", pct(f.rate, b.rate), pct(w.rate, f.rate))
				}
				return verdict{"—", ratios,
					checks(atLeast("memory/bare", m.rate/b.rate, 0.85), atLeast("durable/bare", w.rate/b.rate, 0.70))}
			},
		},
	}
}

func get3(r results, a, b, c string) (result, result, result, bool) {
	x, ok1 := r[a]
	y, ok2 := r[b]
	z, ok3 := r[c]
	return x, y, z, ok1 && ok2 && ok3
}

func missing() verdict { return verdict{"n/a", "n/a", "n/a (a measurement failed)"} }

// check is one target condition; fail is empty when it holds.
type check struct{ fail string }

func atLeast(what string, got, want float64) check {
	if got >= want {
		return check{}
	}
	return check{fmt.Sprintf("%s %s < %s", what, num(got), num(want))}
}

func atMost(what string, got, want float64) check {
	if got <= want {
		return check{}
	}
	return check{fmt.Sprintf("%s %s > %s", what, num(got), num(want))}
}

func checks(cs ...check) string {
	var fails []string
	for _, c := range cs {
		if c.fail != "" {
			fails = append(fails, c.fail)
		}
	}
	if len(fails) == 0 {
		return "yes"
	}
	return "no: " + strings.Join(fails, "; ")
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// times is a/b as "1.23×".
func times(a, b time.Duration) string { return fmt.Sprintf("%.2f×", ratio(a, b)) }

// pct is a/b as a percentage.
func pct(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	v := 100 * a / b
	if v < 10 {
		return fmt.Sprintf("%.1f%%", v)
	}
	return fmt.Sprintf("%.0f%%", v)
}

// num prints a rate the way the issue does (541k, 10.3k, 3.7k, 487), and a
// ratio to three significant digits, so that 0.098 does not print as the
// 0.10 it falls short of.
func num(v float64) string {
	switch {
	case v >= 100e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return strings.Replace(fmt.Sprintf("%.1fk", v/1e3), ".0k", "k", 1)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// micros prints a latency in µs.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
