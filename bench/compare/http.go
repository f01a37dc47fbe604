package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"pigeon/store/wal"
)

// httpClients is how many keep-alive clients post at once.
const httpClients = 32

// envelope returns the JSON body of a governed publish on eventsSubject
// with idempotency key key; the bare handler is sent the same bodies.
func envelope(key int64) []byte {
	return []byte(`{"type":"payment.authorization.requested","subject":"` + eventsSubject +
		`","intent":"authorize_payment","idempotencyKey":"h-` + strconv.FormatInt(key, 10) +
		`","classification":"pci","region":"uk","data":` + paymentJSON + `}`)
}

// httpLoad posts envelopes to url from httpClients goroutines on
// keep-alive connections until ctx ends; header(i) gives client i's
// headers. Every answer must have status want.
func httpLoad(ctx context.Context, c config, url string, header func(i int) http.Header, want int) (result, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: httpClients, MaxConnsPerHost: httpClients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var keys, done atomic.Int64
	var next atomic.Int64
	return runLoad(ctx, c, func(ctx context.Context) error {
		return workers(ctx, httpClients, func(ctx context.Context) error {
			h := header(int(next.Add(1)) % httpClients)
			for ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(envelope(keys.Add(1))))
				if err != nil {
					return err
				}
				req.Header = h.Clone()
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil {
					return err
				}
				if resp.StatusCode != want {
					return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, body)
				}
				done.Add(1)
			}
			return nil
		})
	}, &done)
}

// bareHTTP is the floor of any HTTP broker: a net/http handler that reads
// the body and answers a small JSON document; req/s.
func bareHTTP(ctx context.Context, c config) (result, error) {
	return serveBare(ctx, c, nil)
}

// bareHTTPFsync is the floor of any durable HTTP broker: bareHTTP's
// handler, but each body is appended to a file and fsynced before the
// answer, with group commit (concurrent requests share one fsync); req/s.
func bareHTTPFsync(ctx context.Context, c config) (result, error) {
	f, err := os.CreateTemp("", "compare-http-fsync-")
	if err != nil {
		return result{}, err
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	return serveBare(ctx, c, newGroupSync(f).append)
}

// serveBare runs httpLoad against a handler that reads the body, gives it
// to keep (or, when keep is nil, discards it without holding it) and
// answers {"status":"accepted"}.
func serveBare(ctx context.Context, c config, keep func(body []byte) error) (result, error) {
	answer := []byte(`{"status":"accepted"}`)
	addr, stop, err := serveLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		if keep == nil {
			_, err = io.Copy(io.Discard, r.Body)
		} else if body, rerr := io.ReadAll(r.Body); rerr != nil {
			err = rerr
		} else {
			err = keep(body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(answer)
	}))
	if err != nil {
		return result{}, err
	}
	defer stop()
	return httpLoad(ctx, c, "http://"+addr+"/v1/messages", func(int) http.Header {
		return http.Header{"Content-Type": {"application/json"}}
	}, http.StatusAccepted)
}

// groupSync appends records to a file and returns once they are fsynced.
// Whoever finds no fsync running starts one for everything written so far;
// the others wait for the fsync that covers their record.
type groupSync struct {
	f *os.File

	mu      sync.Mutex
	cond    sync.Cond
	written uint64 // records written
	synced  uint64 // records an fsync covered
	syncing bool
	err     error
}

func newGroupSync(f *os.File) *groupSync {
	g := &groupSync{f: f}
	g.cond.L = &g.mu
	return g
}

func (g *groupSync) append(rec []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.f.Write(rec); err != nil {
		return err
	}
	g.written++
	mine := g.written
	for g.synced < mine && g.err == nil {
		if g.syncing {
			g.cond.Wait()
			continue
		}
		g.syncing = true
		upTo := g.written
		g.mu.Unlock()
		err := g.f.Sync()
		g.mu.Lock()
		g.syncing, g.synced, g.err = false, upTo, err
		g.cond.Broadcast()
	}
	return g.err
}

// pigeonHTTP is governed publishes on eventsSubject through Pigeon's HTTP
// API (POST /v1/messages), each client under a contract it negotiated
// over HTTP first: accepted req/s.
func pigeonHTTP(kind storeKind) func(context.Context, config) (result, error) {
	return func(ctx context.Context, c config) (result, error) {
		p, err := startPigeon(ctx, kind, true)
		if err != nil {
			return result{}, err
		}
		defer p.close()
		headers := make([]http.Header, httpClients)
		for i := range headers {
			id, err := negotiateHTTP(ctx, p.httpURL(), publisherToken, eventsSubject)
			if err != nil {
				return result{}, err
			}
			headers[i] = http.Header{
				"Content-Type":      {"application/json"},
				"Authorization":     {"Bearer " + publisherToken},
				"X-Pigeon-Contract": {id},
			}
		}
		st, durable := p.st.(*wal.Store)
		var before wal.CommitStats
		if durable {
			before = st.CommitStats()
		}
		r, err := httpLoad(ctx, c, p.httpURL()+"/v1/messages", func(i int) http.Header { return headers[i] }, http.StatusAccepted)
		if err == nil && durable {
			r.note = commitNote(before, st.CommitStats())
		}
		return r, err
	}
}

// commitNote says how many records shared an fsync (group commit):
// publishes in the message log, records (the publishes' acceptances) in
// the audit log, over the whole run (warm-up included), from the store's
// counts before and after.
func commitNote(before, after wal.CommitStats) string {
	per := func(records, batches uint64) string {
		if batches == 0 {
			return "-"
		}
		return strconv.FormatFloat(float64(records)/float64(batches), 'f', 1, 64)
	}
	return "per fsync: " + per(after.MessageRecords-before.MessageRecords, after.MessageBatches-before.MessageBatches) +
		" publishes (message log), " + per(after.AuditRecords-before.AuditRecords, after.AuditBatches-before.AuditBatches) + " records (audit log)"
}

// negotiateHTTP negotiates a contract for subject over the HTTP API and
// returns its id.
func negotiateHTTP(ctx context.Context, base, token, subject string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string][]string{"subjects": {subject}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/contracts", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Contract struct {
			ID string `json:"id"`
		} `json:"contract"`
	}
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("negotiate: %d %s", resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Contract.ID == "" {
		return "", fmt.Errorf("negotiate: unexpected answer %s", raw)
	}
	return out.Contract.ID, nil
}
