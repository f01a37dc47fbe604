package natsbridge

import (
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"pigeon"
)

// Direction says which way a route carries messages.
type Direction string

// Directions of a route.
const (
	// Out carries a Pigeon subject to NATS: a subscription under the
	// bridge's contract, each delivery published to NATS.
	Out Direction = "out"
	// In carries NATS to a Pigeon subject: each NATS message published
	// through the bridge's session, past every gate.
	In Direction = "in"
)

// Payload says how an In route reads a NATS message's payload.
type Payload string

// Payload modes of an In route.
const (
	// PayloadAuto (the default) reads a JSON object with a "specversion"
	// member, or with both "type" and "data", as an envelope, and anything
	// else as data under the route's Template.
	PayloadAuto Payload = ""
	// PayloadEnvelope reads every payload as a Pigeon (CloudEvents JSON)
	// envelope; one that is not is refused ENVELOPE_INVALID.
	PayloadEnvelope Payload = "envelope"
	// PayloadData reads every payload as the message's data under the
	// route's Template, whatever it looks like.
	PayloadData Payload = "data"
)

// Template is the envelope an In route gives a payload that is plain data.
// The broker fills what it leaves empty as for any publish (classification
// "internal", the session's region, the time of acceptance) and always sets
// the source to the bridge's principal.
type Template struct {
	Type           string
	Intent         string
	Classification string
	Region         string
}

// Route is one governed edge between a Pigeon subject and a NATS subject.
type Route struct {
	// Name identifies the route in logs, Stats and the Pigeon-Bridge
	// header: 1 to 64 letters, digits, '-' or '_', unique in the bridge.
	Name      string
	Direction Direction
	// Subject is the Pigeon subject. For In it always wins over a subject
	// named in the payload.
	Subject string
	// NATSSubject is the NATS subject: where Out publishes (no
	// wildcards), what In subscribes to (wildcards allowed).
	NATSSubject string

	// JetStream makes an Out route publish and wait for the stream's
	// PubAck (and, on a pubsub subject, start after the last message the
	// stream holds from it when the bridge starts, with MaxInFlight 1:
	// docs/bridges.md, Position), and an In route consume from a durable
	// pull consumer.
	JetStream bool
	// Stream is the JetStream stream: for In the stream to consume from
	// (required); for Out, when set, the stream the PubAck must come from.
	Stream string
	// Durable is an In route's durable consumer on Stream (default: the
	// route's Name). The bridge creates it when it does not exist, with
	// NATSSubject as its filter; an existing one must filter on
	// NATSSubject alone and ack explicitly.
	Durable string

	// Out only: the subscription's options (pigeon.WithSelector,
	// WithFilter, WithGroup, WithMaxInFlight). Group defaults to
	// "natsbridge.<Name>", so that on a work-queue subject the bridge gets
	// its own copy rather than competing with the default group. Pigeon's
	// groups have no owner: any receiver of the subject that joins the
	// group by name takes messages the bridge then does not carry. A
	// Filter that reads principal (`principal.id != ""`) keys the group by
	// the bridge's principal, so that others who join it by name compete
	// in groups of their own; see docs/bridges.md, Groups.
	Selector    string
	Filter      string
	Group       string
	MaxInFlight int

	// In only: how the payload is read, and the envelope of plain data.
	Payload  Payload
	Template Template
}

// Options configure a Bridge. New copies them; the caller's value is never
// changed.
type Options struct {
	// Dialer opens the bridge's Pigeon sessions: transport/inproc in
	// process, transport/ws to a `pigeon serve`. Its ConnectOptions
	// (region, contract lifetime) apply.
	Dialer pigeon.Dialer
	// Credential is the bridge's own credential. The broker resolves the
	// bridge's identity from it; nothing in a NATS message ever names it.
	Credential string
	// NATS is the caller's connection, which the bridge uses and never
	// closes. When nil, the bridge connects to URL itself, with
	// ConnectOptions, and closes that connection when Run returns. Give a
	// connection of your own ConnectOptions too: with nats.go's default
	// reconnect buffer, a message published as the connection dropped is
	// kept and sent once it is back, after the broker was told the publish
	// failed (and redelivers it), possibly after the contract was revoked.
	// The bridge logs a warning at Run for a connection with that buffer.
	// With a core NATS Out route, Run wraps the connection's error handler
	// (nats.Conn.SetErrorHandler) to hear each permission violation the
	// server reports, calls the handler it found with every error, and
	// gives it back when it returns: set the connection's handler before
	// Run, not while it runs.
	NATS *nats.Conn
	URL  string
	// Routes are the edges; at least one.
	Routes []Route
	// PublishTimeout bounds how long an Out route waits for NATS to take
	// one message (the connection back, the flush or the PubAck), and an
	// In route for Pigeon to answer one publish (default 10 s).
	PublishTimeout time.Duration
	// MaxReconnectDelay caps the wait between two dials after the Pigeon
	// session failed (default 10 s); the wait starts at 100 ms, doubles,
	// and is jittered.
	MaxReconnectDelay time.Duration
	// MaxMessageBytes bounds the encoded Pigeon message an In route
	// publishes (default DefaultMaxMessageBytes): a larger one is refused
	// PAYLOAD_TOO_LARGE, as a gate refuses, before it is sent. The broker's
	// WebSocket server cuts a connection that sends a frame beyond its
	// MaxFrame (1 MiB by default), so one NATS message the NATS server
	// takes but the broker cannot read would otherwise end the session of
	// every route, at each of its redeliveries. Set it below the server's
	// MaxFrame when that is smaller than the default.
	MaxMessageBytes int
	// MaxHops bounds how deep a message an In route carries in may be
	// (default DefaultMaxHops). A pass through an In route counts as one
	// hop, as a program's emit does: a payload that is a Pigeon envelope
	// carrying hops h (what an Out route of this or another bridge
	// published) is published at h+1, and one carrying MaxHops or more is
	// refused HOPS_EXCEEDED (CodeHopsExceeded), so that a loop of bridges,
	// with or without programs on the way, ends. Data, and an envelope
	// without hops, count from 0: they are published at 1. The depth is
	// the message's Hops in process (transport/inproc), and over
	// WebSocket when the bridge's principal holds pigeon.RoleBridge;
	// without it the broker writes 0 and only the refusal holds (see the
	// package documentation, Loops). Negative: the routes
	// neither count nor refuse, and every message is at depth 0, as a
	// client's (no loop of bridges is then bounded).
	MaxHops int
	// Logger receives the bridge's events; never payload values. Default:
	// discard.
	Logger *slog.Logger
}

// Defaults of Options.
const (
	DefaultPublishTimeout    = 10 * time.Second
	DefaultMaxReconnectDelay = 10 * time.Second
	// DefaultMaxMessageBytes is the WebSocket server's default MaxFrame
	// (1 MiB) less room for the publish frame around the message.
	DefaultMaxMessageBytes = 1<<20 - 1024
	maxRouteName           = 64
	// DefaultMaxHops is the default of Options.MaxHops: the programs'
	// own (programs.DefaultMaxHops), so that a message is as deep after a
	// pass through a bridge as after one through a program.
	DefaultMaxHops = 8
)

// minReconnectDelay is the first wait of every backoff (backoff), and
// maxPullBackoff the longest between failed pulls of a JetStream In
// route; variables for tests.
var (
	minReconnectDelay = 100 * time.Millisecond
	maxPullBackoff    = 5 * time.Second
)

// withDefaults copies o, routes included, with the defaults applied.
func (o *Options) withDefaults() Options {
	c := *o
	c.Routes = slices.Clone(o.Routes)
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = DefaultPublishTimeout
	}
	if c.MaxReconnectDelay <= 0 {
		c.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxHops == 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Direction == In && r.JetStream && r.Durable == "" {
			r.Durable = r.Name
		}
		if r.Direction == Out && r.Group == "" {
			r.Group = "natsbridge." + r.Name
		}
	}
	return c
}

// invalid is the INVALID_ARGUMENT error of one option.
func invalid(format string, args ...any) error {
	return pigeon.NewError(pigeon.CodeInvalidArgument, format, args...)
}

// validate checks the options as New takes them (defaults applied).
func (o *Options) validate() error {
	switch {
	case o.Dialer == nil:
		return invalid("Options.Dialer is required")
	case o.Credential == "":
		return invalid("Options.Credential is required")
	case o.NATS == nil && o.URL == "":
		return invalid("Options.NATS or Options.URL is required")
	case o.NATS != nil && o.URL != "":
		return invalid("Options.NATS and Options.URL are exclusive")
	case len(o.Routes) == 0:
		return invalid("Options.Routes: at least one route is required")
	}
	names := map[string]bool{}
	durables := map[string]string{}
	jsIn := map[string][]*Route{} // the JetStream In routes of each stream
	for i := range o.Routes {
		r := &o.Routes[i]
		if err := r.validate(); err != nil {
			return err
		}
		if names[r.Name] {
			return invalid("route %q: Name is used by two routes", r.Name)
		}
		if r.Direction == Out && o.NATS != nil {
			// The connection's own reply inboxes: what the route published
			// there would answer the bridge's requests (a JetStream PubAck,
			// a read-back) with Pigeon messages.
			if p := o.NATS.Opts.InboxPrefix; p != "" && strings.HasPrefix(r.NATSSubject, p+".") {
				return invalid("route %q: NATSSubject %q is under the NATS connection's reply inbox prefix %q: Pigeon's publishers would answer the bridge's requests", r.Name, r.NATSSubject, p)
			}
		}
		names[r.Name] = true
		if r.Direction == In && r.JetStream {
			k := r.Stream + "/" + r.Durable
			if other, ok := durables[k]; ok {
				return invalid("route %q: Durable %q on stream %q is used by route %q too", r.Name, r.Durable, r.Stream, other)
			}
			durables[k] = r.Name
			// Two routes that both consume a message of the stream into
			// one subject would publish it there twice (under the ids of
			// their two durables): a mistake, not a design. Into two
			// subjects, each route publishes it once.
			for _, other := range jsIn[r.Stream] {
				if r.Subject == other.Subject && subjectsOverlap(r.NATSSubject, other.NATSSubject) {
					return invalid("route %q: NATSSubject %q and route %q's %q on stream %q can take the same message, which would reach subject %q twice",
						r.Name, r.NATSSubject, other.Name, other.NATSSubject, r.Stream, r.Subject)
				}
			}
			jsIn[r.Stream] = append(jsIn[r.Stream], r)
		}
	}
	return nil
}

// validate checks one route, naming it and the field at fault.
func (r *Route) validate() error {
	if !validName(r.Name) {
		return invalid("route %q: Name must be 1 to %d letters, digits, '-' or '_'", r.Name, maxRouteName)
	}
	if r.Direction != In && r.Direction != Out {
		return invalid("route %q: Direction must be %q or %q", r.Name, In, Out)
	}
	if r.Subject == "" || strings.ContainsAny(r.Subject, " \t\r\n*>") || !utf8.ValidString(r.Subject) {
		return invalid("route %q: Subject must be one Pigeon subject (no spaces or wildcards)", r.Name)
	}
	if !validNATSSubject(r.NATSSubject, r.Direction == In) {
		if r.Direction == Out {
			return invalid("route %q: NATSSubject must be a NATS subject without wildcards", r.Name)
		}
		return invalid("route %q: NATSSubject must be a NATS subject", r.Name)
	}
	if r.Direction == Out && natsControl(r.NATSSubject) {
		return invalid("route %q: NATSSubject %q is NATS's own (the JetStream API, its acks, the system account, reply inboxes): Pigeon's publishers would drive it", r.Name, r.NATSSubject)
	}
	if !r.JetStream && (r.Stream != "" || r.Durable != "") {
		return invalid("route %q: Stream and Durable need JetStream", r.Name)
	}
	if r.Stream != "" && !validNATSName(r.Stream) {
		return invalid("route %q: Stream must be a JetStream name (no spaces, '.', '*', '>', '/' or '\\')", r.Name)
	}
	switch r.Direction {
	case Out:
		return r.validateOut()
	default:
		return r.validateIn()
	}
}

func (r *Route) validateOut() error {
	switch {
	case r.Durable != "":
		return invalid("route %q: Durable is for In routes (an Out route publishes)", r.Name)
	case r.Payload != PayloadAuto:
		return invalid("route %q: Payload is for In routes", r.Name)
	case r.Template != Template{}:
		return invalid("route %q: Template is for In routes", r.Name)
	case r.MaxInFlight < 0 || r.MaxInFlight > pigeon.MaxInFlightLimit:
		return invalid("route %q: MaxInFlight must be 0 (one) to %d", r.Name, pigeon.MaxInFlightLimit)
	case len(r.Group) > pigeon.MaxGroupName || strings.ContainsFunc(r.Group, func(c rune) bool { return c == '|' || pigeon.IsControlRune(c) }) ||
		strings.HasPrefix(r.Group, "cursor:") || !utf8.ValidString(r.Group):
		return invalid("route %q: Group must be at most %d bytes of UTF-8 without '|' or control or formatting characters, not starting with \"cursor:\"", r.Name, pigeon.MaxGroupName)
	}
	if r.Selector != "" {
		if _, err := pigeon.ParseSelector(r.Selector); err != nil {
			return invalid("route %q: Selector: %s", r.Name, pigeon.ErrorCode(err))
		}
	}
	return nil
}

func (r *Route) validateIn() error {
	switch {
	case r.Selector != "" || r.Filter != "" || r.Group != "" || r.MaxInFlight != 0:
		return invalid("route %q: Selector, Filter, Group and MaxInFlight are for Out routes", r.Name)
	case r.JetStream && r.Stream == "":
		return invalid("route %q: Stream is required for a JetStream In route", r.Name)
	case r.JetStream && !validNATSName(r.Durable):
		return invalid("route %q: Durable must be a JetStream consumer name (no spaces, '.', '*', '>', '/' or '\\')", r.Name)
	case r.Payload != PayloadAuto && r.Payload != PayloadEnvelope && r.Payload != PayloadData:
		return invalid("route %q: Payload must be empty (auto), %q or %q", r.Name, PayloadEnvelope, PayloadData)
	}
	return nil
}

// validName: a route name is safe in a header, a consumer name and a group.
func validName(s string) bool {
	if s == "" || len(s) > maxRouteName {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// natsControl reports whether an Out route publishing on s would send
// requests to NATS itself rather than messages: a subject beginning with
// '$' (the JetStream API and its acks, the system account, cluster
// traffic) but for the data subjects of key-value buckets and object
// stores ($KV., $O.), or a reply inbox. Each Pigeon message the route
// carries would be such a request, made with the bridge's credentials: a
// route to $JS.API.STREAM.PURGE.X purges the stream on every message.
func natsControl(s string) bool {
	if strings.HasPrefix(s, "$") {
		return !strings.HasPrefix(s, "$KV.") && !strings.HasPrefix(s, "$O.")
	}
	return strings.HasPrefix(s, nats.InboxPrefix)
}

// validNATSSubject reports whether s is a NATS subject: dot-separated
// non-empty tokens without whitespace; with wild, "*" tokens and a last
// ">" token are allowed.
func validNATSSubject(s string, wild bool) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "" || strings.ContainsAny(t, " \t\r\n\f\v"):
			return false
		case t == "*" || t == ">" && i == len(toks)-1:
			if !wild {
				return false
			}
		case strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

// validNATSName reports whether s may name a stream or a consumer.
func validNATSName(s string) bool {
	return s != "" && len(s) <= 255 && utf8.ValidString(s) && !strings.ContainsAny(s, " \t\r\n.*>/\\")
}

// subjectsOverlap reports whether some NATS subject matches both a and b,
// valid subjects with wildcards ("*" one token, a last ">" one or more).
func subjectsOverlap(a, b string) bool {
	at, bt := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(at) || i == len(bt):
			return len(at) == len(bt)
		case at[i] == ">" || bt[i] == ">":
			return true // the other has a token here, and may have more
		case at[i] != bt[i] && at[i] != "*" && bt[i] != "*":
			return false
		}
	}
}

// subjectMatches reports whether the NATS subject s (no wildcards) matches
// pattern.
func subjectMatches(pattern, s string) bool {
	for pattern != "" && s != "" {
		p, prest, _ := strings.Cut(pattern, ".")
		t, srest, _ := strings.Cut(s, ".")
		switch {
		case p == ">":
			return true
		case p != "*" && p != t:
			return false
		}
		pattern, s = prest, srest
		if (pattern == "") != (s == "") {
			return false
		}
	}
	return pattern == s
}

// ConnectOptions are the options the bridge connects to NATS with, for a
// connection of its own (Options.URL) or one a caller opens for it
// (Options.NATS), before the caller's own (credentials, TLS): a name,
// reconnecting forever, and no reconnect buffer. nats.go keeps what is
// published while it reconnects and sends it once the connection is back;
// for the bridge that publish had already failed, the broker would
// deliver the message again, and what was kept would leave whether or not
// the contract still allowed it by then. Without the buffer such a
// publish fails at once (nats.ErrReconnectBufExceeded), and the broker
// redelivers once NATS is back.
func ConnectOptions() []nats.Option {
	return []nats.Option{nats.Name("pigeon-bridge"), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1)}
}
