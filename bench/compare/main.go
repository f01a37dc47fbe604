// Command compare runs the scenarios of issue 12 against NATS, JetStream,
// a raw coder/websocket pipe, a bare net/http handler and Pigeon, in one
// process, and prints the table with ratios and whether each
// target is met. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run parses args, runs the rows asked for and prints the table on stdout
// and progress on stderr. It returns the exit code: 0 when every scenario
// ran (whether or not targets are met), 1 when one failed, 2 on bad flags.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 2*time.Second, "measured window of each scenario (after a warm-up of a quarter of it)")
	only := fs.String("only", "", "comma-separated rows (or row/cell) to run (see -rows); empty runs all")
	list := fs.Bool("rows", false, "list the rows and exit")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	repeat := fs.Int("repeat", 1, "run each scenario this many times and keep the middle run (by rate, or by p50 for latencies)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "compare:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() > 0 || *duration <= 0 || *repeat < 1 {
		fmt.Fprintln(stderr, "usage: compare [-duration 2s] [-repeat 1] [-only network,fanout/pigeon-ws-fanout,…] [-rows] [-cpuprofile FILE]")
		return 2
	}
	all := rows()
	if *list {
		for _, r := range all {
			fmt.Fprintf(stdout, "%-9s %s\n", r.name, r.title)
			for _, c := range r.cells {
				fmt.Fprintf(stdout, "  %s/%s\n", r.name, c.key)
			}
		}
		return 0
	}
	selected, err := selectRows(all, *only)
	if err != nil {
		fmt.Fprintln(stderr, "compare:", err)
		return 2
	}
	c := config{warmup: *duration / 4, duration: *duration, repeat: *repeat}
	load := loadAverage()
	res := results{}
	var failed []string
	for _, r := range selected {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "compare: interrupted")
			return 1
		}
		runs, errs := runRow(ctx, c, r, stderr)
		for i, cl := range r.cells {
			if errs[i] != nil {
				failed = append(failed, fmt.Sprintf("%s/%s: %v", r.name, cl.key, errs[i]))
				continue
			}
			m := middle(r, runs[i])
			res[cl.key] = m
			fmt.Fprintf(stderr, "%s/%s: %s\n", r.name, cl.key, value(r, cl, m))
		}
	}
	printTable(stdout, c, args, load, selected, res)
	for _, f := range failed {
		fmt.Fprintln(stdout, "FAILED", f)
	}
	if len(failed) > 0 {
		return 1
	}
	return 0
}

// runRow runs the cells of r c.repeat times each, in turns (every cell
// once, then every cell again, …), so that the cells a ratio compares are
// measured over the same stretch of time: on a shared machine the speed
// drifts over minutes, and runs of one cell after another would put the
// drift into the ratio. It returns each cell's runs and the error that
// stopped it; a failed cell is not run again.
func runRow(ctx context.Context, c config, r row, stderr io.Writer) ([][]result, []error) {
	runs := make([][]result, len(r.cells))
	errs := make([]error, len(r.cells))
	for k := range c.repeat {
		for i, cl := range r.cells {
			if errs[i] != nil {
				continue
			}
			if ctx.Err() != nil {
				errs[i] = ctx.Err()
				continue
			}
			fmt.Fprintf(stderr, "%s/%s (%d/%d) … ", r.name, cl.key, k+1, c.repeat)
			t0 := time.Now()
			m, err := runCell(ctx, c, cl)
			if err != nil {
				fmt.Fprintf(stderr, "failed after %v: %v\n", time.Since(t0).Round(time.Millisecond), err)
				errs[i] = err
				continue
			}
			fmt.Fprintf(stderr, "%s (%v)\n", value(r, cl, m), time.Since(t0).Round(time.Millisecond))
			runs[i] = append(runs[i], m)
		}
	}
	return runs, errs
}

// runCell runs one scenario with a deadline well past its window, after a
// garbage collection so that one scenario's garbage is not the next one's
// cost.
func runCell(ctx context.Context, c config, cl cell) (result, error) {
	runtime.GC()
	ctx, cancel := context.WithTimeout(ctx, c.warmup+c.duration+2*time.Minute)
	defer cancel()
	return cl.run(ctx, c)
}

// selectRows picks the rows named in only (comma-separated); a name of
// the form row/cell keeps only that cell of its row (cells of one row
// gather in it, in the row's order).
func selectRows(all []row, only string) ([]row, error) {
	if only == "" {
		return all, nil
	}
	var out []row
	for _, name := range strings.Split(only, ",") {
		rowName, cellKey, one := strings.Cut(strings.TrimSpace(name), "/")
		i := slices.IndexFunc(all, func(r row) bool { return r.name == rowName })
		if i < 0 {
			return nil, errors.New("no row " + rowName + " (see -rows)")
		}
		r := all[i]
		if one {
			k := slices.IndexFunc(r.cells, func(c cell) bool { return c.key == cellKey })
			if k < 0 {
				return nil, errors.New("no cell " + cellKey + " in row " + rowName + " (see -rows)")
			}
			r.cells = []cell{r.cells[k]}
		}
		if j := slices.IndexFunc(out, func(o row) bool { return o.name == r.name }); j >= 0 {
			if !one {
				out[j] = r
				continue
			}
			if !slices.ContainsFunc(out[j].cells, func(c cell) bool { return c.key == cellKey }) {
				out[j].cells = append(slices.Clone(out[j].cells), r.cells[0])
			}
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
