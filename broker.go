package pigeon

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"pigeon/internal/grant"
	"pigeon/store"
	"pigeon/store/memory"
)

// Broker is what an application connects to: it authenticates a
// credential, negotiates a contract and hands back a Session. *Engine is
// the in-process implementation; a networked client offers the same
// Session.
type Broker interface {
	// Connect authenticates credential, negotiates a contract for subjects
	// and returns a session running under it.
	Connect(ctx context.Context, credential string, subjects []string, opts ...ConnectOption) (Session, error)
	// Shutdown stops the broker; see Engine.Shutdown.
	Shutdown(ctx context.Context) error
}

// Contract lifetimes and limits when Options leave them zero.
const (
	DefaultContractTTL              = 15 * time.Minute
	DefaultMaxContractTTL           = 24 * time.Hour
	DefaultMaxContractsPerPrincipal = 1000
	// DefaultMaxSubscriptionsPerPrincipal is
	// Options.MaxSubscriptionsPerPrincipal when it is zero.
	DefaultMaxSubscriptionsPerPrincipal = 1000
	// DefaultMaxGroupsPerSubject is Options.MaxGroupsPerSubject when it
	// is zero.
	DefaultMaxGroupsPerSubject = 1000
	// DefaultMaxStoredGroupsPerSubject is
	// Options.MaxStoredGroupsPerSubject when it is zero.
	DefaultMaxStoredGroupsPerSubject = 10000
)

// Quotas of the access directory when Options leave them zero.
const (
	// DefaultMaxAccounts is Options.MaxAccounts when it is zero.
	DefaultMaxAccounts = 1_000_000
	// DefaultMaxRoles is Options.MaxRoles when it is zero.
	DefaultMaxRoles = 100_000
	// DefaultMaxGrantsPerAccount is Options.MaxGrantsPerAccount when it
	// is zero.
	DefaultMaxGrantsPerAccount = 1000
)

// DefaultNegotiateRate is Options.NegotiateRate when it is zero: 20
// negotiations a second per principal, in bursts of up to 100.
var DefaultNegotiateRate = RateLimitPolicy{PerSecond: 20, Burst: 100}

// DefaultQuarantineRate is Options.QuarantineRate when it is zero: 5
// quarantined copies a second per principal, in bursts of 100.
var DefaultQuarantineRate = RateLimitPolicy{PerSecond: 5, Burst: 100}

// DefaultFilterRate is Options.FilterRate when it is zero: 20 new
// subscription filters compiled a second per principal, in bursts of up
// to 100.
var DefaultFilterRate = RateLimitPolicy{PerSecond: 20, Burst: 100}

// Options configure an Engine. The zero value (or nil) is usable: an
// in-memory store, no credentials, an empty catalog. New copies Options;
// later changes to the caller's value have no effect.
type Options struct {
	// Store persists everything. Nil means a fresh in-memory store, which
	// the engine closes on Shutdown; a store passed in is closed by its owner.
	Store store.Store
	// Authenticator resolves credentials. Nil refuses every credential.
	Authenticator Authenticator
	// Catalog is the initial policy catalog.
	Catalog *Catalog
	// Gates run after the built-in gates, in order, before duplicate
	// detection and the append. They judge every message that can reach a
	// receiver: publishes, replies (Admission.Request is then the request
	// answered) and quarantine releases.
	Gates []Gate
	// ContractTTL is a contract's lifetime when negotiation asks for none
	// (default DefaultContractTTL, 15 minutes); MaxContractTTL is the longest
	// it may ask for (default DefaultMaxContractTTL, 24 h): a longer or
	// negative ttl is refused with INVALID_ARGUMENT.
	ContractTTL    time.Duration
	MaxContractTTL time.Duration
	// MaxContractsPerPrincipal caps the live (unexpired, unrevoked)
	// contracts of one principal (default DefaultMaxContractsPerPrincipal;
	// negative: no cap). Negotiating beyond it fails with
	// TOO_MANY_CONTRACTS until one expires or is revoked.
	MaxContractsPerPrincipal int
	// MaxSubscriptionsPerPrincipal caps the running subscriptions of one
	// principal, over every session and transport (default
	// DefaultMaxSubscriptionsPerPrincipal; negative: no cap). Each one
	// holds a goroutine and its queue, so without a cap one contract
	// holder could subscribe until the broker runs out of memory.
	// Subscribing beyond it fails with TOO_MANY_SUBSCRIPTIONS until one
	// ends. Counted per engine (per node in a cluster).
	MaxSubscriptionsPerPrincipal int
	// MaxGroupsPerSubject caps the consumer groups in use on one
	// work-queue or request/reply subject (default
	// DefaultMaxGroupsPerSubject; negative: no cap). Every group name, and
	// every selector, filter or receive scope beside it, is a group of its
	// own whose state the engine keeps in memory, so without a cap a
	// subscriber could start groups without end. A subscription that would
	// start a group beyond it fails with TOO_MANY_GROUPS; groups in use go
	// on. Counted per engine (per node in a cluster) over the groups in its
	// memory: those with a subscriber, a pull or an ack running, or a
	// lease in flight (a message handed out and not yet settled, or
	// nacked with a delay that has not passed). A group left with none of
	// these leaves memory and frees its place: at once, or, when a delay
	// was still to pass, once the subject reaches its cap again. Its
	// progress, and what is due again, stay in the store for its next
	// subscriber.
	MaxGroupsPerSubject int
	// MaxStoredGroupsPerSubject caps the consumer groups whose progress
	// the store keeps for one work-queue or request/reply subject
	// (default DefaultMaxStoredGroupsPerSubject; negative: no cap).
	// MaxGroupsPerSubject bounds the groups in memory, but a group that
	// leaves memory leaves its progress in the store until retention
	// prunes it (GroupRetention, or as long as the subject keeps
	// messages), so a subscriber cycling through new group names would
	// otherwise grow the store for a retention period. A subscription
	// that would start a group the store keeps no progress of, on a
	// subject whose store keeps this many, fails with TOO_MANY_GROUPS;
	// groups with progress go on, whatever their number. Counted over
	// the store, for every node of a cluster, when the store lists its
	// groups (store.GroupLister; otherwise not bounded). New groups
	// started at once may pass it by as many as start together (at most
	// MaxGroupsPerSubject on a node). Pull cursors are not counted.
	MaxStoredGroupsPerSubject int
	// MaxAccounts, MaxRoles and MaxGrantsPerAccount are the quotas of the
	// access directory, which every node keeps whole in memory and in its
	// store: the accounts it holds (default DefaultMaxAccounts), the roles
	// (default DefaultMaxRoles), and the live (unexpired, unrevoked)
	// grants of one account (default DefaultMaxGrantsPerAccount);
	// negative: no quota. CreateAccount, PutRole of a role not defined
	// yet, and IssueGrant beyond one are refused INVALID_ARGUMENT before
	// anything is written or audited; a change of what the directory
	// holds goes on, and a deletion, a revocation or an expiry frees a
	// place. A store that already holds more (written before the quota,
	// or under a larger one) loads whole: only creations are refused
	// while it does. Counted over this node's copy of the directory, which
	// holds every node's changes once it has heard of them: creations on
	// several nodes at once may pass a quota by as many as are made
	// together.
	MaxAccounts         int
	MaxRoles            int
	MaxGrantsPerAccount int
	// NegotiateRate limits how fast one principal may negotiate, as a token
	// bucket (PerSecond 0: DefaultNegotiateRate; negative: no limit; a
	// Burst below 1: PerSecond rounded up; NaN or infinite: New
	// refuses it, INVALID_ARGUMENT). Beyond it negotiation
	// fails with RATE_LIMITED.
	NegotiateRate RateLimitPolicy
	// NodeRateLimits keeps every rate limit (a subject's rateLimit and
	// NegotiateRate) per node in a cluster: a principal may then get up to
	// N times a limit through N nodes. By default, when Cluster implements
	// ClusterSize, each node applies its share, the limit divided by the
	// live nodes (the burst too, at least one), so that a principal whose
	// requests a balancer spreads over the nodes gets the limit in all; one
	// whose requests all reach one node gets its share there.
	NodeRateLimits bool
	// FilterRate limits how fast one principal may have new subscription
	// filters (WithFilter) compiled, as a token bucket (PerSecond 0:
	// DefaultFilterRate; negative: no limit; a Burst below 1: PerSecond
	// rounded up). Compiling a CEL filter of the largest size takes
	// milliseconds, so without it a client subscribing again and again
	// with new filters could keep the broker's cores busy. A filter the
	// engine compiled before (the same text, for any principal) is taken
	// from a cache and costs nothing; a filter that does not compile
	// costs a token too. Beyond it Subscribe fails with RATE_LIMITED.
	FilterRate RateLimitPolicy
	// QuarantineRate limits how many refused messages of one principal
	// are kept in the quarantine, as a token bucket (PerSecond 0:
	// DefaultQuarantineRate; negative: no limit; a Burst below 1:
	// PerSecond rounded up). Content refusals come before a subject's
	// rateLimit, so without it a publisher sending violations as fast as
	// it can would have a redacted copy of each, of up to the message's
	// size, written and kept for QuarantineRetention, until the disk is
	// full and every write of the broker stops. Beyond it a refusal is
	// still refused and audited with its code, as a denial (outcome deny,
	// no quarantineId) whose copy is not kept; observers count it
	// (NoteQuarantineSkipped).
	QuarantineRate RateLimitPolicy
	// Region is a session's region when Connect names none (default "local").
	Region string
	// RetryBase is the first redelivery backoff (default 1 s).
	RetryBase time.Duration
	// MaxReplay caps the messages one replay or receive returns (default 1000).
	MaxReplay int
	// MaxReadBytes caps about how many bytes of messages one replay or
	// pull receive returns (default DefaultMaxReadBytes): it stops once
	// its messages reach it, so an answer holds at most the budget and one
	// message, and always one message when there is one. With MaxReplay
	// alone, a thousand large messages would be read into memory for one
	// request.
	MaxReadBytes int
	// Now is the clock (default time.Now). Tests move it.
	Now func() time.Time
	// Logger receives operational events; never payload values. Default: discard.
	Logger *slog.Logger
	// QuarantineRetention is how long quarantine records are kept (default 30 days).
	QuarantineRetention time.Duration
	// GroupRetention is how long the store keeps the progress of a
	// consumer group (or a pull cursor) that nobody uses, on a subject
	// that keeps its messages for good (retention.messagesMs 0): default
	// DefaultGroupRetention, 30 days; negative: for good. As with Kafka's
	// offsets.retention, a group unused that long starts again, when next
	// used, from the subject's first retained message. On a subject with
	// retention.messagesMs, a group's progress goes once the group has been
	// unused for messagesMs instead: every message it handled is trimmed
	// by then, so it goes on as its progress would have had it. A group
	// the engine holds in memory (in use) is never deleted. The progress
	// of a group of a subject no longer in the catalog goes once the group
	// has been unused for GroupRetention (negative: never), when the store
	// names the subjects it keeps progress for (store.GroupSubjectLister).
	// The store must implement store.GroupPruner (the memory, wal and
	// jetstream stores do); docs/storage.md has the details.
	GroupRetention time.Duration
	// SweepInterval is how often expired contracts, parked replies and
	// retention are swept (default 1 minute).
	SweepInterval time.Duration
	// Observer, when set, watches decisions, deliveries, latencies and
	// store writes as they happen (metrics, consoles); see Observer. Nil
	// costs nothing.
	Observer Observer
	// Cluster, when set, joins this engine to the other nodes sharing
	// Store (see Cluster). Nil: a single node.
	Cluster Cluster
	// AuthFailureLimit is how many refused credentials one source (the
	// IPv4 address of Credential.RemoteAddr, or its IPv6 /64 prefix, since
	// a host given a /64 can rotate through its addresses) may present
	// within AuthFailureWindow before its attempts are refused RATE_LIMITED,
	// without being checked, for AuthFailureWindow from then (default
	// DefaultAuthFailureLimit, 20, in DefaultAuthFailureWindow, 1 minute;
	// a negative limit: no lockout). A success does not reset a source's
	// count. Credentials without an IP address (in process) are never
	// locked out. Counted per engine, so the HTTP routes and the
	// WebSocket endpoints of a server share one count per source. The
	// /64s of one IPv6 site are also counted together (AuthFailureSite).
	AuthFailureLimit  int
	AuthFailureWindow time.Duration
	// AuthFailureSite is how the /64s of one IPv6 site count together
	// toward the lockout (default: each /48, against 16 ×
	// AuthFailureLimit; Bits negative: not at all): once a site reaches
	// its limit, every address of it is locked out for
	// AuthFailureWindow. New refuses a SiteLimit that is not valid
	// (SiteLimit.Check) with INVALID_ARGUMENT.
	AuthFailureSite SiteLimit
}

// Engine is the in-process broker. It is safe for concurrent use by any
// number of goroutines. Every method that blocks takes a context.
type Engine struct {
	opts       Options
	store      store.Store
	ownStore   bool
	auth       Authenticator
	catalog    atomic.Pointer[catalogState]
	catMu      sync.Mutex
	contracts  contracts
	live       liveContracts
	gates      []Gate
	replyGates []Gate // gates without the publish-only ones
	appGates   bool   // an application's gate is in gates: data is decoded as a tree (wantsTree)
	idLocks    idLocks
	limiter    *rateLimiter
	auditor    auditor
	coalesce   coalescer
	authGuard  *authGuard  // failed authentications per source address
	seqTrims   bool        // the store trims by sequence: count bounds are enforced
	byteTrims  bool        // the store trims by size: byte bounds are enforced
	trimAsks   chan string // subjects past a bound (boundTrimmer)
	trimMu     sync.Mutex  // one message trim at a time (trimSubject)
	replies    replyTable
	groups     groupTable
	subs       subscriptions
	recent     recentCache
	filters    filterCache
	dir        directory
	grantKey   ed25519.PrivateKey
	lastVerify atomic.Pointer[VerifyResult]
	// afterAppend, set by tests only, runs once the store has a message
	// and before the engine answers for it (appendAccepted): the moment
	// in which a reader of the store may be handed the message.
	afterAppend atomic.Pointer[func(store.Message)]
	verifies    auditWalks // VerifyAudit's walks, shared

	closed    atomic.Bool
	ops       inflight // the operations in flight, that Shutdown waits for (inflight.go)
	bg        inflight // the engine's goroutines (goTracked), that Shutdown waits for after them
	revokes   inflight // the revocations let in once ops closed, that Shutdown waits for before the last flush (inflight.go)
	done      chan struct{}
	ctx       context.Context // canceled by Shutdown; background work derives from it
	stop      context.CancelFunc
	shutOnce  sync.Once
	closeOnce onceWait // the owned store's Close, by the Shutdown that finishes first
}

var _ Broker = (*Engine)(nil)

// catalogState is an immutable snapshot of compiled subjects.
type catalogState struct {
	subjects map[string]*subject
	schemas  map[string][]byte
	gen      uint64 // one more than the state it replaced (CatalogGeneration)
}

// maxOptionBurst is the largest burst a rate of Options takes when it
// gives none: its PerSecond rounded up, within an int on every platform.
const maxOptionBurst = 1 << 30

// optionRate applies the rules of an engine-wide rate of Options (name):
// PerSecond 0 takes def; negative means no limit; a Burst below 1 takes
// PerSecond rounded up (at most maxOptionBurst). A PerSecond that is not
// a number or infinite is INVALID_ARGUMENT: NaN compares false with
// everything, so a bucket would refill to full at every take, and the
// limit, which guards the broker's disk or cores, would be off without
// anyone having said so.
func optionRate(name string, rp *RateLimitPolicy, def RateLimitPolicy) error {
	switch {
	case math.IsNaN(rp.PerSecond) || math.IsInf(rp.PerSecond, 0):
		return NewError(CodeInvalidArgument, "Options.%s: PerSecond must be a finite number, not %v (negative: no limit)", name, rp.PerSecond)
	case rp.PerSecond == 0:
		*rp = def
	case rp.PerSecond > 0 && rp.Burst < 1:
		rp.Burst = int(min(math.Ceil(rp.PerSecond), maxOptionBurst))
	}
	return nil
}

// New builds an engine. It compiles the catalog (failing on the first
// invalid subject), restores the audit chain head from the store and starts
// the background janitor.
func New(ctx context.Context, opts *Options) (*Engine, error) {
	var o Options
	if opts != nil {
		o = *opts
		o.Gates = append([]Gate(nil), opts.Gates...)
	}
	if o.ContractTTL <= 0 {
		o.ContractTTL = DefaultContractTTL
	}
	if o.MaxContractTTL <= 0 {
		o.MaxContractTTL = DefaultMaxContractTTL
	}
	if o.MaxContractsPerPrincipal == 0 {
		o.MaxContractsPerPrincipal = DefaultMaxContractsPerPrincipal
	}
	if o.MaxSubscriptionsPerPrincipal == 0 {
		o.MaxSubscriptionsPerPrincipal = DefaultMaxSubscriptionsPerPrincipal
	}
	if o.MaxGroupsPerSubject == 0 {
		o.MaxGroupsPerSubject = DefaultMaxGroupsPerSubject
	}
	if o.MaxStoredGroupsPerSubject == 0 {
		o.MaxStoredGroupsPerSubject = DefaultMaxStoredGroupsPerSubject
	}
	if o.MaxAccounts == 0 {
		o.MaxAccounts = DefaultMaxAccounts
	}
	if o.MaxRoles == 0 {
		o.MaxRoles = DefaultMaxRoles
	}
	if o.MaxGrantsPerAccount == 0 {
		o.MaxGrantsPerAccount = DefaultMaxGrantsPerAccount
	}
	for _, r := range []struct {
		name string
		rp   *RateLimitPolicy
		def  RateLimitPolicy
	}{
		{"NegotiateRate", &o.NegotiateRate, DefaultNegotiateRate},
		{"FilterRate", &o.FilterRate, DefaultFilterRate},
		{"QuarantineRate", &o.QuarantineRate, DefaultQuarantineRate},
	} {
		if err := optionRate(r.name, r.rp, r.def); err != nil {
			return nil, err
		}
	}
	if o.Region == "" {
		o.Region = "local"
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Minute
	}
	if o.MaxReplay <= 0 {
		o.MaxReplay = 1000
	}
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	} else {
		o.Now = steadyClock(o.Now, &o)
	}
	if o.GroupRetention == 0 {
		o.GroupRetention = DefaultGroupRetention
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Authenticator == nil {
		o.Authenticator = NewStaticTokens()
	}
	if o.AuthFailureLimit == 0 {
		o.AuthFailureLimit = DefaultAuthFailureLimit
	}
	if o.AuthFailureWindow <= 0 {
		o.AuthFailureWindow = DefaultAuthFailureWindow
	}
	if err := o.AuthFailureSite.Check(); err != nil {
		return nil, NewError(CodeInvalidArgument, "Options.AuthFailureSite: %v", err)
	}
	if o.AuthFailureSite.Bits == 0 {
		o.AuthFailureSite.Bits = DefaultSiteBits
	}
	if o.AuthFailureSite.Factor == 0 {
		o.AuthFailureSite.Factor = DefaultSiteFactor
	}
	e := &Engine{opts: o, store: o.Store, auth: o.Authenticator, done: make(chan struct{}),
		authGuard: newAuthGuardSite(o.AuthFailureLimit, o.AuthFailureSite, o.AuthFailureWindow)}
	e.ctx, e.stop = context.WithCancel(context.WithoutCancel(ctx))
	e.ops.late = e.writeLate // an operation leaving after the audit writer stopped writes what it queued
	if e.store == nil {
		e.store = memory.New(&memory.Options{Now: o.Now})
		e.ownStore = true
	}
	_, e.seqTrims = e.store.(store.SeqTrimmer)
	_, e.byteTrims = e.store.(store.ByteTrimmer)
	e.trimAsks = make(chan string, trimQueue)
	e.contracts.m = map[string]*contract{}
	e.live.by = map[string]*principalLive{}
	e.limiter = newRateLimiter()
	if cs, ok := o.Cluster.(ClusterSize); ok && !o.NodeRateLimits {
		e.limiter.nodes = cs.LiveNodes
	}
	e.replies.init()
	e.groups.init()
	e.subs.init()
	if err := e.auditor.restore(ctx, e.store); err != nil {
		return nil, err
	}
	e.auditRecovery(ctx)
	if err := e.dir.load(ctx, e.store, e.opts.Logger); err != nil {
		return nil, err
	}
	e.dir.refreshed = e.onAccessChanged
	e.dir.shared = e.opts.Cluster != nil
	e.dir.quota = directoryQuota{accounts: o.MaxAccounts, roles: o.MaxRoles, grants: o.MaxGrantsPerAccount}
	if err := e.loadGrantKey(ctx); err != nil {
		return nil, err
	}
	if err := e.countStoredContracts(ctx); err != nil {
		return nil, err
	}
	e.catalog.Store(&catalogState{subjects: map[string]*subject{}, schemas: map[string][]byte{}})
	if o.Catalog != nil {
		if err := e.LoadCatalog(ctx, o.Catalog); err != nil {
			return nil, err
		}
	}
	e.gates = append(builtinGates(e), o.Gates...)
	e.appGates = !ownChain(e.gates)
	e.replyGates = replyChain(e.gates)
	e.goTracked(e.janitor)
	e.goTracked(e.auditWriter)
	if e.seqTrims || e.byteTrims {
		e.goTracked(e.boundTrimmer)
	}
	if o.Cluster != nil {
		if cc, ok := o.Cluster.(ClusterCurrent); ok {
			// Looked at before New returns, not first in watchCluster's
			// goroutine: an engine built after the moment its Cluster
			// vouched for must not authorize meanwhile.
			var until time.Time
			_ = e.caught("the cluster's CurrentUntil", func() error { until = cc.CurrentUntil(); return nil })
			e.dir.heard(until)
		}
		e.goTracked(e.watchCluster)
	}
	return e, nil
}

func (e *Engine) now() time.Time { return e.opts.Now() }

// steadyClock is the application's clock now, which never panics: the
// engine reads its clock under its locks (a group's, the audit writer's),
// where a panic, recovered higher up, would leave the lock held and every
// consumer of the group waiting. A panic of now is logged (by o's
// Logger, read then), noted to o's Observer (NotePanic, PanicClock) and
// answered by time.Now.
func steadyClock(now func() time.Time, o *Options) func() time.Time {
	return func() (t time.Time) {
		defer func() {
			if p := recover(); p != nil {
				logPanic(o.Logger, "the clock (Options.Now) panicked; the system clock answers", panicText(p))
				t = time.Now()
				noteTo(o.Observer, o.Logger, NotePanic, PanicClock)
			}
		}()
		return now()
	}
}

// goTracked starts fn on a goroutine that Shutdown waits for. A panic of
// fn ends fn alone, logged (survived), rather than the process: the
// engine's background work calls the store and the Cluster, which the
// application may supply (a third party's, with a bug), and the code of
// other libraries. A loop that must go on after a panic (the janitor, the
// bound trimmer, the cluster watch, a session's renewals) survives each
// turn itself; this is what is left for the rest.
//
// It is called by an operation in flight, by a goroutine it started, or
// by New, and then fn runs, Shutdown waiting for it. Called otherwise,
// once Shutdown has waited for the engine's goroutines, it runs nothing
// and reports false (see inflight.go).
func (e *Engine) goTracked(fn func()) bool {
	if !e.bg.join() {
		return false
	}
	go func() {
		defer e.bg.out()
		defer e.survived("a background task of the engine")
		fn()
	}()
	return true
}

// survived, deferred by the engine's background work, recovers a panic
// of it and logs it (where: what panicked), with its stack, card numbers
// redacted; the work goes on at its next turn, or ends alone. The value
// is only logged: it may quote a message or a record.
func (e *Engine) survived(where string) {
	if p := recover(); p != nil {
		e.logPanic(where, p)
	}
}

// caught runs fn and returns its error or, when fn panics, logs the panic
// (where) and returns an INTERNAL error naming where, so that a caller
// that retries or fails closed on an error does so on a panic too.
func (e *Engine) caught(where string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			e.logPanic(where, p)
			err = NewError(CodeInternal, "%s panicked", where)
		}
	}()
	return fn()
}

// logPanic logs p, a panic of where that the engine survived, and notes
// it (NotePanic, PanicBackground): survived and caught log through it, and
// so do the audit writer and the bound trimmer.
func (e *Engine) logPanic(where string, p any) {
	e.panicked(PanicBackground, where+" panicked; the engine goes on", panicText(p))
}

// panicked reports a panic the engine survived: it logs msg with attrs,
// text (what the log keeps of the panic's value: panicText, or less) and
// the stack, and notes it (NotePanic, where). Every recover of the engine
// reports through it.
func (e *Engine) panicked(where, msg, text string, attrs ...any) {
	logPanic(e.opts.Logger, msg, text, attrs...)
	e.note(NotePanic, where)
}

// logPanic logs msg, a panic survived, with attrs, text (what the log
// keeps of its value) and the stack of the goroutine that recovered it.
func logPanic(log *slog.Logger, msg, text string, attrs ...any) {
	log.Error(msg, append(attrs, "panic", text, "stack", string(debug.Stack()))...)
}

// panicText is what a log keeps of p, a panic's value: its text, card
// numbers redacted (the value may quote a message or a record).
func panicText(p any) string { return noPANIn(fmt.Sprint(p)) }

// sweepTimeout bounds one sweep of the janitor, and one count trim.
const sweepTimeout = 10 * time.Second

// janitor sweeps expired contracts, replies, idle rate buckets and the
// recent caches of quiet subjects.
func (e *Engine) janitor() {
	t := time.NewTicker(e.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-e.done:
			return
		case <-t.C:
			e.sweep()
		}
	}
}

// sweep is one pass of the janitor. A panic of it (of the store, which
// the application may supply) ends the pass, logged; the next tick sweeps
// again.
func (e *Engine) sweep() {
	defer e.survived("the janitor's sweep")
	ctx, cancel := context.WithTimeout(e.ctx, sweepTimeout)
	defer cancel()
	e.sweepContracts(ctx)
	e.replies.sweep(e.now())
	e.limiter.sweep(e.now())
	e.recent.sweep(e.now().Add(-recentIdle))
	e.enforceRetention(ctx)
	e.flushCoalesced(e.now())
}

// LoadCatalog lints c, compiles every subject of it and makes the result
// current, replacing subjects of the same name. A catalog with a lint
// problem of error severity (see policy.Lint) is refused with POLICY_INVALID naming
// the file (or subject) and field; warnings are not. A subject whose
// compiled policy differs from the one it replaces makes contracts compiled
// from the old version fail with CONTRACT_STALE until renegotiated, and
// ends their subscriptions with it at once. Nothing
// changes when any subject fails to lint or compile.
func (e *Engine) LoadCatalog(ctx context.Context, c *Catalog) error {
	if !e.ops.enter() { // Shutdown waits for its records and its byte counts (inflight.go)
		return errShutdown()
	}
	defer e.ops.leave()
	if c == nil {
		return NewError(CodePolicyInvalid, "no catalog")
	}
	e.catMu.Lock()
	defer e.catMu.Unlock()
	old := e.catalog.Load()
	if err := lintForLoad(c, old.schemas); err != nil {
		return err
	}
	next := &catalogState{subjects: make(map[string]*subject, len(old.subjects)+len(c.Subjects)), schemas: make(map[string][]byte, len(old.schemas)+len(c.Schemas)),
		gen: old.gen + 1}
	for k, v := range old.schemas {
		next.schemas[k] = v
	}
	var newSchemas []string
	for k, v := range c.Schemas {
		if _, ok := old.schemas[k]; !ok || string(old.schemas[k]) != string(v) {
			newSchemas = append(newSchemas, k)
		}
		next.schemas[k] = append([]byte(nil), v...)
	}
	for k, v := range old.subjects {
		next.subjects[k] = v
	}
	var changed []*subject
	for _, p := range c.Subjects {
		s, err := compileSubject(p, next.schemas)
		if err != nil {
			return err
		}
		if prev := old.subjects[s.name]; prev != nil && prev.digest == s.digest {
			continue
		}
		next.subjects[s.name] = s
		changed = append(changed, s)
	}
	e.catalog.Store(next)
	e.countBytes(changed)
	if len(changed) > 0 {
		// A subscription under a contract compiled from a replaced
		// version ends now with CONTRACT_STALE, as one whose role was
		// taken away does, not at its next delivery: its client learns
		// at once that it must negotiate again.
		e.onAccessChanged()
	}
	for _, k := range newSchemas {
		e.audit(ctx, EventSchemaRegistered.record("", CodeOK, store.AuditRecord{SchemaID: k}))
	}
	for _, s := range changed {
		e.audit(ctx, EventSubjectRegistered.record("", CodeOK, store.AuditRecord{Subject: s.name, PolicyID: s.policyID, SchemaID: s.schemaID, Ref: s.digest}))
	}
	return nil
}

// ReplaceSubject compiles p and makes it current (see LoadCatalog).
func (e *Engine) ReplaceSubject(ctx context.Context, p SubjectPolicy) error {
	return e.LoadCatalog(ctx, &Catalog{Subjects: []SubjectPolicy{p}})
}

// Subjects returns the current policies, sorted by name.
func (e *Engine) Subjects() []SubjectPolicy {
	cat := e.catalog.Load()
	out := make([]SubjectPolicy, 0, len(cat.subjects))
	for _, s := range cat.subjects {
		out = append(out, s.policy)
	}
	sortSubjects(out)
	return out
}

// Catalog returns a copy of the current catalog: the subjects, sorted by
// name, and every schema registered.
func (e *Engine) Catalog() *Catalog {
	cat := e.catalog.Load()
	c := &Catalog{Subjects: e.Subjects(), Schemas: make(map[string][]byte, len(cat.schemas))}
	for k, v := range cat.schemas {
		c.Schemas[k] = slices.Clone(v)
	}
	return c
}

// CatalogGeneration identifies the current catalog: it grows each time a
// catalog is made current (LoadCatalog, ReplaceSubject), so two equal
// values saw the same subjects and schemas. What is computed from Catalog
// alone may be cached under it; read it before Catalog, so that what is
// cached is at least as new as its key (a newer catalog is only computed
// again). It is one atomic load, safe for concurrent use.
func (e *Engine) CatalogGeneration() uint64 { return e.catalog.Load().gen }

// Subject returns one current policy.
func (e *Engine) Subject(name string) (SubjectPolicy, error) {
	s := e.catalog.Load().subjects[name]
	if s == nil {
		return SubjectPolicy{}, NewError(CodeSubjectNotFound, "unknown subject %q", name)
	}
	return s.policy, nil
}

func (e *Engine) subject(name string) *subject { return e.catalog.Load().subjects[name] }

// Authenticate resolves a credential to a principal.
func (e *Engine) Authenticate(ctx context.Context, credential string) (*Principal, error) {
	return e.AuthenticateCredential(ctx, Credential{Bearer: credential})
}

// AuthenticateCredential resolves c to a principal. With an
// Options.Authenticator that is a CredentialAuthenticator (a chain of
// methods, say) every credential goes to it; otherwise a JWT is verified as
// a grant token of this broker and any other bearer string goes to the
// Authenticator, and a client certificate is ignored. A principal that is
// not a grant's is merged with its account (roles united, attributes
// overlaid), and its Method defaults to AuthToken. Every refusal is an
// *Error: UNAUTHENTICATED unless the authenticator chose another code.
//
// Every refusal but SHUTTING_DOWN writes an auth.failed audit record
// naming the method tried and the source of c.RemoteAddr (its IPv4
// address, or its IPv6 /64 prefix: "2001:db8:1:2::/64", the source as the
// lockout counts it, and the site when its count locked the source out),
// never the credential; a run from one source is coalesced. A source that had Options.AuthFailureLimit credentials
// refused within Options.AuthFailureWindow is refused RATE_LIMITED, with
// details.retryAfterMs, before c is looked at.
func (e *Engine) AuthenticateCredential(ctx context.Context, c Credential) (*Principal, error) {
	if !e.ops.enter() { // Shutdown waits for its auth.failed record (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	src := SourceOf(c.RemoteAddr)
	if left, site := e.authGuard.lockedBy(src, e.now()); left > 0 {
		err := &Error{Code: CodeRateLimited, Message: "too many failed authentications from this address; try again later",
			Details: map[string]any{"retryAfterMs": left.Milliseconds()}}
		e.auditAuthFailure(ctx, c, src, site, CodeRateLimited)
		return nil, err
	}
	p, err := e.authenticateCredential(ctx, c)
	if err != nil && ErrorCode(err) != CodeShutdown {
		code := ErrorCode(err)
		e.note(NoteAuthFailure, credentialMethod(c))
		if credentialRefused(code) {
			e.authGuard.failed(src, e.now())
		}
		e.auditAuthFailure(ctx, c, src, Source{}, code)
	}
	return p, err
}

// Reauthenticate resolves c again, a credential AuthenticateCredential
// accepted when a long-lived exchange began (a stream of events, say), and
// returns the principal it stands for now: its roles as they are now, or
// the refusal it would get now (a grant revoked or expired, a role taken
// away from its account, a token no longer configured). A refusal is not
// counted against the source's lockout nor audited as auth.failed: it ends
// an exchange already admitted, and is no attempt. A server calls it
// before each part of such an exchange, so that a revocation takes effect
// at once rather than when the exchange ends.
func (e *Engine) Reauthenticate(ctx context.Context, c Credential) (*Principal, error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	return e.authenticateCredential(ctx, c)
}

// credentialRefused reports whether an authentication failure of code
// judged the credential (and counts against its source), rather than
// failing for the broker's or an identity provider's want.
func credentialRefused(code Code) bool {
	switch code {
	case CodeUnauthenticated, CodeGrantRevoked, CodeForbidden:
		return true
	}
	return false
}

// auditAuthFailure writes the auth.failed record of a refused credential:
// its method and source as ref, never the credential, and the site whose
// count locked the source out, when one did (site valid): "auth:bearer
// from 2001:db8:1:2::/64 (site 2001:db8:1::/48 locked out)".
func (e *Engine) auditAuthFailure(ctx context.Context, c Credential, src, site Source, code Code) {
	ref := "auth:" + credentialMethod(c)
	switch {
	case src.IsValid():
		ref += " from " + src.String()
	case c.RemoteAddr != "":
		ref += " from " + c.RemoteAddr
	}
	if site.IsValid() {
		ref += " (site " + site.String() + " locked out)"
	}
	_ = e.audit(ctx, EventAuthFailed.record(OutcomeDeny, code, store.AuditRecord{Ref: ref}))
}

// authenticateCredential resolves c. A panic of the authenticator (the
// application's code, or an identity provider's, run on what a client
// presented) refuses c as an unknown credential is refused, with the same
// error, so that a client learns nothing more from it; the callers count
// and audit it as such. Unrecovered, it reached net/http, which logged
// its value whole and cut the connection, or the in-process caller,
// uncounted. It is logged without its value (authPanicText).
func (e *Engine) authenticateCredential(ctx context.Context, c Credential) (p *Principal, err error) {
	if e.closed.Load() {
		return nil, errShutdown()
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, errUnknownCredential()
			e.panicked(PanicAuthenticator, "the authenticator panicked: the credential is refused as unknown",
				authPanicText(r), "method", credentialMethod(c))
		}
	}()
	if ca, ok := e.auth.(CredentialAuthenticator); ok {
		p, err = ca.AuthenticateCredential(context.WithValue(ctx, engineKey{}, e), c)
	} else if grant.LooksLikeJWT(c.Bearer) {
		return e.authenticateGrant(c.Bearer)
	} else {
		p, err = e.auth.Authenticate(ctx, c.Bearer)
	}
	if err != nil {
		var pe *Error
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, WrapError(CodeUnauthenticated, err, "unknown or missing credential")
	}
	if p == nil || p.ID == "" {
		return nil, errUnknownCredential()
	}
	if err := checkPrincipal(p); err != nil {
		return nil, err
	}
	if p.grantID != "" {
		return p, nil
	}
	return e.resolvePrincipal(p)
}

// Negotiate issues a contract to p for the subjects policy permits. ttl 0
// means Options.ContractTTL; a negative ttl or one above
// Options.MaxContractTTL is refused with INVALID_ARGUMENT (wire callers
// convert ttlMs with TTLFromMillis). The contract expires no later than p's
// credential (Principal.Expires): its operations are then refused
// CONTRACT_EXPIRED and its subscriptions end. Once the credential has
// expired, Negotiate refuses p UNAUTHENTICATED (audited contract.denied):
// the caller must authenticate again with a fresh credential.
func (e *Engine) Negotiate(ctx context.Context, p *Principal, region string, subjects []string, ttl time.Duration) (Contract, error) {
	if !e.ops.enter() { // Shutdown waits for its records (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if region == "" {
		region = e.opts.Region
	}
	defer e.took(StageNegotiate, "", e.since())
	c, err := e.negotiate(ctx, p, region, subjects, ttl)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Connect implements Broker with an in-process session.
func (e *Engine) Connect(ctx context.Context, credential string, subjects []string, opts ...ConnectOption) (Session, error) {
	if !e.ops.enter() { // Shutdown waits for its records and its renewals (inflight.go)
		return nil, errShutdown()
	}
	defer e.ops.leave()
	if err := e.auditGuard(ctx); err != nil {
		return nil, err
	}
	var co ConnectOptions
	for _, o := range opts {
		o(&co)
	}
	p, err := e.Authenticate(ctx, credential)
	if err != nil {
		return nil, err
	}
	region := co.Region
	if region == "" {
		region = e.opts.Region
	}
	start := e.since()
	c, err := e.negotiate(ctx, p, region, subjects, co.ContractTTL)
	e.took(StageNegotiate, "", start)
	if err != nil {
		return nil, err
	}
	s := e.newLocalSession(Caller{Principal: p, Region: region, ContractID: c.info.ID}, c)
	if !co.NoAutoRenew {
		e.goTracked(func() { s.renewLoop(co.ContractTTL) })
	}
	return s, nil
}

// Shutdown stops accepting work, ends subscriptions and waits for the
// operations in flight (a publish, a batch, a release, an ack, a
// negotiation, a subscription: see inflight.go), then for the engine's
// goroutines, then for the revocations in flight, then for the last
// write of the audit queue (a writer at work included), then for the
// store's close: each wait ends when ctx does, and Shutdown then returns
// ctx's error; a later call takes up where it stopped and waits again,
// without doing twice what was done (the store is closed once). Once the
// operations have ended it writes what is left of the audit queue, so
// that every operation answered before has its records in the store, and
// closes the store, only when the engine made it. A record queued after
// that (a refusal a server records late) is written by its caller. It is
// idempotent; later calls return nil once one has finished.
//
// A change that only takes access away (RevokeContract, RevokeGrant,
// DeleteAccount, RemoveAccountRole, DeleteRole, a PutRole that only
// narrows a role, a PutAccountKeys that only removes keys or narrows
// their windows) never waits for Shutdown and is not refused while the
// store it writes to is open: begun after Shutdown began, it is carried
// out and audited, and Shutdown waits for it before its last flush. Once
// that wait began on the store the engine made, which Shutdown closes
// next, such a change is refused SHUTTING_DOWN (retryable, on another
// node or after a restart) and changes nothing; on the application's
// store, which Shutdown leaves open, it is carried out, uncounted, as
// Record is, and meets SHUTTING_DOWN once the application closed the
// store. Every other operation, a change that gives access included, is
// refused SHUTTING_DOWN from the moment Shutdown began.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.shutOnce.Do(func() {
		e.closed.Store(true)
		e.revokes.late = e.writeLate // before any revocation can enter it: ops closes next
		e.ops.close()                // from here on an operation is refused SHUTTING_DOWN, a revocation counted apart
		// No run of refusals is counted from here on: the janitor, whose
		// flushes write them, stops (inflight.go).
		for _, r := range e.coalesce.close() {
			e.queueAudit(r, false)
		}
		close(e.done)
		e.subs.closeAll()
		e.stop()
		e.replies.closeAll()
	})
	if err := e.ops.wait(ctx); err != nil {
		return err
	}
	e.bg.close() // every goroutine of the engine was started by now, or is started by one still running
	if err := e.bg.wait(ctx); err != nil {
		return err
	}
	e.revokes.close() // a revocation after this is refused, on the store the engine closes next
	if err := e.revokes.wait(ctx); err != nil {
		return err
	}
	if err := e.flushAuditWithin(ctx); err != nil {
		return err
	}
	return e.closeOnce.do(ctx, func() error {
		if e.ownStore {
			return e.store.Close(ctx)
		}
		return nil
	})
}

// storeError maps a store error to the typed error.
func storeError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return WrapError(CodeNotFound, err, "not found")
	case errors.Is(err, store.ErrFull):
		return WrapError(CodeStoreFull, err, "store is full")
	case errors.Is(err, store.ErrNoQuorum):
		return WrapError(CodeStoreNoQuorum, err, "store has no quorum; retry")
	case errors.Is(err, store.ErrCorrupt):
		return WrapError(CodeStoreCorrupt, err, "%v", err)
	case errors.Is(err, store.ErrTampered):
		return WrapError(CodeAuditTampered, err, "%v", err)
	case errors.Is(err, store.ErrClosed):
		return WrapError(CodeShutdown, err, "store is closed")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return WrapError(CodeRequestTimeout, err, "%v", err)
	}
	return WrapError(CodeStoreUnavailable, err, "store failure")
}

func sortSubjects(s []SubjectPolicy) {
	slices.SortFunc(s, func(a, b SubjectPolicy) int { return strings.Compare(a.Name, b.Name) })
}

// principalText reports whether id is text: valid UTF-8 without control
// or formatting characters (hasControl).
func principalText(id string) bool {
	return utf8.ValidString(id) && !hasControl(id)
}

// MaxPrincipalIDLength is the longest principal id the engine takes from
// an authenticator, in bytes: the longest SPIFFE ID (2048 bytes, the
// SPIFFE specification's bound, which a client certificate's may reach),
// and above the longest an OIDC issuer gives (a 1024-byte claim behind a
// principal prefix of at most 256 bytes) and an account id (MaxIDLength).
const MaxPrincipalIDLength = 2048

// MaxPrincipalRoles is the most roles the engine takes from an
// authenticator for one principal. Each is a role name (the syntax of
// Engine.PutRole), as the directory's roles are named.
const MaxPrincipalRoles = 256

// checkPrincipal holds the principal an authenticator returned (any
// Authenticator, the application's own included) to the bounds the
// engine keeps on every principal, whoever vouched for it: an id of 1 to
// MaxPrincipalIDLength bytes of text (principalText), at most
// MaxPrincipalRoles roles, each a role name, and attributes within the
// bounds of an account's (validAttributes: at most
// MaxAccountAttributes, names and values bounded and text). A principal
// is copied into every contract, lease, audit record and policy
// condition it reaches, so one that breaks them is refused
// UNAUTHENTICATED, counted and audited as another refused credential,
// and nothing of it is kept. The error quotes neither the id nor an
// attribute's value (an attribute's name, quoted, it may). It runs once
// per authentication (a connection's, a request's), never per message.
func checkPrincipal(p *Principal) error {
	switch {
	case len(p.ID) > MaxPrincipalIDLength:
		return NewError(CodeUnauthenticated, "the authenticator returned a principal id of %d bytes, more than %d", len(p.ID), MaxPrincipalIDLength)
	case !principalText(p.ID):
		// Ids are text everywhere they are compared: in the directory, in
		// rules, as lease holders (a push subscription's are not text).
		return NewError(CodeUnauthenticated, "the authenticator returned a principal id that is not text")
	case len(p.Roles) > MaxPrincipalRoles:
		return NewError(CodeUnauthenticated, "the authenticator returned %d roles, more than %d", len(p.Roles), MaxPrincipalRoles)
	}
	for _, r := range p.Roles {
		if validID("a role name", r) != nil {
			// A role reaches contracts, audit records and conditions,
			// which take role names to be names.
			return NewError(CodeUnauthenticated, "the authenticator returned a role that is not a role name")
		}
	}
	if len(p.Attributes) == 0 {
		return nil
	}
	if err := validAttributes(p.Attributes); err != nil {
		// Not wrapped: the refusal is the credential's, not an invalid
		// argument of the caller's (errors.Is(err, ErrInvalid)).
		msg := err.Error()
		if pe := (*Error)(nil); errors.As(err, &pe) {
			msg = pe.Message
		}
		return NewError(CodeUnauthenticated, "the authenticator returned a principal whose attributes break an account's bounds: %s", msg)
	}
	return nil
}
