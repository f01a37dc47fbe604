package jetstream

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/testlog"
	"pigeon/store"
	"pigeon/store/memory"
)

// linkProxy forwards TCP connections to a NATS server and can cut them
// off: dropped, every connection is closed and a new one closed at once
// (a server unreachable from the node); stalled, no byte goes either way
// while the connections stay open (a link that silently stops, with no
// error for the client to see).
type linkProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	dropped bool
	held    chan struct{} // not nil while stalled; closed when it ends
	closed  bool
}

func startLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *linkProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		p.mu.Lock()
		if err != nil || p.dropped || p.closed {
			p.mu.Unlock()
			in.Close()
			if out != nil {
				out.Close()
			}
			continue
		}
		p.conns[in], p.conns[out] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(out, in)
		go p.pump(in, out)
	}
}

// pump copies src to dst, each read held while the link is stalled.
func (p *linkProxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// drop closes every connection and refuses new ones until heal.
func (p *linkProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = true
	for c := range p.conns {
		c.Close()
	}
}

// stall holds every byte until heal.
func (p *linkProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = make(chan struct{})
}

// heal lets connections through again.
func (p *linkProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = false
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

func (p *linkProxy) close() {
	p.heal()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// auditApart is a node's store with its audit chain kept in memory,
// apart from NATS: cut off from NATS, the node's audit log does not fail,
// so that what refuses its operations is the bound under test, not the
// audit log's own guard (which trips only once something was to be
// audited, and guards only what leaves evidence first).
type auditApart struct {
	store.Store
	audit *memory.Store
}

func (s auditApart) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	return s.audit.AppendAudit(ctx, recs...)
}

func (s auditApart) ReadAudit(ctx context.Context, from uint64, limit int) ([]store.AuditRecord, error) {
	return s.audit.ReadAudit(ctx, from, limit)
}

func (s auditApart) AuditHead(ctx context.Context) (store.AuditRecord, store.Checkpoint, error) {
	return s.audit.AuditHead(ctx)
}

// stallingWatch is a Cluster whose watch can be made to stall without an
// error, while the node's connection to NATS works: the change it reads
// next is held, and so is everything after it (the node's confirmations
// included), until the stall ends.
type stallingWatch struct {
	*Cluster
	mu   sync.Mutex
	held chan struct{} // not nil while stalled; closed when it ends
}

func (w *stallingWatch) Watch(ctx context.Context, fn func(pigeon.ClusterChange)) error {
	return w.Cluster.Watch(ctx, func(c pigeon.ClusterChange) {
		w.mu.Lock()
		held := w.held
		w.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-ctx.Done():
			}
		}
		fn(c)
	})
}

func (w *stallingWatch) stall() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = make(chan struct{})
}

func (w *stallingWatch) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held != nil {
		close(w.held)
		w.held = nil
	}
}

// memberGrant puts on e the role "member", which may publish on
// rooms.chat, and carol's account holding it, and issues carol a grant
// of it for an hour.
func memberGrant(ctx context.Context, t *testing.T, e *pigeon.Engine) pigeon.GrantToken {
	t.Helper()
	_, err := e.PutRole(ctx, pigeon.Role{Name: "member", Permissions: []pigeon.Permission{{Subject: "rooms.chat", Operations: []pigeon.Operation{pigeon.OpPublish}}}})
	require.NoError(t, err)
	_, err = e.CreateAccount(ctx, pigeon.Account{ID: carol, Roles: []string{"member"}})
	require.NoError(t, err)
	g, err := e.IssueGrant(ctx, carol, []string{"member"}, time.Hour)
	require.NoError(t, err)
	return g
}

// roomMsg is a chat message on rooms.chat, which memberGrant's grant may
// publish.
func roomMsg(room string) *pigeon.Message {
	return &pigeon.Message{Type: "chat", Subject: "rooms.chat", Intent: "chat", Data: json.RawMessage(`{"room":"` + room + `"}`)}
}

// grantSessions connects on e, once e has applied g, carol with g's
// token on rooms.chat (revoked: the session whose grant the test
// revokes) and bob on chat.messages (other: one no revocation touches).
// Both are closed when the test ends.
func grantSessions(ctx context.Context, t *testing.T, e *pigeon.Engine, g pigeon.GrantToken) (revoked, other pigeon.Session) {
	t.Helper()
	require.Eventually(t, func() bool { // once e applied the grant
		var err error
		revoked, err = e.Connect(ctx, g.Token, []string{"rooms.chat"})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	t.Cleanup(func() { _ = revoked.Close(context.Background()) })
	other, err := e.Connect(ctx, "bob-token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	return revoked, other
}

// requireAuthorizesNothing requires that e, which may not have heard of
// every change, refuses STORE_UNAVAILABLE all it is asked to authorize:
// a publication on revoked's grant and one on other's (their text saying
// when), and a new session.
func requireAuthorizesNothing(ctx context.Context, t *testing.T, e *pigeon.Engine, revoked, other pigeon.Session, when string) {
	t.Helper()
	behind := func(err error) {
		t.Helper()
		requireCode(t, err, pigeon.CodeStoreUnavailable)
		require.ErrorContains(t, err, "access directory may be behind")
	}
	_, err := revoked.Publish(ctx, roomMsg(when))
	behind(err)
	_, err = other.Publish(ctx, chatMsg("lobby", when))
	behind(err)
	_, err = e.Connect(ctx, "bob-token", []string{"chat.messages"})
	behind(err)
}

// requireLogged polls until log holds text: a node sets its state before
// it writes the line that tells of it.
func requireLogged(t *testing.T, log *testlog.Buffer, text string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(log.String(), text) }, 10*time.Second, 10*time.Millisecond, "%s", log.String())
}

// requireServesAgain polls until other's node lets it publish again;
// why says what is waited for.
func requireServesAgain(ctx context.Context, t *testing.T, other pigeon.Session, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := other.Publish(ctx, chatMsg("lobby", "after"))
		return err == nil
	}, 60*time.Second, 20*time.Millisecond, why)
}

// TestClusterNodeCutOffStopsAuthorizing: node b is cut off from the
// others (NATS unreachable from it; a link that stalls without an error;
// its watch stalled while its connection works), and node a revokes a
// grant. a's barrier waits for b until b's record is older than
// Options.Liveness, then passes it over and reports the revocation done.
// Before, b never heard of it and went on authorizing on its old
// directory for as long as the cut lasted: the revoked grant's contract,
// every other contract, and new negotiations. Now b's engine stops
// authorizing once its Cluster no longer vouches for it (CurrentUntil:
// two thirds of Liveness after its last confirmation), which is before a
// stops waiting: by the time the revocation returns, b refuses every
// authorization STORE_UNAVAILABLE and its running subscription pauses.
// Once back in touch, b's watch starts again, catches up, and b serves
// again with the grant revoked.
func TestClusterNodeCutOffStopsAuthorizing(t *testing.T) {
	type cut struct {
		link, watch bool // b reaches NATS through the link; b's watch may stall
		cut         func(*linkProxy, *stallingWatch)
		heal        func(*linkProxy, *stallingWatch)
	}
	for _, tc := range []struct {
		name string
		cut
	}{
		{"NATS unreachable", cut{link: true,
			cut:  func(l *linkProxy, _ *stallingWatch) { l.drop() },
			heal: func(l *linkProxy, _ *stallingWatch) { l.heal() }}},
		{"its link stalled", cut{link: true,
			cut:  func(l *linkProxy, _ *stallingWatch) { l.stall() },
			heal: func(l *linkProxy, _ *stallingWatch) { l.heal() }}},
		{"its watch stalled", cut{watch: true,
			cut:  func(_ *linkProxy, w *stallingWatch) { w.stall() },
			heal: func(_ *linkProxy, w *stallingWatch) { w.resume() }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			prefix := freshPrefix()
			link := startLinkProxy(t, srv.Addr().String())
			var watch *stallingWatch
			var bLog testlog.Buffer
			a := clusterEngine(ctx, t, connect(t, srv.ClientURL()), &Options{Prefix: prefix, Node: "a", Memory: true}, nil).e
			url := srv.ClientURL()
			if tc.link {
				url = link.url()
			}
			b := clusterEngine(ctx, t, connect(t, url), &Options{Prefix: prefix, Node: "b", Memory: true}, func(o *pigeon.Options) {
				o.Logger = bLog.Logger()
				if tc.link {
					o.Store = auditApart{Store: o.Store, audit: memory.New(nil)}
				}
				if tc.watch {
					watch = &stallingWatch{Cluster: o.Cluster.(*Cluster)}
					o.Cluster = watch
				}
			}).e
			t.Cleanup(func() { // before either engine shuts down
				link.heal()
				if watch != nil {
					watch.resume()
				}
			})

			g := memberGrant(ctx, t, a)
			revoked, other := grantSessions(ctx, t, b, g)
			sub, err := other.Subscribe(ctx, "chat.messages", func(context.Context, *pigeon.Delivery) error { return nil })
			require.NoError(t, err)
			defer func() { _ = sub.Unsubscribe(ctx) }()
			_, err = revoked.Publish(ctx, roomMsg("before"))
			require.NoError(t, err)

			tc.cut.cut(link, watch)
			// a waits for b until b's record is older than Liveness, then
			// passes it over: the revocation is reported done.
			require.NoError(t, a.RevokeGrant(ctx, g.JTI))

			// From then on b authorizes nothing: it may not have heard.
			requireAuthorizesNothing(ctx, t, b, revoked, other, "while cut off")
			require.Never(t, func() bool {
				select {
				case <-sub.Done():
					return true
				default:
					return false
				}
			}, 200*time.Millisecond, 10*time.Millisecond, "the running subscription on b pauses rather than stop")
			requireLogged(t, &bLog, "can no longer be sure it has heard every change")

			// Back in touch, b catches up and serves again, the grant
			// revoked.
			tc.cut.heal(link, watch)
			requireServesAgain(ctx, t, other, "b serves again once back in touch")
			require.NoError(t, sub.Err())
			_, err = revoked.Publish(ctx, roomMsg("after"))
			requireCode(t, err, pigeon.CodeGrantRevoked)
			requireLogged(t, &bLog, "has caught up with the other nodes")
		})
	}
}
