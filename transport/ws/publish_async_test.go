package ws_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

const chatJSON = `{"type":"chat","subject":"chat.messages","intent":"chat","data":{"text":"hi"}}`

// A malformed or refused message inside a batch is refused alone, in its
// slot; the others are judged normally, and the answers come in order.
func TestPublishBatchRefusesABadMessageAlone(t *testing.T) {
	v := newEnv(t, nil)
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	f := r.ok(ws.OpPublishBatch, `,"messages":[`+strings.Join([]string{
		chatJSON,
		`{"type":5,"subject":"chat.messages"}`, // malformed envelope
		chatJSON,
		`null`,
		`"not an object"`,
		`{"type":"chat","subject":"payments.authorize","intent":"chat","data":{}}`, // outside the contract
		chatJSON,
	}, ",")+`]`, ws.OpDecisions)
	want := []pigeon.Code{"", pigeon.CodeEnvelopeInvalid, "", pigeon.CodeEnvelopeInvalid, pigeon.CodeEnvelopeInvalid, pigeon.CodeSubjectNotInContract, ""}
	require.Len(t, f.Results, len(want))
	seqs := map[uint64]bool{}
	for i, code := range want {
		res := f.Results[i]
		if code != "" {
			require.NotNil(t, res.Error, "slot %d: %+v", i, res)
			require.Equal(t, code, res.Error.Code, "slot %d: %+v", i, res.Error)
			require.Nil(t, res.Message)
			continue
		}
		require.Nil(t, res.Error, "slot %d: %+v", i, res.Error)
		require.Equal(t, pigeon.StatusAccepted, res.Status)
		require.NotZero(t, res.Message.Sequence)
		require.False(t, seqs[res.Message.Sequence], "slot %d has a sequence of its own", i)
		seqs[res.Message.Sequence] = true
		require.Equal(t, "spiffe://chat/alice", res.Message.Source)
	}
	// The connection carries on, and v1 publish frames work unchanged.
	r.ok(ws.OpPublish, `,"message":`+chatJSON, ws.OpDecision)
}

func TestPublishBatchBounds(t *testing.T) {
	v := newEnv(t, &ws.Options{MaxFrame: 4 << 20})
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	over := strings.TrimSuffix(strings.Repeat(chatJSON+",", ws.MaxPublishBatch+1), ",")
	tests := []struct{ name, body string }{
		{"no messages", ``},
		{"empty", `,"messages":[]`},
		{"not an array", `,"messages":{"a":1}`},
		{"over the bound", `,"messages":[` + over + `]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r.fail(ws.OpPublishBatch, tc.body, pigeon.CodeBadRequest)
		})
	}
	full := strings.TrimSuffix(strings.Repeat(chatJSON+",", ws.MaxPublishBatch), ",")
	f := r.ok(ws.OpPublishBatch, `,"messages":[`+full+`]`, ws.OpDecisions)
	require.Len(t, f.Results, ws.MaxPublishBatch)
}

// The publish rate counts messages, not frames: a batch takes one token a
// message, and the messages past the rate are refused in their slots.
func TestPublishRateCountsBatchMessages(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: 0.001, PublishBurst: 3})
	r := v.raw(t, "alice-token")
	r.negotiate("chat.messages")
	f := r.ok(ws.OpPublishBatch, `,"messages":[`+strings.TrimSuffix(strings.Repeat(chatJSON+",", 5), ",")+`]`, ws.OpDecisions)
	require.Len(t, f.Results, 5)
	for i, res := range f.Results {
		if i < 3 {
			require.Nil(t, res.Error, "slot %d", i)
			continue
		}
		require.NotNil(t, res.Error, "slot %d", i)
		require.Equal(t, pigeon.CodeRateLimited, res.Error.Code)
	}
	r.fail(ws.OpPublishBatch, `,"messages":[`+chatJSON+`]`, pigeon.CodeRateLimited)
	r.fail(ws.OpPublish, `,"message":`+chatJSON, pigeon.CodeRateLimited)
	require.Equal(t, int64(3), v.srv.Stats().RateLimited)
}

// Many goroutines publish asynchronously on one session, bounded in
// flight: every publish is answered, refusals only for their own message.
func TestPublishAsyncConcurrent(t *testing.T) {
	v := newEnv(t, &ws.Options{PublishRate: -1})
	s := v.dial(t, "alice-token", []string{"chat.messages"}, ws.WithMaxPendingPublishes(64))
	ctx := context.Background()
	const goroutines, each = 8, 200
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs = map[uint64]bool{}
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var pending []*ws.PendingPublish
			for i := range each {
				m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: []byte(`{"n":` + strconv.Itoa(g*each+i) + `}`)}
				if i%50 == 7 {
					m.Subject = "payments.authorize" // refused alone
				}
				p, err := s.PublishAsync(ctx, m)
				if !assertNoError(t, err) {
					return
				}
				pending = append(pending, p)
			}
			for i, p := range pending {
				res, err := p.Wait(ctx)
				<-p.Done()
				r2, err2 := p.Result()
				if i%50 == 7 {
					if !assertCode(t, err, pigeon.CodeSubjectNotInContract) || !assertCode(t, err2, pigeon.CodeSubjectNotInContract) {
						return
					}
					continue
				}
				if !assertNoError(t, err) || !assertNoError(t, err2) {
					return
				}
				mu.Lock()
				seqs[res.Message.Sequence] = true
				mu.Unlock()
				if res != r2 || res.Message.Data == nil {
					t.Errorf("Result and Wait differ: %+v %+v", res, r2)
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, seqs, goroutines*(each-each/50))
}

func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func assertCode(t *testing.T, err error, code pigeon.Code) bool {
	if pigeon.ErrorCode(err) != code {
		t.Errorf("want %s, got %v", code, err)
		return false
	}
	return true
}

// silentServer negotiates and then reads frames without answering them;
// drop closes every connection it holds.
type silentServer struct {
	hs    *httptest.Server
	url   string
	mu    sync.Mutex
	conns []*websocket.Conn
	got   chan string // the ops of the frames read
}

func newSilentServer(t *testing.T) *silentServer {
	ss := &silentServer{got: make(chan string, 1024)}
	ss.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ws.Subprotocol}})
		if err != nil {
			return
		}
		ss.mu.Lock()
		ss.conns = append(ss.conns, c)
		ss.mu.Unlock()
		ctx := r.Context()
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			f, err := ws.DecodeFrame(b)
			if err != nil {
				continue
			}
			if f.Op == ws.OpNegotiate {
				_ = c.Write(ctx, websocket.MessageText, []byte(`{"op":"contract","re":"`+f.ID+`","contract":{"id":"k","principal":"alice","subjects":[]}}`))
				continue
			}
			select {
			case ss.got <- f.Op:
			default:
			}
		}
	}))
	ss.url = "ws" + strings.TrimPrefix(ss.hs.URL, "http")
	t.Cleanup(func() {
		ss.drop()
		ss.hs.Close()
	})
	return ss
}

func (ss *silentServer) drop() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, c := range ss.conns {
		_ = c.CloseNow()
	}
	ss.conns = nil
}

// With the in-flight bound reached, PublishAsync waits for room until its
// ctx ends; Wait's ctx ends only the wait.
func TestPublishAsyncContext(t *testing.T) {
	ss := newSilentServer(t)
	s, err := ws.Dial(context.Background(), ss.url, "alice-token", []string{"chat.messages"}, ws.WithMaxPendingPublishes(2))
	require.NoError(t, err)
	defer s.Close(context.Background())
	m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"}
	ctx := context.Background()
	p1, err := s.PublishAsync(ctx, m)
	require.NoError(t, err)
	_, err = s.PublishAsync(ctx, m)
	require.NoError(t, err)
	_, err = p1.Result()
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(err), "no answer yet")

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = s.PublishAsync(short, m)
	require.Equal(t, pigeon.CodeRequestTimeout, pigeon.ErrorCode(err))
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = p1.Wait(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	select {
	case <-p1.Done():
		t.Fatal("a wait that ended resolved the publish")
	default:
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	_, err = s.Publish(cancelled, m)
	require.ErrorIs(t, err, context.Canceled)
}

// A dropped connection resolves every pending publish, sent or still
// queued, with a transport error, and frees the in-flight bound.
func TestPublishAsyncConnectionDropResolvesPending(t *testing.T) {
	ss := newSilentServer(t)
	s, err := ws.Dial(context.Background(), ss.url, "alice-token", []string{"chat.messages"}, ws.WithMaxPendingPublishes(100))
	require.NoError(t, err)
	defer s.Close(context.Background())
	ctx := context.Background()
	m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"}
	var pending []*ws.PendingPublish
	for range 100 {
		p, err := s.PublishAsync(ctx, m)
		require.NoError(t, err)
		pending = append(pending, p)
	}
	<-ss.got // at least one publish frame reached the server
	ss.drop()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, p := range pending {
		_, err := p.Wait(wctx)
		require.Equal(t, pigeon.CodeSessionClosed, pigeon.ErrorCode(err), "%v", err)
	}
	// The bound is free again: a publish fails at once, not waiting.
	_, err = s.PublishAsync(wctx, m)
	require.Equal(t, pigeon.CodeSessionClosed, pigeon.ErrorCode(err))
}

// More frames queued than the writer sends in one burst all go out, even
// when nothing is queued after them.
func TestPublishAsyncLongQueueDrains(t *testing.T) {
	defer ws.SetPublishBatchLimit(1)() // a frame per message: many frames queued
	v := newEnv(t, &ws.Options{PublishRate: -1})
	s := v.dial(t, "alice-token", []string{"chat.messages"}, ws.WithMaxPendingPublishes(500))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat"}
	var pending []*ws.PendingPublish
	for range 500 {
		p, err := s.PublishAsync(ctx, m)
		require.NoError(t, err)
		pending = append(pending, p)
	}
	for _, p := range pending {
		_, err := p.Wait(ctx)
		require.NoError(t, err)
	}
}
