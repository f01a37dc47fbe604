package natsbridge

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/inproc"
)

func TestOptionsValidation(t *testing.T) {
	out := Route{Name: "o", Direction: Out, Subject: "orders.events", NATSSubject: "orders.out"}
	in := Route{Name: "i", Direction: In, Subject: "orders.events", NATSSubject: "orders.in.>"}
	with := func(r Route, fn func(*Route)) Route { fn(&r); return r }
	base := func(routes ...Route) Options {
		return Options{Dialer: inproc.Dialer{}, Credential: "c", URL: "nats://127.0.0.1:1", Routes: routes}
	}
	tests := []struct {
		name string
		opts Options
		want string // "" when valid; else a part of the message
	}{
		{"valid", base(out, in, with(in, func(r *Route) { r.Name, r.JetStream, r.Stream = "js", true, "S" })), ""},
		{"no dialer", Options{Credential: "c", URL: "u", Routes: []Route{out}}, "Options.Dialer"},
		{"no credential", Options{Dialer: inproc.Dialer{}, URL: "u", Routes: []Route{out}}, "Options.Credential"},
		{"no NATS", Options{Dialer: inproc.Dialer{}, Credential: "c", Routes: []Route{out}}, "Options.NATS or Options.URL"},
		{"both NATS and URL", func() Options { o := base(out); o.NATS = &nats.Conn{}; return o }(), "exclusive"},
		{"no routes", base(), "at least one route"},
		{"no name", base(with(out, func(r *Route) { r.Name = "" })), `route "": Name`},
		{"name with a dot", base(with(out, func(r *Route) { r.Name = "a.b" })), `route "a.b": Name`},
		{"two routes of one name", base(out, with(in, func(r *Route) { r.Name = "o" })), `route "o": Name is used by two routes`},
		{"no direction", base(with(out, func(r *Route) { r.Direction = "" })), `route "o": Direction`},
		{"no subject", base(with(out, func(r *Route) { r.Subject = "" })), `route "o": Subject`},
		{"wildcard subject", base(with(in, func(r *Route) { r.Subject = "orders.*" })), `route "i": Subject`},
		{"no NATS subject", base(with(out, func(r *Route) { r.NATSSubject = "" })), `route "o": NATSSubject`},
		{"out to a wildcard", base(with(out, func(r *Route) { r.NATSSubject = "a.*" })), `route "o": NATSSubject must be a NATS subject without wildcards`},
		{"out to the JetStream API", base(with(out, func(r *Route) { r.NATSSubject = "$JS.API.STREAM.PURGE.ORDERS" })), `route "o": NATSSubject "$JS.API.STREAM.PURGE.ORDERS" is NATS's own`},
		{"out to a JetStream ack", base(with(out, func(r *Route) { r.NATSSubject = "$JS.ACK.S.d.1.1.1.1.0" })), `route "o": NATSSubject`},
		{"out to the system account", base(with(out, func(r *Route) { r.NATSSubject = "$SYS.REQ.SERVER.PING" })), `route "o": NATSSubject`},
		{"out to a reply inbox", base(with(out, func(r *Route) { r.NATSSubject = "_INBOX.abc" })), `route "o": NATSSubject`},
		{"out to a key-value bucket", base(with(out, func(r *Route) { r.NATSSubject = "$KV.orders.latest" })), ""},
		{"empty NATS token", base(with(in, func(r *Route) { r.NATSSubject = "a..b" })), `route "i": NATSSubject`},
		{"> not last", base(with(in, func(r *Route) { r.NATSSubject = "a.>.b" })), `route "i": NATSSubject`},
		{"stream without JetStream", base(with(in, func(r *Route) { r.Stream = "S" })), `route "i": Stream and Durable need JetStream`},
		{"in JetStream without stream", base(with(in, func(r *Route) { r.JetStream = true })), `route "i": Stream is required`},
		{"bad stream name", base(with(in, func(r *Route) { r.JetStream, r.Stream = true, "a.b" })), `route "i": Stream`},
		{"bad durable", base(with(in, func(r *Route) { r.JetStream, r.Stream, r.Durable = true, "S", "a b" })), `route "i": Durable`},
		{"one durable for two routes", base(with(in, func(r *Route) { r.JetStream, r.Stream, r.Durable = true, "S", "d" }),
			with(in, func(r *Route) { r.Name, r.JetStream, r.Stream, r.Durable = "i2", true, "S", "d" })), `route "i2": Durable "d"`},
		{"durable on out", base(with(out, func(r *Route) { r.JetStream, r.Durable = true, "d" })), `route "o": Durable is for In`},
		{"template on out", base(with(out, func(r *Route) { r.Template.Type = "x" })), `route "o": Template is for In`},
		{"payload on out", base(with(out, func(r *Route) { r.Payload = PayloadData })), `route "o": Payload is for In`},
		{"bad payload", base(with(in, func(r *Route) { r.Payload = "xml" })), `route "i": Payload`},
		{"selector on in", base(with(in, func(r *Route) { r.Selector = "/a=b" })), `route "i": Selector, Filter, Group and MaxInFlight are for Out`},
		{"max in flight on in", base(with(in, func(r *Route) { r.MaxInFlight = 2 })), `route "i": Selector, Filter`},
		{"bad selector", base(with(out, func(r *Route) { r.Selector = "a=b" })), `route "o": Selector: SELECTOR_INVALID`},
		{"max in flight too high", base(with(out, func(r *Route) { r.MaxInFlight = pigeon.MaxInFlightLimit + 1 })), `route "o": MaxInFlight`},
		{"group with a bar", base(with(out, func(r *Route) { r.Group = "a|b" })), `route "o": Group`},
		{"cursor group", base(with(out, func(r *Route) { r.Group = "cursor:x" })), `route "o": Group`},
		{"group with CSI", base(with(out, func(r *Route) { r.Group = "a\u009b2J" })), `route "o": Group`},
		{"group with a right-to-left override", base(with(out, func(r *Route) { r.Group = "a\u202eb" })), `route "o": Group`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.opts)
			if tt.want == "" {
				require.NoError(t, err)
				require.NotNil(t, b)
				return
			}
			require.Error(t, err)
			require.Equal(t, pigeon.CodeInvalidArgument, code(t, err))
			require.ErrorIs(t, err, pigeon.ErrInvalid)
			require.Contains(t, err.Error(), tt.want)
		})
	}
}

// New copies the options: a later change to the caller's routes does not
// reach the bridge, and the defaults are not written back.
func TestNewCopiesOptions(t *testing.T) {
	routes := []Route{{Name: "o", Direction: Out, Subject: "orders.events", NATSSubject: "orders.out"},
		{Name: "i", Direction: In, Subject: "orders.events", NATSSubject: "orders.in", JetStream: true, Stream: "S"}}
	opts := Options{Dialer: inproc.Dialer{}, Credential: "c", URL: "nats://x", Routes: routes}
	b, err := New(opts)
	require.NoError(t, err)
	routes[0].Subject = "changed"
	require.Equal(t, "orders.events", b.opts.Routes[0].Subject)
	require.Empty(t, opts.Routes[0].Group, "the default is not written into the caller's route")
	require.Empty(t, opts.Routes[1].Durable)
	require.Equal(t, "natsbridge.o", b.opts.Routes[0].Group)
	require.Equal(t, "i", b.opts.Routes[1].Durable)
	require.Equal(t, DefaultPublishTimeout, b.opts.PublishTimeout)
}

// A NATS URL carries credentials before its host (nats://user:pass@host,
// nats://token@host): the error of a bridge that cannot connect names the
// URL without them, even when the URL does not parse.
func TestConnectErrorRedactsNATSCredentials(t *testing.T) {
	e := newEngine(t)
	for _, u := range []string{
		"nats://alice:s3cret-pw@127.0.0.1:1",
		"nats://s3cret-tok3n@127.0.0.1:1,nats://bob:s3cret-pw@127.0.0.1:2",
		"nats://alice:s3cret-pw@[::1",
		"alice:s3cret-pw@127.0.0.1:1",
	} {
		b, err := New(Options{Dialer: inproc.Dialer{Engine: e}, Credential: bridgeToken, URL: u, Routes: []Route{
			{Name: "orders-out", Direction: Out, Subject: ordersSubject, NATSSubject: "bridge.orders"},
		}})
		require.NoError(t, err)
		err = b.Run(t.Context())
		require.Error(t, err)
		require.Contains(t, err.Error(), "cannot connect to NATS")
		require.NotContains(t, err.Error(), "s3cret", u)
	}
}

// Two JetStream In routes that can take one message of a stream into one
// subject would publish it there twice (each under its own durable's id):
// New refuses such routes. Into two subjects, each publishes it once.
func TestInJetStreamOverlappingRoutesRefused(t *testing.T) {
	js := func(name, stream, subject string) Route {
		return Route{Name: name, Direction: In, Subject: "orders.events", NATSSubject: subject, JetStream: true, Stream: stream}
	}
	into := func(r Route, subject string) Route { r.Subject = subject; return r }
	for _, tt := range []struct {
		a, b Route
		ok   bool
	}{
		{js("all", "S", "legacy.>"), js("eu", "S", "legacy.eu"), false},
		{js("any", "S", "legacy.*.paid"), js("eu", "S", "legacy.eu.*"), false},
		{js("same", "S", "legacy.eu"), js("eu", "S", "legacy.eu"), false},
		{js("all", "S", "legacy.>"), js("root", "S", "legacy"), true},
		{js("eu", "S", "legacy.eu.*"), js("us", "S", "legacy.us.*"), true},
		{js("short", "S", "legacy.*"), js("long", "S", "legacy.*.*"), true},
		{js("s1", "S1", "legacy.>"), js("s2", "S2", "legacy.>"), true},
		{js("js", "S", "legacy.>"), Route{Name: "core", Direction: In, Subject: "orders.events", NATSSubject: "legacy.eu"}, true},
		{js("all", "S", "legacy.>"), into(js("eu", "S", "legacy.eu"), "audit.events"), true},
		{js("same", "S", "legacy.eu"), into(js("eu", "S", "legacy.eu"), "audit.events"), true},
	} {
		_, err := New(Options{Dialer: inproc.Dialer{}, Credential: "c", URL: "nats://127.0.0.1:1", Routes: []Route{tt.a, tt.b}})
		if tt.ok {
			require.NoError(t, err, "%s and %s", tt.a.NATSSubject, tt.b.NATSSubject)
			continue
		}
		require.Equal(t, pigeon.CodeInvalidArgument, code(t, err), "%s and %s", tt.a.NATSSubject, tt.b.NATSSubject)
		require.Contains(t, err.Error(), `route "`+tt.b.Name+`": NATSSubject`)
	}
}

func TestSubjectMatches(t *testing.T) {
	for _, tt := range []struct {
		pattern, subject string
		want             bool
	}{
		{"legacy.orders", "legacy.orders", true},
		{"legacy.orders", "legacy.payroll", false},
		{"legacy.>", "legacy.a.b", true},
		{"legacy.>", "legacy", false},
		{"legacy.*", "legacy.a", true},
		{"legacy.*", "legacy.a.b", false},
		{"legacy.*.paid", "legacy.eu.paid", true},
		{"legacy", "legacy.orders", false},
		{">", "a", true},
	} {
		require.Equal(t, tt.want, subjectMatches(tt.pattern, tt.subject), "%s %s", tt.pattern, tt.subject)
	}
}
