package ws

import (
	"log/slog"
	"time"

	"pigeon/internal/readpool"
)

// Defaults of Options.
const (
	DefaultMaxFrame          = 1 << 20
	DefaultWriteQueue        = 256
	DefaultWriteQueueBytes   = 8 << 20
	DefaultServerQueueBytes  = 256 << 20
	DefaultStallTimeout      = 10 * time.Second
	DefaultPingInterval      = 30 * time.Second
	DefaultPingTimeout       = 15 * time.Second
	DefaultMaxConnections    = 10000
	DefaultMaxPerPrincipal   = 1000
	DefaultPublishRate       = 1000000
	DefaultMaxInFlight       = 256
	DefaultMaxRequestTimeout = 5 * time.Minute
	DefaultRequestTimeout    = 30 * time.Second
	// DefaultMaxRequestBytesPerPrincipal is Options.MaxRequestBytesPerPrincipal's default.
	DefaultMaxRequestBytesPerPrincipal = 64 << 20
)

// readWait bounds how long a replay or receive frame waits for room in
// the server's read pool before it is refused. A variable so that tests
// need not wait that long; read when a Server is made.
var readWait = readpool.DefaultWait

// Options configure a Server. A nil *Options means the defaults; NewServer
// copies the value and never changes the caller's.
type Options struct {
	// Region is a connection's region when the upgrade request names none
	// (header x-pigeon-region or query ?region=). Empty means the engine's.
	Region string
	// MaxFrame is the largest frame a client may send, in bytes (default
	// 1 MiB). A larger frame closes the connection with status 1009.
	MaxFrame int64
	// WriteQueue bounds the frames waiting to be written to one connection
	// (default 256).
	WriteQueue int
	// WriteQueueBytes bounds the bytes of the frames waiting to be written
	// to one connection (default 8 MiB), and ServerQueueBytes those of all
	// connections together (default 256 MiB). A frame waits for room
	// before it is encoded; a subscription whose client reads slowly holds
	// no message data meanwhile, and falls behind to catch up from the
	// store. One frame is let through however large when nothing else
	// waits to be written.
	WriteQueueBytes  int64
	ServerQueueBytes int64
	// StallTimeout is how long a connection's write queue may stay full
	// before the server closes it with status 1008 (default 10 s).
	StallTimeout time.Duration
	// PingInterval is how often the server pings an idle client (default
	// 30 s; negative disables); PingTimeout is how long it waits for the
	// pong before closing with 1008 (default 15 s).
	PingInterval time.Duration
	PingTimeout  time.Duration
	// MaxConnections caps open connections (default 10000); an upgrade
	// beyond it is refused with 429 RATE_LIMITED, audited access.denied
	// ("ws upgrade connection limit").
	MaxConnections int
	// MaxConnectionsPerPrincipal caps the open connections of one
	// principal (default 1000, a tenth of MaxConnections; negative: no
	// cap), so that one client cannot take every connection and lock the
	// others out; an upgrade beyond it is refused with 429 RATE_LIMITED,
	// audited access.denied ("ws upgrade connections per principal").
	MaxConnectionsPerPrincipal int
	// PublishRate is how many messages per second one connection may
	// publish (default 1000000, negative: unlimited), with bursts of
	// PublishBurst (default PublishRate/10, at least 1): a publish or
	// request frame counts one, a publish_batch frame one per message.
	// Beyond it a frame is answered RATE_LIMITED, and the messages of a
	// batch past it are refused RATE_LIMITED in their slots, audited
	// publish.denied ("ws publish connection rate"). The default is above
	// what one connection reaches through every gate on common hardware
	// (about 100k a second on two cores), so that a client on defaults is
	// never slowed by it, while it still bounds a runaway connection; the
	// subjects' own rate limits (per principal, in the policy) are what
	// governs who may publish how much.
	PublishRate  float64
	PublishBurst int
	// MaxInFlight bounds the frames of one connection being worked on at
	// once (default 256); the server stops reading the connection while it
	// is full. Requests waiting for a reply count against it separately:
	// beyond MaxInFlight of them a request is answered RATE_LIMITED,
	// audited publish.denied ("ws request in flight").
	MaxInFlight int
	// MaxReadBytesInFlight bounds the memory that replay and receive
	// frames hold at once across the server's connections, from the store
	// read until their answer is queued for writing, where ServerQueueBytes
	// bounds it (default 256 MiB; negative: no bound). Each reserves twice
	// the engine's MaxReadBytes before it reads and keeps its answer's
	// size. Without it, one connection could have MaxInFlight replays of
	// up to MaxReadBytes each read and encoded, waiting for a writer that
	// does not drain. A frame that finds no room waits up to two seconds
	// and is then answered RATE_LIMITED before anything is read, audited
	// replay.denied or receive.denied ("ws replay read budget", "ws
	// receive read budget").
	MaxReadBytesInFlight int64
	// MaxReadBytesPerPrincipal bounds the part of MaxReadBytesInFlight
	// the replay and receive frames of one principal, over all its
	// connections, hold at once (default a quarter of it; negative: no
	// share, the whole pool), never less than one frame's reservation, so
	// that a single read still runs. A frame that would take its principal
	// past it waits aside, taking no place in the line, until that
	// principal's own reads give room back, and is then answered
	// RATE_LIMITED, audited as a refusal of MaxReadBytesInFlight is: one
	// client reading slowly cannot take the whole pool and lock the
	// others' reads out.
	MaxReadBytesPerPrincipal int64
	// MaxRequestBytesPerPrincipal bounds the memory that the requests of
	// one principal waiting for their replies hold, over all its
	// connections (default 64 MiB; negative: no bound): each holds its
	// message, the data and about 4 KiB besides, until its reply comes or
	// its timeout (up to MaxRequestTimeout) passes. A request beyond it is
	// answered RATE_LIMITED before it is published, audited publish.denied
	// ("ws request bytes"; a refusal of Server.HoldRequest is its
	// caller's to audit); a principal with no request waiting may always
	// send one. MaxInFlight bounds the requests
	// of one connection; without this bound, a principal could have
	// MaxConnectionsPerPrincipal times as many requests of up to MaxFrame
	// each pinned for minutes (a quarter of a terabyte on defaults).
	MaxRequestBytesPerPrincipal int64
	// MaxRequestTimeout caps a request's timeoutMs (default 5 min); a
	// request without one waits DefaultRequestTimeout.
	MaxRequestTimeout time.Duration
	// OriginPatterns lists the origins (host patterns, see
	// websocket.AcceptOptions) browsers may connect from besides the
	// server's own host.
	OriginPatterns []string
	// Logger receives connection events; never payload values. Default:
	// discard.
	Logger *slog.Logger

	// readHook, nil but in tests (export_test.go), is called with a frame
	// at two points of the read loop's inline work: as the loop settles a
	// push delivery with it, and once the loop has counted it as an op,
	// before a worker takes it. A test's hook panics there, the one way
	// to reach the loop's own recovery: no store, gate or observer the
	// loop calls can panic there without leaving the engine's own state
	// half done.
	readHook func(*Frame)
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
		c.OriginPatterns = append([]string(nil), o.OriginPatterns...)
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	if c.WriteQueue <= 0 {
		c.WriteQueue = DefaultWriteQueue
	}
	if c.WriteQueueBytes <= 0 {
		c.WriteQueueBytes = DefaultWriteQueueBytes
	}
	if c.ServerQueueBytes <= 0 {
		c.ServerQueueBytes = DefaultServerQueueBytes
	}
	if c.StallTimeout <= 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = DefaultPingTimeout
	}
	if c.MaxConnections <= 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.MaxConnectionsPerPrincipal == 0 {
		c.MaxConnectionsPerPrincipal = DefaultMaxPerPrincipal
	}
	if c.PublishRate == 0 {
		c.PublishRate = DefaultPublishRate
	}
	if c.PublishBurst <= 0 {
		c.PublishBurst = max(1, int(c.PublishRate/10))
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxReadBytesInFlight == 0 {
		c.MaxReadBytesInFlight = readpool.DefaultLimit
	}
	if c.MaxRequestBytesPerPrincipal == 0 {
		c.MaxRequestBytesPerPrincipal = DefaultMaxRequestBytesPerPrincipal
	}
	if c.MaxRequestTimeout <= 0 {
		c.MaxRequestTimeout = DefaultMaxRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// bucket is a token bucket; it is used by one goroutine only.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(rate float64, burst int) bucket {
	return bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take reports whether one token was available at now.
func (b *bucket) take(now time.Time) bool { return b.takeUpTo(now, 1) == 1 }

// takeUpTo takes up to n tokens at now and returns how many it took.
func (b *bucket) takeUpTo(now time.Time, n int) int {
	if b.rate < 0 {
		return n
	}
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	k := min(n, int(b.tokens))
	b.tokens -= float64(k)
	return k
}
