package pigeon

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
