package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"pigeon"
	"pigeon/store/wal"
)

func auditVerifyCmd(ctx context.Context, o *options, args []string, stdout, stderr io.Writer) int {
	if v := storeFlag(args); o.storeFor(v) == nil && isClusterStore(v) {
		return handOff(ctx, []string{"audit", "verify"}, args, stdout, stderr)
	}
	fs := flag.NewFlagSet("audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./pigeon-data", "data directory of the store")
	url := fs.String("store", "wal", "wal (--data's log) or nats://host:4222[,…]: every node's chain of a cluster, through pigeon-cluster")
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *url != "wal" {
		s := o.storeFor(*url)
		if s == nil {
			fmt.Fprintf(stderr, "pigeon audit verify: --store must be wal or nats://host:port[,…], not %q\n", *url)
			return 2
		}
		return verifyStore(ctx, s, *url, stdout, stderr)
	}
	n, err := wal.VerifyAudit(*data)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit verify: the audit chain of %s does not hold: %v\n", *data, err)
		if n > 0 {
			fmt.Fprintf(stderr, "pigeon audit verify: %d records verified before the first bad one\n", n)
		}
		return 1
	}
	fmt.Fprintf(stdout, "pigeon audit verify: the audit chain of %s holds: %d records\n", *data, n)
	return 0
}

// auditReceiptsCmd answers, offline, which principals were handed a
// message and acknowledged it, and when.
func auditReceiptsCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit receipts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./pigeon-data", "data directory of the store")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: pigeon audit receipts [--data DIR] MESSAGE_ID")
		return 2
	}
	f := pigeon.NewReceiptFinder(fs.Arg(0))
	for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
		if err := wal.ScanAudit(*data, func(r *pigeon.AuditRecord) error { pass(r); return nil }); err != nil {
			return fail(stderr, "audit receipts", err)
		}
	}
	enc := json.NewEncoder(stdout)
	for _, r := range f.Receipts {
		if err := enc.Encode(r); err != nil {
			return fail(stderr, "audit receipts", err)
		}
	}
	if len(f.Receipts) == 0 {
		fmt.Fprintf(stderr, "pigeon audit receipts: no delivery of %s is recorded\n", fs.Arg(0))
	}
	return 0
}

func auditTailCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit tail", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := clientFlags(fs)
	from := fs.Uint64("from", 0, "first sequence to print")
	follow := fs.Bool("follow", false, "keep printing new records until interrupted")
	every := fs.Duration("interval", time.Second, "how often --follow polls")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	next := *from
	for {
		b, err := a.do(ctx, http.MethodGet, "/v1/audit?max=1000&from="+strconv.FormatUint(next, 10), nil)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			return fail(stderr, "audit tail", err)
		}
		var out struct {
			Records []pigeon.AuditRecord `json:"records"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return fail(stderr, "audit tail", err)
		}
		enc := json.NewEncoder(stdout)
		for _, r := range out.Records {
			if err := enc.Encode(r); err != nil {
				return fail(stderr, "audit tail", err)
			}
			next = r.Seq + 1
		}
		if len(out.Records) == 1000 {
			continue
		}
		if !*follow {
			return 0
		}
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(*every):
		}
	}
}
