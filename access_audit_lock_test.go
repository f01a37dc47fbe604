package pigeon_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
	"pigeon/store/memory"
)

// heldAudit is a store whose next audit write, once armed, waits until
// released: a slow disk.
type heldAudit struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *heldAudit) AppendAudit(ctx context.Context, recs ...store.AuditRecord) error {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return s.Store.AppendAudit(ctx, recs...)
}

// TestAccountChangeDoesNotHoldTheDirectoryThroughItsWrite: a change of an
// account or role queues its audit record under the directory's lock, so
// that two changes are recorded in their order, but waits for the
// record's durable write after letting the lock go. Held through the
// write, every authentication, which reads the directory, waited for the
// disk while an operator changed a role.
func TestAccountChangeDoesNotHoldTheDirectoryThroughItsWrite(t *testing.T) {
	const id = "spiffe://merchant-prod/ns/shop/sa/held"
	changes := map[string]func(e *pigeon.Engine) error{
		"create account": func(e *pigeon.Engine) error {
			_, err := e.CreateAccount(ctx, pigeon.Account{ID: id + "-new"})
			return err
		},
		"add role": func(e *pigeon.Engine) error {
			_, err := e.AddAccountRole(ctx, id, "extra")
			return err
		},
		"remove role": func(e *pigeon.Engine) error {
			_, err := e.RemoveAccountRole(ctx, id, "base")
			return err
		},
		"publish keys": func(e *pigeon.Engine) error {
			_, err := e.PutAccountKeys(ctx, id, nil)
			return err
		},
		"define role": func(e *pigeon.Engine) error {
			_, err := e.PutRole(ctx, pigeon.Role{Name: "other", Permissions: []pigeon.Permission{}})
			return err
		},
		"delete account": func(e *pigeon.Engine) error { return e.DeleteAccount(ctx, id) },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			st := &heldAudit{Store: memory.New(nil), entered: make(chan struct{}), release: make(chan struct{})}
			var released sync.Once
			release := func() { released.Do(func() { close(st.release) }) }
			f := newFixture(t, func(o *pigeon.Options) { o.Store = st })
			t.Cleanup(release) // before the engine's shutdown, registered first
			_, err := f.e.CreateAccount(ctx, pigeon.Account{ID: id, Roles: []string{"base"}})
			require.NoError(t, err)

			st.armed.Store(true)
			done := make(chan error, 1)
			go func() { done <- change(f.e) }()
			select {
			case <-st.entered: // the change's record is being written
			case err := <-done:
				t.Fatalf("the change returned (%v) without writing its record", err)
			}
			authed := make(chan error, 1)
			go func() {
				_, err := f.e.Authenticate(context.Background(), demo.Tokens()[0].Token)
				if err == nil {
					if _, kerr := f.e.AccountKeys(context.Background(), id); pigeon.ErrorCode(kerr) != pigeon.CodeNotFound {
						err = kerr // deleted: NOT_FOUND
					}
				}
				authed <- err
			}()
			select {
			case err := <-authed:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("an authentication or a key lookup waited for the change's audit write")
			}
			release()
			require.NoError(t, <-done)
		})
	}
}
