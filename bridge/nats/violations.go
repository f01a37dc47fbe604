package natsbridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// violations records, per subject, the publish permission violations a
// NATS connection reports, so that a core NATS Out route can tell whether
// the server dropped its publish. The server does not refuse such a
// publish: it drops it and reports the violation asynchronously, ahead of
// the answer to the route's flush. nats.go keeps only the last error
// (Conn.LastError), which a violation of another route arriving in the
// same window overwrites; the connection's error handler hears each one.
//
// It wraps the connection's error handler, which it calls too, and gives
// it back with restore.
type violations struct {
	nc   *nats.Conn
	prev nats.ErrHandler
	keys map[string]bool // the quoted subjects of the core Out routes

	mu      sync.Mutex
	heard   uint64            // errors the handler heard so far
	last    error             // the last of them
	changed chan struct{}     // closed, and replaced, at each error heard
	denied  map[string]uint64 // quoted subject -> heard at its last violation
}

// watchViolations installs the recorder on nc for the NATS subjects of
// the core Out routes among routes; nil when there are none.
func watchViolations(nc *nats.Conn, routes []Route) *violations {
	keys := map[string]bool{}
	for _, r := range routes {
		if r.Direction == Out && !r.JetStream {
			keys[strconv.Quote(r.NATSSubject)] = true
		}
	}
	if len(keys) == 0 {
		return nil
	}
	v := &violations{nc: nc, prev: nc.ErrorHandler(), keys: keys, changed: make(chan struct{}), denied: map[string]uint64{}}
	nc.SetErrorHandler(v.handle)
	return v
}

// restore gives the connection back the error handler it had.
func (v *violations) restore() {
	if v != nil {
		v.nc.SetErrorHandler(v.prev)
	}
}

// handle is the connection's error handler.
func (v *violations) handle(nc *nats.Conn, sub *nats.Subscription, err error) {
	v.mu.Lock()
	v.heard++
	v.last = err
	if key, ok := deniedSubject(err); ok && v.keys[key] {
		v.denied[key] = v.heard
	}
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
	if v.prev != nil {
		v.prev(nc, sub, err)
	}
}

// deniedSubject returns the subject, quoted as the server quotes it, of a
// publish permission violation.
func deniedSubject(err error) (string, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	const marker = "for publish to "
	s := err.Error()
	i := strings.LastIndex(strings.ToLower(s), marker)
	if i < 0 {
		return "", false
	}
	return strings.TrimSpace(s[i+len(marker):]), true
}

// mark is where a publish's check starts: take it before reading the
// connection's last error, before the publish.
func (v *violations) mark() uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.heard
}

// check returns an error when the server reported a violation for a
// publish on subject since mark, before which the connection's last error
// was before. nats.go sets the last error as it reads the report, ahead of
// the flush's answer, but calls the handler later, on a goroutine of its
// own: when the last error changed since before, check waits (within ctx)
// until the handler heard it, and with it every report before it. When it
// cannot tell, the publish fails, and the broker delivers it again.
func (v *violations) check(ctx context.Context, mark uint64, before error, subject string) error {
	key := strconv.Quote(subject)
	for {
		cur := v.nc.LastError()
		v.mu.Lock()
		if cur == before || v.last == cur {
			at := v.denied[key]
			v.mu.Unlock()
			if at > mark {
				return fmt.Errorf("the NATS server refused the publish: %w: publish to %s", nats.ErrPermissionViolation, key)
			}
			return nil
		}
		changed := v.changed
		v.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("cannot tell whether the NATS server took the publish (%v): %w", cur, ctx.Err())
		}
	}
}
