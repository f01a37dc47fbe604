package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"pigeon"
	"pigeon/store"
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
	anchorText := fs.String("anchor", "", "SEQ:HASH, a head an earlier verify printed, kept apart from the data: the chain must still hold that record unchanged (wal only)")
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	var anchor *store.Checkpoint
	if *anchorText != "" {
		a, ok := parseAnchor(*anchorText)
		if !ok || *url != "wal" {
			fmt.Fprintf(stderr, "pigeon audit verify: --anchor must be SEQ:HASH (a sequence and 64 hex digits), with --store wal, not %q\n", *anchorText)
			return 2
		}
		anchor = &a
	}
	if *url != "wal" {
		s := o.storeFor(*url)
		if s == nil {
			fmt.Fprintf(stderr, "pigeon audit verify: --store must be wal or nats://host:port[,…], not %q\n", *url)
			return 2
		}
		return verifyStore(ctx, s, *url, stdout, stderr)
	}
	var (
		n        uint64
		head     store.Checkpoint
		first    uint64 // the first record verified
		anchored bool   // the anchored record, or its successor's link to it, verified
	)
	err := wal.ScanAudit(*data, func(r *pigeon.AuditRecord) error {
		if n == 0 {
			first = r.Seq
		}
		n++
		head = store.Checkpoint{Seq: r.Seq, Hash: r.Hash}
		if a := anchor; a != nil {
			switch {
			case r.Seq == a.Seq && r.Hash != a.Hash:
				return fmt.Errorf("record %d is not the anchored one: its hash is %s", r.Seq, r.Hash)
			case r.Seq == a.Seq, r.Seq == a.Seq+1 && r.PrevHash == a.Hash:
				// The first record after a checkpoint links to the
				// anchored record that retention removed.
				anchored = true
			}
		}
		return nil
	})
	if err == nil && anchor != nil && !anchored {
		switch {
		case n == 0 || head.Seq < anchor.Seq:
			err = fmt.Errorf("the chain ends at record %d, before the anchored record %d: records were cut", head.Seq, anchor.Seq)
		case first > anchor.Seq+1:
			err = fmt.Errorf("the chain starts at record %d, after the anchored record %d: it cannot be checked", first, anchor.Seq)
		default:
			err = fmt.Errorf("record %d does not link to the anchored record %d", anchor.Seq+1, anchor.Seq)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit verify: the audit chain of %s does not hold: %s\n", *data, printable(err.Error()))
		if n > 0 {
			fmt.Fprintf(stderr, "pigeon audit verify: %d records verified before the first bad one\n", n)
		}
		return 1
	}
	fmt.Fprintf(stdout, "pigeon audit verify: the audit chain of %s holds: %d records\n", *data, n)
	if head.Seq != 0 {
		// Anyone who can write the files can cut the chain or rewrite it
		// with hashes of its own; a head kept elsewhere shows either.
		fmt.Fprintf(stdout, "pigeon audit verify: head %d:%s (keep it apart from the data; pass it as --anchor to a later verify)\n", head.Seq, head.Hash)
	}
	if anchor != nil {
		fmt.Fprintf(stdout, "pigeon audit verify: the chain holds the anchored record %d:%s\n", anchor.Seq, anchor.Hash)
	}
	return 0
}

// parseAnchor reads an --anchor: a sequence of at least 1, a colon and a
// record's hash, 64 lowercase hex digits.
func parseAnchor(s string) (store.Checkpoint, bool) {
	seqText, hash, ok := strings.Cut(s, ":")
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if !ok || err != nil || seq == 0 || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return store.Checkpoint{}, false
	}
	return store.Checkpoint{Seq: seq, Hash: hash}, true
}

// auditReceiptsCmd answers which principals were handed a message and
// acknowledged it, and when: offline from a data directory, or from a
// running server when --url is given.
func auditReceiptsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit receipts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "./pigeon-data", "data directory of the store (read offline, unless --url is given)")
	a := clientFlags(fs)
	maxN := fs.Int("max", pigeon.DefaultMaxReceipts, "the most receipts printed; beyond it the first are printed, a warning names the next page and the exit code is 3 (0: the default; negative: every receipt, 100000 at most: ten pages)")
	after := fs.String("after", "", "print the receipts after this one: the next page a truncated run names (AUDITSEQ:SEQ), or an audit sequence alone for the receipts of later records")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: pigeon audit receipts [--data DIR | --url URL --token T] [--max N] [--after AUDITSEQ:SEQ] MESSAGE_ID")
		return 2
	}
	from, err := pigeon.ParseReceiptCursor(*after)
	if err != nil {
		fmt.Fprintf(stderr, "pigeon audit receipts: --after: %v\n", err)
		return 2
	}
	online := false
	fs.Visit(func(fl *flag.Flag) { online = online || fl.Name == "url" })
	f := pigeon.NewReceiptFinder(fs.Arg(0))
	f.Max, f.After = *maxN, from
	if f.Max == 0 {
		f.Max = pigeon.DefaultMaxReceipts
	}
	ceiling := f.Max < 0
	if ceiling {
		f.Max = maxAllReceipts
	}
	var (
		printed int
		last    pigeon.ReceiptCursor
	)
	emit := func(rs []pigeon.Receipt) error {
		for _, r := range rs {
			if err := writeJSONLine(stdout, r); err != nil { // a principal, a replay's reason: others' text
				return err
			}
			printed, last = printed+1, r.Cursor()
		}
		return nil
	}
	if online {
		err = a.receipts(ctx, f, emit) // page by page, as they come
	} else if err = scanReceipts(*data, f); err == nil {
		err = emit(f.Receipts)
	}
	if err != nil {
		return fail(stderr, "audit receipts", err)
	}
	if f.Truncated {
		raise := fmt.Sprintf("raise --max; a negative --max reads %d at most", maxAllReceipts)
		switch {
		case ceiling && online:
			raise = fmt.Sprintf("give --max a count, or read them offline with --data: a negative --max reads %d at most", maxAllReceipts)
		case ceiling:
			raise = fmt.Sprintf("give --max a count: a negative --max reads %d at most", maxAllReceipts)
		}
		fmt.Fprintf(stderr, "pigeon audit receipts: more than %d deliveries of %s are recorded: only the first %d are printed; the next page is --after %s (or %s)\n",
			f.Max, printable(fs.Arg(0)), printed, last, raise)
		return 3
	}
	if printed == 0 {
		fmt.Fprintf(stderr, "pigeon audit receipts: no delivery of %s is recorded\n", printable(fs.Arg(0)))
	}
	return 0
}

// maxAllReceipts is the most receipts `pigeon audit receipts` reads when
// asked for every one (a negative --max): ten full pages, as the Rust
// client's all_receipts. From a server (--url), pages read the log anew,
// so a server keeps naming a next page for as long as the message is
// delivered faster than pages are read (a message replayed in a loop, or
// a server that makes its answers up), and the command would read, and
// hold what it read, for as long as it is answered. Offline (--data) the
// log is a file, but the receipts of one id number up to its acceptances
// times the records that list them, so a forged log of a few megabytes
// holds tens of millions of them, all held before the first is printed
// (5,000 acceptances and 5,000 records listing them: 25 million). Past it
// the command stops as at a cap, online and offline alike: it prints the
// first and names the next page. A variable for the tests.
var maxAllReceipts = 10 * pigeon.DefaultMaxReceipts

// scanReceipts reads the receipts f looks for from the audit log of the
// data directory dir.
func scanReceipts(dir string, f *pigeon.ReceiptFinder) error {
	for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
		if err := wal.ScanAudit(dir, func(r *pigeon.AuditRecord) error { pass(r); return nil }); err != nil {
			return err
		}
	}
	return nil
}

// receipts reads the receipts f looks for from the server, page by page
// (GET /v1/audit/receipts/{id}), after f.After and up to f.Max (none:
// every page; the command never asks for none, maxAllReceipts), hands
// each page to emit before it asks for the next, and sets f.Truncated
// when the server holds more. It keeps no page it handed on (f.Receipts
// is left as it is), so it holds one page (maxAnswerBytes), not f.Max
// receipts of a size the server chose. Each page must move the
// reading on: its receipts in strictly ascending order
// (ReceiptCursor) after the cursor asked, and a next only on a page with
// receipts and not before its last. Anything else ends the reading with
// an error: a server must neither make the command read for ever (empty
// pages whose next creeps on) nor print a receipt twice.
func (a *api) receipts(ctx context.Context, f *pigeon.ReceiptFinder, emit func([]pigeon.Receipt) error) error {
	after := f.After
	read := 0 // the receipts handed to emit
	for {
		page := pigeon.DefaultMaxReceipts // the most the server answers in one page
		if f.Max > 0 {
			page = min(page, f.Max-read)
		}
		q := url.Values{"max": {strconv.Itoa(page)}}
		if after != (pigeon.ReceiptCursor{}) {
			q.Set("after", after.String())
		}
		b, err := a.do(ctx, http.MethodGet, "/v1/audit/receipts/"+url.PathEscape(f.ID())+"?"+q.Encode(), nil)
		if err != nil {
			return err
		}
		var out struct {
			Receipts recordPage[pigeon.Receipt] `json:"receipts"`
			Next     string                     `json:"next"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return fmt.Errorf("the server's answer is not a page of receipts: %w", err)
		}
		if len(out.Receipts) > page {
			return fmt.Errorf("the server answered %d receipts to a page of %d", len(out.Receipts), page)
		}
		last := after
		for _, r := range out.Receipts {
			if !last.Before(r.Cursor()) {
				return fmt.Errorf("the server answered receipt %s after %s: out of order, or one already read", r.Cursor(), last)
			}
			last = r.Cursor()
		}
		if out.Next == "" {
			return emit(out.Receipts)
		}
		next, err := pigeon.ParseReceiptCursor(out.Next)
		if err != nil || len(out.Receipts) == 0 || next.Before(last) {
			return fmt.Errorf("the server named a next page (%.40q) that does not come after the last receipt it answered", out.Next)
		}
		if err := emit(out.Receipts); err != nil {
			return err
		}
		if read += len(out.Receipts); f.Max > 0 && read >= f.Max {
			f.Truncated = true
			return nil
		}
		after = next
	}
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
			Records recordPage[pigeon.AuditRecord] `json:"records"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return fail(stderr, "audit tail", err)
		}
		for _, r := range out.Records {
			// Each record after the one printed before it: a server
			// whose full pages do not move the reading on would keep the
			// command reading, and printing, for as long as it answers.
			if r.Seq < next {
				return fail(stderr, "audit tail", fmt.Errorf("the server answered record %d, which does not come after the records printed (records from %d on were asked): out of order, or one already printed", r.Seq, next))
			}
			if err := writeJSONLine(stdout, r); err != nil { // a principal, a replay's reason: others' text
				return fail(stderr, "audit tail", err)
			}
			if r.Seq == math.MaxUint64 {
				return 0 // no record can follow it; reading on would start again from 0
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
