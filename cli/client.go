package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"pigeon"
	"pigeon/internal/wire"
	"pigeon/transport/ws"
)

// api talks to a running server over HTTP.
type api struct {
	url, token, region string
	tlsFiles           ws.TLSFiles

	tlsOnce sync.Once
	tls     *tls.Config // from tlsFiles; nil: the defaults
	tlsErr  error
	hc      *http.Client
}

// tlsConfig is the TLS configuration of --tls-ca, --tls-cert and --tls-key (nil when
// none is given).
func (a *api) tlsConfig() (*tls.Config, error) {
	a.tlsOnce.Do(func() {
		if a.tlsFiles == (ws.TLSFiles{}) {
			return
		}
		a.tls, a.tlsErr = ws.ClientTLS(a.tlsFiles)
		if a.tls != nil {
			a.hc.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: a.tls}
		}
	})
	return a.tls, a.tlsErr
}

// secretFlag is a string flag whose value is never shown: flag's usage
// text prints a non-empty default, and --token's default is
// $PIGEON_TOKEN.
type secretFlag struct{ v *string }

func (f secretFlag) String() string { return "" }

func (f secretFlag) Set(s string) error {
	*f.v = s
	return nil
}

// urlFlag is a string flag holding a URL that is shown without the
// password of its user info (--url's default is $PIGEON_URL).
type urlFlag struct{ v *string }

func (f urlFlag) String() string {
	if f.v == nil {
		return ""
	}
	u, err := url.Parse(*f.v)
	if err != nil {
		return ""
	}
	return u.Redacted()
}

func (f urlFlag) Set(s string) error {
	*f.v = s
	return nil
}

// dialOptions are the WebSocket dial options of the client flags.
func (a *api) dialOptions() ([]ws.Option, error) {
	var opts []ws.Option
	if a.region != "" {
		opts = append(opts, ws.WithConnectOptions(pigeon.WithRegion(a.region)))
	}
	tc, err := a.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, ws.WithTLS(tc))
	}
	return opts, nil
}

// clientFlags adds the flags every client command shares.
func clientFlags(fs *flag.FlagSet) *api {
	a := &api{hc: &http.Client{Timeout: 30 * time.Second}}
	url := os.Getenv("PIGEON_URL")
	if url == "" {
		url = "http://127.0.0.1:8787"
	}
	a.url = url
	fs.Var(urlFlag{&a.url}, "url", "server `URL` (default $PIGEON_URL when set)")
	a.token = os.Getenv("PIGEON_TOKEN")
	fs.Var(secretFlag{&a.token}, "token", "bearer `token` (default $PIGEON_TOKEN)")
	fs.StringVar(&a.region, "region", "", "region of the session (default: the server's)")
	fs.StringVar(&a.tlsFiles.CA, "tls-ca", os.Getenv("PIGEON_CA"), "PEM bundle of the CAs that verify an https:// server (default $PIGEON_CA, else the system roots)")
	fs.StringVar(&a.tlsFiles.Cert, "tls-cert", os.Getenv("PIGEON_CERT"), "client certificate (PEM) for mTLS (default $PIGEON_CERT)")
	fs.StringVar(&a.tlsFiles.Key, "tls-key", os.Getenv("PIGEON_KEY"), "key of the client certificate (PEM) (default $PIGEON_KEY)")
	return a
}

// do sends one request and returns the body of a 2xx answer; any other
// answer is the typed error of its error body.
func (a *api) do(ctx context.Context, method, path string, body any, headers ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(a.url, "/")+path, rd)
	if err != nil {
		return nil, badURL(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	if a.region != "" {
		req.Header.Set("X-Pigeon-Region", a.region)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if _, err := a.tlsConfig(); err != nil {
		return nil, err
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > maxAnswerBytes {
		// Cut there, the answer would read as JSON that ends too soon:
		// say why instead.
		return nil, fmt.Errorf("the server's answer to %s %s is larger than %d bytes: it is not read", method, path, maxAnswerBytes)
	}
	if resp.StatusCode/100 == 2 {
		return b, nil
	}
	var eb struct {
		Error *wire.Error `json:"error"`
	}
	if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
		return nil, eb.Error.Err()
	}
	return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
}

// maxAnswerBytes is the most of one answer the client commands read
// (the server's own bound on the reads in flight, 256 MiB): a server
// that answers without end, or a page larger than that, ends the command
// with an error. A listing command holds one page at a time, so that
// this bounds its memory however many records it is asked to print. A
// variable for the tests.
var maxAnswerBytes int64 = 256 << 20

// badURL is the refusal of a --url that does not parse. url.Parse quotes
// the whole URL in its error, the password of its user info with it; the
// refusal keeps only the reason.
func badURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return pigeon.WrapError(pigeon.CodeInvalidArgument, err, "--url is not a valid URL: %v", err)
}

// negotiate returns a contract id for subjects.
func (a *api) negotiate(ctx context.Context, subjects ...string) (string, error) {
	b, err := a.do(ctx, http.MethodPost, "/v1/contracts", map[string]any{"subjects": subjects})
	if err != nil {
		return "", err
	}
	var out struct {
		Contract pigeon.ContractInfo `json:"contract"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", err
	}
	return out.Contract.ID, nil
}

// wsURL is the WebSocket endpoint of the server.
func (a *api) wsURL() string { return strings.TrimSuffix(a.url, "/") + "/v1/ws" }

// fail prints err (its code too when typed) and returns exit code 1.
func fail(stderr io.Writer, cmd string, err error) int {
	var pe *pigeon.Error
	if errors.As(err, &pe) {
		b, _ := json.Marshal(map[string]any{"error": wire.Encode(pe)})
		fmt.Fprintf(stderr, "pigeon %s: %s\n%s\n", cmd, printable(string(pe.Code)), terminalSafeJSON(b))
		return 1
	}
	fmt.Fprintf(stderr, "pigeon %s: %s\n", cmd, printable(err.Error()))
	return 1
}

// parseInterspersed parses flags that may come before or after the
// positional arguments, which it returns.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// printJSON writes raw as one indented JSON document, terminal-safe
// (terminalSafeJSON).
func printJSON(w io.Writer, raw []byte) {
	raw = bytes.TrimSpace(raw)
	var buf bytes.Buffer
	var out []byte
	if json.Indent(&buf, raw, "", "  ") == nil {
		out = terminalSafeJSON(buf.Bytes())
	} else {
		out = []byte(printable(string(raw))) // not JSON: anything at all
	}
	_, _ = w.Write(append(out, '\n'))
}

func publishCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := clientFlags(fs)
	subject := fs.String("subject", "", "subject to publish on (required unless the message names one)")
	file := fs.String("file", "", `file holding the whole envelope as JSON ("-": standard input)`)
	data := fs.String("data", "", "the message's data, JSON")
	typ := fs.String("type", "", "message type (default: the subject's name, as the reference CLI fills it)")
	intent := fs.String("intent", "", "message intent")
	key := fs.String("key", "", "idempotency key")
	class := fs.String("classification", "", "classification")
	contract := fs.String("contract", "", "contract id (default: negotiate one for the subject)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	m := &pigeon.Message{}
	if *file != "" {
		b, err := readFileArg(*file)
		if err != nil {
			return fail(stderr, "publish", err)
		}
		if m, err = pigeon.DecodeMessage(b); err != nil {
			return fail(stderr, "publish", err)
		}
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{{&m.Subject, *subject}, {&m.Type, *typ}, {&m.Intent, *intent}, {&m.IdempotencyKey, *key}, {&m.Classification, *class}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if *data != "" {
		if !json.Valid([]byte(*data)) {
			fmt.Fprintln(stderr, "pigeon publish: --data is not JSON")
			return 2
		}
		m.Data = json.RawMessage(*data)
	}
	if m.Subject == "" {
		fmt.Fprintln(stderr, "pigeon publish: --subject is required")
		return 2
	}
	if m.Type == "" {
		m.Type = m.Subject
	}
	id := *contract
	if id == "" {
		var err error
		if id, err = a.negotiate(ctx, m.Subject); err != nil {
			return fail(stderr, "publish", err)
		}
	}
	b, err := a.do(ctx, http.MethodPost, "/v1/messages", m, "X-Pigeon-Contract", id)
	if err != nil {
		return fail(stderr, "publish", err)
	}
	printJSON(stdout, b)
	return 0
}

// defaultMaxQuarantine is the most records `pigeon quarantine list`
// prints when --max is not given (or is 0): a quarantine holds whatever
// was refused, millions of records on a busy server, each with its whole
// message, so a run without --max stops there, as `audit receipts` stops
// at its default, and names the next page. A negative --max prints every
// record, streamed a page at a time.
const defaultMaxQuarantine = 1000

// quarantineListing is what `pigeon quarantine list` asks for: the
// records from since on (after the record of id after at that time, when
// after is set: the next page a capped run names), at most max of them
// (0 or negative: every one).
type quarantineListing struct {
	since, after string
	max          int
}

// list prints the records of l, one JSON document a line, oldest first,
// asking for page after page (a page stops at the server's read budget)
// until one comes back empty or max are printed. Pigeon lists records by
// time, then id, and each page after the (time, id) of the last record of
// the one before, so every record must come after the one printed before
// it (the first after l's since and after): otherwise the server is not
// moving on (the same page again, two pages in turn, records back in
// time), and list returns an error after the records it printed rather
// than read for as long as it is answered. When a record beyond the max
// printed is listed, list stops there and returns the cursor of the last
// record printed: the next page. Without a max, a server that keeps
// quarantining records as fast as they are read (or one that makes its
// records up, each after the last) is read for as long as it answers;
// each page is printed before the next is asked for, so list holds one
// page (maxAnswerBytes) whatever the number of records.
func (l quarantineListing) list(ctx context.Context, a *api, stdout io.Writer) (next *quarantineCursor, err error) {
	q := url.Values{}
	var prev *quarantineCursor // nil: before every record
	if l.since != "" {
		q.Set("since", l.since)
		if t, err := time.Parse(time.RFC3339Nano, l.since); err == nil { // else the server refuses it
			prev = &quarantineCursor{time: t, id: l.after}
		}
		if l.after != "" {
			q.Set("after", l.after)
		}
	}
	printed := 0
	for {
		if l.max > 0 {
			// One more than is left to print: a record beyond the
			// max tells that the run is capped.
			// (Within the server's cap on a page, maxPageRecords.)
			q.Set("max", strconv.Itoa(min(l.max-printed, maxPageRecords)+1))
		}
		path := "/v1/quarantine"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
		b, err := a.do(ctx, http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		var out struct {
			Records recordPage[json.RawMessage] `json:"records"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
		if len(out.Records) == 0 {
			return nil, nil
		}
		var last struct {
			ID   string `json:"id"`
			Time string `json:"time"`
		}
		for _, r := range out.Records {
			last.ID, last.Time = "", ""
			if err := json.Unmarshal(r, &last); err != nil {
				return nil, err
			}
			t, err := time.Parse(time.RFC3339Nano, last.Time)
			if last.ID == "" || err != nil {
				return nil, fmt.Errorf("the server listed a record without an id and an RFC 3339 time (id %q, time %q)", last.ID, last.Time)
			}
			cur := quarantineCursor{time: t, id: last.ID}
			if prev != nil && !prev.before(cur) {
				return nil, fmt.Errorf("the server's record %q at %s does not come after %s: its pages do not move on", cur.id, last.Time, prev)
			}
			if l.max > 0 && printed == l.max {
				return prev, nil
			}
			// One line a record, as the same JSON, terminal-safe.
			var line bytes.Buffer
			if err := json.Compact(&line, r); err != nil {
				return nil, err
			}
			_, _ = stdout.Write(append(terminalSafeJSON(line.Bytes()), '\n'))
			prev = &cur
			printed++
		}
		q.Set("since", last.Time)
		q.Set("after", last.ID)
	}
}

// quarantineCursor is a quarantine record's place in the order Pigeon
// lists them: by time, then id. One with an empty id (a --since alone)
// comes before every record at or after its time.
type quarantineCursor struct {
	time time.Time
	id   string
}

// before reports whether c comes before d.
func (c quarantineCursor) before(d quarantineCursor) bool {
	return c.time.Before(d.time) || c.time.Equal(d.time) && c.id < d.id
}

func (c quarantineCursor) String() string {
	if c.id == "" {
		return "--since " + c.time.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("record %q at %s", c.id, c.time.Format(time.RFC3339Nano))
}

func quarantineCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("quarantine "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := clientFlags(fs)
	since := fs.String("since", "", "list records from this RFC 3339 time")
	after := fs.String("after", "", "list: with --since, the records after this record id at that time (the next page a run capped by --max names)")
	maxN := fs.Int("max", 0, fmt.Sprintf("list: the most records printed; beyond it the first are printed, a warning names the next page and the exit code is 3 (0: the default, %d; negative: every record)", defaultMaxQuarantine))
	contract := fs.String("contract", "", "release: contract id that grants publish on the record's subject (default: negotiate one)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	cmd := "quarantine " + sub
	if sub == "list" {
		if *after != "" && *since == "" {
			fmt.Fprintf(stderr, "pigeon %s: --after needs --since: the time of the record it names\n", cmd)
			return 2
		}
		limit := *maxN
		if limit == 0 {
			limit = defaultMaxQuarantine
		}
		next, err := quarantineListing{since: *since, after: *after, max: limit}.list(ctx, a, stdout)
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if next != nil {
			fmt.Fprintf(stderr, "pigeon %s: more than %d records are listed: only the first %d are printed; the next page is --since %s --after %s (or raise --max; a negative --max prints every record)\n",
				cmd, limit, limit, next.time.Format(time.RFC3339Nano), printable(next.id))
			return 3
		}
		return 0
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "pigeon %s: one record id is required\n", cmd)
		return 2
	}
	id := pos[0]
	b, err := a.do(ctx, http.MethodGet, "/v1/quarantine/"+url.PathEscape(id), nil)
	if err != nil {
		return fail(stderr, cmd, err)
	}
	if sub == "show" {
		printJSON(stdout, b)
		return 0
	}
	cid := *contract
	if cid == "" {
		var rec struct {
			Record struct {
				Subject string `json:"subject"`
			} `json:"record"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return fail(stderr, cmd, err)
		}
		if cid, err = a.negotiate(ctx, rec.Record.Subject); err != nil {
			return fail(stderr, cmd, err)
		}
	}
	b, err = a.do(ctx, http.MethodPost, "/v1/quarantine/"+url.PathEscape(id)+"/release", nil, "X-Pigeon-Contract", cid)
	if err != nil {
		return fail(stderr, cmd, err)
	}
	printJSON(stdout, b)
	return 0
}

// readFileArg reads the file a --file flag names, or standard input for
// "-", up to maxPayloadFile bytes; a named file must be a regular file.
func readFileArg(name string) ([]byte, error) {
	if name == "-" {
		return readAtMost(os.Stdin, "standard input", maxPayloadFile)
	}
	return readRegularFile(name, maxPayloadFile)
}
