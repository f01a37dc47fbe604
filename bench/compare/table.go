package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// printTable prints the table for the rows run, then every
// measurement with its p99, samples and notes. load is the machine's load
// average before the run ("" if unknown): other work skews every number.
func printTable(w io.Writer, c config, args []string, load string, rs []row, res results) {
	fmt.Fprintf(w, "pigeon bench/compare — %s, %s %s/%s, GOMAXPROCS=%d, %v measured per scenario after %v warm-up\n",
		time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.GOMAXPROCS(0), c.duration, c.warmup)
	if load != "" {
		fmt.Fprintf(w, "load average (1, 5, 15 min) before the run: %s\n", load)
	}
	fmt.Fprintf(w, "reproduce: %s\n\n", strings.TrimSpace("cd bench/compare && go run . "+strings.Join(args, " ")))
	fmt.Fprintln(w, "| end to end | NATS / JetStream | raw (WS frames, fsync, net/http) | Pigeon | Pigeon/NATS | Pigeon/raw | target | met? |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		cols := [3][]string{}
		for _, cl := range r.cells {
			v := "failed"
			if m, ok := res[cl.key]; ok {
				v = value(r, cl, m)
			}
			cols[cl.col] = append(cols[cl.col], v)
		}
		v := r.judge(res)
		title := r.title
		if r.unit != "" {
			title += " (" + r.unit + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", title,
			joinOr(cols[colNATS]), joinOr(cols[colRaw]), joinOr(cols[colPigeon]), v.vsNATS, v.vsRaw, r.target, v.met)
	}
	fmt.Fprintln(w, "\nmeasurements:")
	for _, r := range rs {
		for _, cl := range r.cells {
			m, ok := res[cl.key]
			if !ok {
				continue
			}
			line := fmt.Sprintf("  %-9s %-22s", r.name, cl.key)
			if r.unit == "" {
				line += fmt.Sprintf(" p50 %s  p99 %s  (%d samples)", micros(m.p50), micros(m.p99), m.samples)
			} else {
				line += fmt.Sprintf(" %s %s", num(m.rate), r.unit)
				if m.has2 {
					line += fmt.Sprintf(", %s %s", num(m.rate2), r.rate2)
				}
			}
			if m.note != "" {
				line += "  [" + m.note + "]"
			}
			fmt.Fprintln(w, line)
		}
	}
}

// value is a cell's number as the table prints it.
func value(r row, cl cell, m result) string {
	v := num(m.rate)
	if r.unit == "" {
		v = micros(m.p50)
	}
	if cl.label != "" {
		v += " " + cl.label
	}
	if r.shown2 {
		who, unit, _ := strings.Cut(r.rate2, " ")
		v += fmt.Sprintf(" (%s %s %s)", who, num(m.rate2), unit)
	}
	return v
}

func joinOr(vs []string) string {
	if len(vs) == 0 {
		return "—"
	}
	return strings.Join(vs, "; ")
}

// loadAverage returns the 1, 5 and 15 minute load averages of the machine
// (Linux), or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
