package programs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
)

// emitModule is a module whose handler calls the host function fn
// ("publish" or "reply") with msg, the same message for each delivery,
// and returns what it returned: 0 acknowledges, a refusal fails the
// delivery.
func emitModule(fn, msg string) []byte {
	const at, errBuf = 16, 512
	m := abiModule(cat(i32c(at), i32c(int64(len(msg))), i32c(errBuf), i32c(64), []byte{opCall, 0}), 1)
	m.imports = []wimport{{module: "pigeon", name: fn, params: []byte{tI32, tI32, tI32, tI32}, results: []byte{tI32}}}
	m.data = []wdata{{offset: at, bytes: []byte(msg)}}
	return m.encode()
}

// vipFixture is the test fixture with orders.vip, a pubsub subject that
// only the role "vip" may publish to (the client receives it), and
// progAcc holding that role.
func vipFixture(t *testing.T) (*fixture, <-chan *pigeon.Message) {
	f := newFixtureWith(t, nil, func(o *pigeon.Options) {
		vip := pigeon.SubjectPolicy{Name: "orders.vip", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
			Policy: map[pigeon.Operation][]pigeon.RuleSpec{
				pigeon.OpPublish: {{Effect: pigeon.EffectAllow, Roles: []string{"vip"}}},
				pigeon.OpReceive: allow(client), pigeon.OpAck: allow(client),
			}}
		o.Catalog.Subjects = append(o.Catalog.Subjects, vip)
	})
	ctx := context.Background()
	_, err := f.e.AddAccountRole(ctx, progAcc, "vip")
	require.NoError(t, err)
	cli, err := f.e.Connect(ctx, "client-token", []string{"orders.vip"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close(context.Background()) })
	ch := make(chan *pigeon.Message, 64)
	_, err = cli.Subscribe(ctx, "orders.vip", func(_ context.Context, d *pigeon.Delivery) error {
		ch <- d.Message
		return nil
	})
	require.NoError(t, err)
	return f, ch
}

const vipMessage = `{"type":"order","subject":"orders.vip","intent":"record","classification":"internal","data":{"from":"program"}}`

// A program publishes with the roles its account holds at the moment it
// publishes: once the role that let it publish to a subject is taken from
// its account, or the account is deleted, what it publishes there is
// refused (audited under its principal), as a networked client's would
// be, rather than going on under the roles the account had when the
// program was bound (which the contract would otherwise take for roles
// its credential carries, and keep renewing).
func TestProgramLosesTheRolesItsAccountLoses(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(context.Context, *pigeon.Engine) error
	}{
		{"role removed", func(ctx context.Context, e *pigeon.Engine) error {
			_, err := e.RemoveAccountRole(ctx, progAcc, "vip")
			return err
		}},
		{"account deleted", func(ctx context.Context, e *pigeon.Engine) error { return e.DeleteAccount(ctx, progAcc) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, vip := vipFixture(t)
			ctx := context.Background()
			in, err := f.mg.Deploy(ctx, admin, "vip", manifest(func(m *programs.Manifest) { m.Publishes = []string{"orders.vip"} }), emitModule("publish", vipMessage))
			require.NoError(t, err)
			f.publish(t, "orders.in", `{"n":1}`)
			m := next(t, vip)
			require.Equal(t, progAcc, m.Source)

			require.NoError(t, tc.take(ctx, f.e))
			f.publish(t, "orders.in", `{"n":2}`)
			// Either the program's message gets through (the hole) or the
			// program's old contract is given up: its delivery refused and
			// quarantined, or its binding cannot be renewed.
			ended := func() bool {
				if len(f.quarantined(t, pigeon.CodeDeliveryExhausted)) > 0 {
					return true
				}
				for _, r := range f.audited(t, pigeon.EventProgramFailed) {
					if r.ContractID == in.ContractID && r.MessageID == "" {
						return true // binding again failed: the old contract ended
					}
				}
				return false
			}
			deadline := time.After(30 * time.Second)
			for !ended() {
				select {
				case m := <-vip:
					require.Failf(t, "published without the role", "the program published %s to orders.vip after its account lost the role", m.ID)
				case <-deadline:
					t.Fatal("the program's contract was never given up")
				case <-time.After(5 * time.Millisecond):
				}
			}
			select {
			case m := <-vip:
				require.Failf(t, "published without the role", "the program published %s to orders.vip after its account lost the role", m.ID)
			default:
			}
		})
	}
}

// A swap that binds a new contract (another subject, or a handover on
// the same pubsub subject) revokes the old one, as a removal does: it is
// no longer held by anything, and would otherwise stay live, usable and
// counted among the account's contracts until it expires.
func TestSwapRevokesTheOldContract(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	usable := func(id string) error {
		_, err := f.e.Publish(ctx, pigeon.Caller{Principal: &pigeon.Principal{ID: progAcc}, ContractID: id},
			&pigeon.Message{Type: "order", Subject: "orders.out", Intent: "record", Data: []byte(`{}`)})
		return err
	}
	v1, err := f.mg.Deploy(ctx, admin, "p", manifest(), modOK)
	require.NoError(t, err)
	require.NoError(t, usable(v1.ContractID))
	onEvents := func(m *programs.Manifest) { m.Route.Subject = "events" }
	v2, err := f.mg.Deploy(ctx, admin, "p", manifest(onEvents), modOK) // another subject
	require.NoError(t, err)
	require.NotEqual(t, v1.ContractID, v2.ContractID)
	requireCode(t, usable(v1.ContractID), pigeon.CodeContractRevoked)
	require.NoError(t, usable(v2.ContractID))
	v3, err := f.mg.Deploy(ctx, admin, "p", manifest(onEvents, func(m *programs.Manifest) { m.Route.Selector = "/n=1" }), modOK) // a handover
	require.NoError(t, err)
	require.NotEqual(t, v2.ContractID, v3.ContractID)
	requireCode(t, usable(v2.ContractID), pigeon.CodeContractRevoked)
	v4, err := f.mg.Deploy(ctx, admin, "p", manifest(onEvents, func(m *programs.Manifest) { m.Route.Selector = "/n=1" }), modFail) // in place
	require.NoError(t, err)
	require.Equal(t, v3.ContractID, v4.ContractID)
	require.NoError(t, usable(v4.ContractID))
	require.NoError(t, f.mg.Remove(ctx, admin, "p"))
	requireCode(t, usable(v4.ContractID), pigeon.CodeContractRevoked)
}

func requireCode(t *testing.T, err error, code pigeon.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, pigeon.ErrorCode(err), "%v", err)
}

// A program's principal is its account: once the account is deleted, the
// program publishes nothing more, even where a catalog rule names the
// account's id (which the engine does not tie to the account), and its
// binding ends; binding it again fails, audited, until the account
// exists again.
func TestProgramStopsWhenItsAccountIsDeleted(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	out := f.collect(t, "orders.out")
	in, err := f.mg.Deploy(ctx, admin, "p", manifest(), emitModule("publish",
		`{"type":"order","subject":"orders.out","intent":"record","data":{"from":"program"}}`))
	require.NoError(t, err)
	f.publish(t, "orders.in", `{"n":1}`)
	require.Equal(t, progAcc, next(t, out).Source)

	require.NoError(t, f.e.DeleteAccount(ctx, progAcc))
	f.publish(t, "orders.in", `{"n":2}`)
	ended := func() bool {
		for _, r := range f.audited(t, pigeon.EventPublishDenied) {
			if r.Principal == progAcc && r.Code == string(pigeon.CodeContractRevoked) {
				return true
			}
		}
		return false
	}
	deadline := time.After(30 * time.Second)
	for !ended() {
		select {
		case m := <-out:
			require.Failf(t, "published as a deleted account", "message %s", m.ID)
		case <-deadline:
			t.Fatal("the program's message was never refused")
		case <-time.After(5 * time.Millisecond):
		}
	}
	eventually(t, func() bool {
		for _, r := range f.audited(t, pigeon.EventProgramFailed) {
			if r.ContractID == in.ContractID && r.MessageID == "" && r.Code == string(pigeon.CodeNotFound) {
				return true
			}
		}
		return false
	}, "binding again fails while the account is gone")
	now, err := f.mg.Get(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, in.ContractID, now.ContractID, "not bound under another contract")
	select {
	case m := <-out:
		require.Failf(t, "published as a deleted account", "message %s", m.ID)
	default:
	}

	// The account back, the program is bound again and handles the route.
	_, err = f.e.CreateAccount(ctx, pigeon.Account{ID: progAcc})
	require.NoError(t, err)
	require.Equal(t, progAcc, next(t, out).Source)
}
