package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pigeon"
	"pigeon/demo"
	"pigeon/server"
	"pigeon/store"
	"pigeon/store/wal"
)

// httpClients is how many keep-alive clients drive BenchmarkHTTPPublish.
const httpClients = 32

// BenchmarkHTTPPublish is issue 12's HTTP row: a governed payment publish
// (POST /v1/messages on payments.authorize: contract, policy, region,
// intent, idempotency, schema, forbidden and tokenized fields, the audit
// chain) from 32 keep-alive clients on 127.0.0.1, beside a bare net/http
// handler that reads the body and answers a small JSON object on the same
// machine. "memory" runs on the memory store, "wal" on store/wal with its
// default SyncBatch (fsynced before the answer). Compare req/s across the
// sub-benchmarks of one run; on a machine shared with other work compare
// cpu-µs/req (the process's CPU time, client and server, per request)
// instead:
//
//	go test -run '^$' -bench BenchmarkHTTPPublish -benchtime 2s ./server
func BenchmarkHTTPPublish(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		answer := []byte(`{"status":"accepted"}` + "\n")
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(answer)
		})
		hs := &http.Server{Handler: h, ReadHeaderTimeout: server.DefaultReadHeaderTimeout,
			ReadTimeout: server.DefaultReadTimeout, WriteTimeout: server.DefaultWriteTimeout, IdleTimeout: server.DefaultIdleTimeout}
		l := benchListen(b)
		go func() { _ = hs.Serve(l) }()
		b.Cleanup(func() { _ = hs.Close() })
		driveHTTP(b, "http://"+l.Addr().String(), "", "")
	})
	b.Run("memory", func(b *testing.B) {
		benchPigeonHTTP(b, nil)
	})
	b.Run("wal", func(b *testing.B) {
		st, err := wal.Open(b.TempDir(), nil) // SyncBatch: fsynced before the answer
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close(context.Background()) })
		before := st.CommitStats()
		benchPigeonHTTP(b, st)
		after := st.CommitStats()
		if n := after.MessageBatches - before.MessageBatches; n > 0 {
			b.ReportMetric(float64(after.MessageRecords-before.MessageRecords)/float64(n), "msgs/batch")
		}
	})
}

// benchPigeonHTTP serves the demo catalog on st (nil: the memory store)
// with the server's defaults and drives it.
func benchPigeonHTTP(b *testing.B, st store.Store) {
	ctx := context.Background()
	opts := &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
		Region: "uk", ContractTTL: 24 * time.Hour}
	if st != nil {
		opts.Store = st
	}
	e, err := pigeon.New(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	s := server.New(e, nil)
	l := benchListen(b)
	go func() { _ = s.Serve(l) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		_ = e.Shutdown(ctx)
	})
	p, err := e.Authenticate(ctx, "checkout-token")
	if err != nil {
		b.Fatal(err)
	}
	k, err := e.Negotiate(ctx, p, "uk", []string{"payments.authorize"}, 0)
	if err != nil {
		b.Fatal(err)
	}
	driveHTTP(b, "http://"+l.Addr().String(), "checkout-token", k.Info().ID)
}

func benchListen(b *testing.B) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// paymentBody is the demo payment envelope as a client sends it (its
// region is the request's), 259 bytes with idempotency key idemKey(n).
func paymentBody(key string) []byte {
	t := paymentTemplate()
	b := make([]byte, 0, len(t[0])+len(key)+len(t[1]))
	return append(append(append(b, t[0]...), key...), t[1]...)
}

// paymentTemplate is the payment envelope split where its idempotency key
// goes.
var paymentTemplate = sync.OnceValue(func() [2][]byte {
	m := demo.Payment("o-1")
	b, err := json.Marshal(struct {
		Type           string          `json:"type"`
		Subject        string          `json:"subject"`
		Intent         string          `json:"intent"`
		IdempotencyKey string          `json:"idempotencyKey"`
		Classification string          `json:"classification"`
		Data           json.RawMessage `json:"data"`
	}{m.Type, m.Subject, m.Intent, "\x00", m.Classification, m.Data})
	if err != nil {
		panic(err)
	}
	before, after, _ := bytes.Cut(b, []byte(`\u0000`))
	return [2][]byte{before, after}
})

// driveHTTP posts b.N payment envelopes, each with a fresh idempotency key,
// to base+"/v1/messages" from httpClients goroutines sharing one keep-alive
// client, and reports req/s. token and contract are sent when set.
func driveHTTP(b *testing.B, base, token, contract string) {
	tr := &http.Transport{MaxIdleConns: 2 * httpClients, MaxIdleConnsPerHost: 2 * httpClients, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	url := base + "/v1/messages"
	var next atomic.Int64
	post := func(key int64) error {
		body := paymentBody(idemKey(key))
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("X-Pigeon-Contract", contract)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		ans, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusAccepted {
			return &statusError{resp.StatusCode, ans}
		}
		return nil
	}
	// Warm the connections and check the answer once.
	if err := post(0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range httpClients {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(b.N) || failed.Load() != nil {
					return
				}
				if err := post(n); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu1, _ := processCPU()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
	if cpuOK {
		// CPU time per request, client and server together: steadier than
		// req/s on a machine other work shares.
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
	}
}

// idemKey is a 7-character idempotency key, distinct for every n below
// 36^6.
func idemKey(n int64) string {
	b := []byte("k000000")
	for i := len(b) - 1; i > 0 && n > 0; i-- {
		b[i] = "0123456789abcdefghijklmnopqrstuvwxyz"[n%36]
		n /= 36
	}
	return string(b)
}

type statusError struct {
	status int
	body   []byte
}

func (e *statusError) Error() string {
	return "status " + strconv.Itoa(e.status) + ": " + string(e.body)
}

// BenchmarkPublishHandler is the server's share of one governed publish:
// the payment envelope of BenchmarkHTTPPublish through Server.ServeHTTP in
// process (routing, authentication, decoding, every gate, the audit chain,
// the memory store, the answer), without the network.
func BenchmarkPublishHandler(b *testing.B) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
		Region: "uk", ContractTTL: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	s := server.New(e, nil)
	p, err := e.Authenticate(ctx, "checkout-token")
	if err != nil {
		b.Fatal(err)
	}
	k, err := e.Negotiate(ctx, p, "uk", []string{"payments.authorize"}, 0)
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pigeon/v1/messages", nil)
	if err != nil {
		b.Fatal(err)
	}
	tmpl.Header.Set("Content-Type", "application/json")
	tmpl.Header.Set("Authorization", "Bearer checkout-token")
	tmpl.Header.Set("X-Pigeon-Contract", k.Info().ID)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for i := int64(1); b.Loop(); i++ {
		body := paymentBody(idemKey(i))
		r := *tmpl
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		clear(w.h)
		w.status = 0
		s.ServeHTTP(w, &r)
		if w.status != http.StatusAccepted {
			b.Fatalf("status %d", w.status)
		}
	}
}

// discardWriter is an http.ResponseWriter that keeps the status only.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(b), nil
}

// BenchmarkHTTPReplay is the cost of the read pool
// (Options.MaxReadBytesInFlight) on the API's reads: 32 keep-alive
// clients replaying the same 50 notifications (POST
// /v1/subjects/notifications.send/replay) with the pool at its default
// and without it. Each replay reserves twice the engine's MaxReadBytes
// before it reads, so the default pool lets about seven read at once;
// reads are short, and the rest wait for room.
//
//	go test -run '^$' -bench BenchmarkHTTPReplay -benchtime 2s ./server
func BenchmarkHTTPReplay(b *testing.B) {
	for _, tc := range []struct {
		name  string
		limit int64
	}{{"pool", 0}, {"unbounded", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			e, err := pigeon.New(ctx, &pigeon.Options{Authenticator: pigeon.NewStaticTokens(demo.Tokens()...), Catalog: demo.Catalog(),
				Region: "uk", ContractTTL: 24 * time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			s := server.New(e, &server.Options{MaxReadBytesInFlight: tc.limit})
			l := benchListen(b)
			go func() { _ = s.Serve(l) }()
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
				_ = e.Shutdown(ctx)
			})
			negotiate := func(token, subject string) pigeon.Caller {
				p, err := e.Authenticate(ctx, token)
				if err != nil {
					b.Fatal(err)
				}
				k, err := e.Negotiate(ctx, p, "uk", []string{subject}, 0)
				if err != nil {
					b.Fatal(err)
				}
				return pigeon.Caller{Principal: p, Region: "uk", ContractID: k.ID()}
			}
			orders := negotiate("orders-token", "notifications.send")
			for i := range 50 {
				if _, err := e.Publish(ctx, orders, demo.Notification("n-"+strconv.Itoa(i))); err != nil {
					b.Fatal(err)
				}
			}
			replayer := negotiate("notify-replay-token", "notifications.send")
			url := "http://" + l.Addr().String() + "/v1/subjects/notifications.send/replay"
			tr := &http.Transport{MaxIdleConns: 2 * httpClients, MaxIdleConnsPerHost: 2 * httpClients, IdleConnTimeout: time.Minute}
			client := &http.Client{Transport: tr}
			defer tr.CloseIdleConnections()
			replay := func() error {
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"reason":"bench","max":50}`)))
				if err != nil {
					return err
				}
				req.Header.Set("Authorization", "Bearer notify-replay-token")
				req.Header.Set("X-Pigeon-Contract", replayer.ContractID)
				resp, err := client.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				ans, err := io.ReadAll(resp.Body)
				if err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK {
					return &statusError{resp.StatusCode, ans}
				}
				return nil
			}
			if err := replay(); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			var failed atomic.Pointer[error]
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, cpuOK := processCPU()
			var wg sync.WaitGroup
			for range httpClients {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) && failed.Load() == nil {
						if err := replay(); err != nil {
							failed.CompareAndSwap(nil, &err)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			cpu1, _ := processCPU()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
			if cpuOK {
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-µs/req")
			}
		})
	}
}
