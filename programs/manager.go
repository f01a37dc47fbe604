package programs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"pigeon"
	"pigeon/store"
	"pigeon/store/memory"
)

// Defaults of Options.
const (
	DefaultMaxModuleSize = 32 << 20
	DefaultRebindDelay   = time.Second
	// DefaultPositionInterval is how often a binding of a pubsub route
	// stores its position while it moves.
	DefaultPositionInterval = time.Second
	// DefaultKeepVersions is how many versions of a program keep their
	// module (the current one included), for rollbacks.
	DefaultKeepVersions = 5
	// DefaultMaxMessageSize is Options.MaxMessageSize when it is 0: a
	// transport's bound on a message (server.DefaultMaxBody,
	// ws.DefaultMaxFrame).
	DefaultMaxMessageSize = 1 << 20
	maxRebindDelay        = time.Minute
	bucket                = "programs"
	// modules is the KV bucket of the modules of earlier versions, keyed
	// "<name>@<version>".
	modules = "program-modules"
)

// Options configure a Manager. Nil means the defaults; New copies them.
type Options struct {
	// KV keeps the programs and their versions (bucket "programs"); pass
	// the engine's store so they survive a restart. Nil keeps them in
	// memory.
	KV store.KV
	// Logger receives the programs' logs and output, and failures.
	Logger *slog.Logger
	// MaxModuleSize bounds a module (default DefaultMaxModuleSize).
	MaxModuleSize int
	// Cache is the compilation cache shared by every program's runtime
	// (nil: one of the Manager's own, in memory). Several Managers of one
	// process may share one.
	Cache wazero.CompilationCache
	// Interpreter runs modules on wazero's interpreter instead of its
	// compiler: deploys are faster, deliveries slower.
	Interpreter bool
	// Middleware wraps every program's handler, outermost first (metrics,
	// tracing); it sees each delivery and the program's verdict on it.
	Middleware []pigeon.Middleware
	// RebindDelay is the first delay before a binding whose contract ended
	// is tried again (default DefaultRebindDelay; it doubles up to a minute).
	RebindDelay time.Duration
	// PositionInterval is how often a binding of a pubsub route stores its
	// position while it moves (default DefaultPositionInterval); it is
	// stored too whenever the binding stops. After a crash, the messages
	// handled since the last store are handled again.
	PositionInterval time.Duration
	// KeepVersions is how many versions of a program keep their module,
	// the current one included (default DefaultKeepVersions): only those
	// can be rolled back to. Older versions keep their metadata.
	KeepVersions int
	// MaxProgramsPerAccount caps the programs that run as one account
	// (their manifests' Account), whoever deploys them (default
	// DefaultMaxProgramsPerAccount; negative: no cap). Each one keeps its
	// modules and a runtime, so without a cap a principal allowed to
	// deploy as itself could deploy until the process runs out of memory.
	// A deploy that would start one more program for the account fails
	// with PROGRAM_LIMIT_EXCEEDED; new versions of its programs do not.
	// Programs restored at start count, even beyond it.
	MaxProgramsPerAccount int
	// MaxMemoryPerAccount caps, in bytes, the memory the instances of one
	// account's programs may take at once: the sum of route.maxInFlight ×
	// (limits.memoryPages × 64 KiB + StackReserve) over its programs
	// (Manifest.Memory; default DefaultMaxMemoryPerAccount; negative: no
	// cap). A program runs up to maxInFlight instances, each free to grow
	// its memory to memoryPages and, recursing, its call stack (on the Go
	// heap) to wazero's ceiling, so without a cap one account's programs
	// could take up to 10,000 × (1 GiB + 144 MiB) each. A deploy that
	// would pass it fails with PROGRAM_LIMIT_EXCEEDED; one that lowers an
	// account's total is always taken. Programs restored at start count,
	// even beyond it.
	MaxMemoryPerAccount int64
	// MaxMessageSize bounds, in bytes, the JSON of a message a program
	// publishes or replies (default DefaultMaxMessageSize), as a
	// transport bounds a frame: a larger one is refused PAYLOAD_TOO_LARGE
	// before it is read.
	MaxMessageSize int
	// MaxHops bounds how many programs deep a message's descendants go
	// (default DefaultMaxHops; negative: no bound): a message from outside
	// the programs is at depth 0, one a program emits while it handles a
	// message at depth d is at d+1, and an emit deeper than MaxHops is
	// refused PROGRAM_LIMIT_EXCEEDED, audited publish.denied. Without it a
	// program publishing into its own route (or two into each other's)
	// would make one message's descendants grow without end. The depth
	// travels with the message (pigeon.Message.Hops), so the bound holds
	// for programs of different Managers (a cluster's nodes) too.
	MaxHops int
	// MaxDescendants bounds the messages the programs emit, in all, from
	// one message from outside the programs and its descendants (default
	// DefaultMaxDescendants; negative: no bound); one more is refused as
	// a hop too deep is. It counts this Manager's emits: a message a
	// program of another Manager published starts a count of its own.
	MaxDescendants int64
	// LineageSize is how many of the messages its programs published the
	// Manager remembers the lineage of (default DefaultLineageSize). A
	// program's message delivered after its lineage was forgotten counts
	// as at depth MaxHops: its handler can emit nothing (refused
	// PROGRAM_LIMIT_EXCEEDED, with a warning in the log at most once a
	// minute). Set it above the largest backlog of program messages a
	// program that emits may have to work through; an entry takes about
	// 200 bytes, a few hundred with the longest subjects and ids.
	LineageSize int
}

// Manager deploys, binds, swaps and removes the programs of one engine.
// It is safe for concurrent use; deploys and removals of one program are
// serialized, those of different programs run in parallel.
type Manager struct {
	e      *pigeon.Engine
	kv     store.KV
	opts   Options
	log    *slog.Logger
	cache  wazero.CompilationCache
	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	lin *lineage

	mu     sync.Mutex
	progs  map[string]*program
	quota  quota
	closed bool
	// names is the names of progs in order, for ListPage: kept in step
	// with progs, under mu.
	names sortedNames
}

// program is one name with its current binding.
type program struct {
	name string
	mu   sync.Mutex // serializes deploys and removal
	rec  record     // the stored record of the current version (Version 0: none yet)
	b    *binding   // nil while not bound
	err  string     // why a stored program could not be bound at start
	// view is what Get and List show: info() as of the last change, set
	// under mu (snapshot), read without it, so that a listing never waits
	// for a deploy or a removal that waits for a long delivery.
	view atomic.Pointer[Info]
}

// record is what the store keeps of a program.
type record struct {
	Name       string    `json:"name"`
	Version    int       `json:"version"`
	Manifest   Manifest  `json:"manifest"`
	Module     []byte    `json:"module"`
	SHA256     string    `json:"sha256"`
	DeployedAt time.Time `json:"deployedAt"`
	DeployedBy string    `json:"deployedBy"`
	RollbackOf int       `json:"rollbackOf,omitempty"`
	// History lists the earlier versions, oldest first.
	History []Revision `json:"history,omitempty"`
}

// Revision is one version of a program.
type Revision struct {
	Version    int       `json:"version"`
	SHA256     string    `json:"sha256"`
	Size       int       `json:"size"`
	DeployedAt time.Time `json:"deployedAt"`
	DeployedBy string    `json:"deployedBy"`
	// RollbackOf is the earlier version a rollback deployed again.
	RollbackOf int `json:"rollbackOf,omitempty"`
	// Manifest is an earlier version's manifest (nil for the current
	// version, whose manifest is Info's).
	Manifest *Manifest `json:"manifest,omitempty"`
	// Pruned says an earlier version's module is no longer kept
	// (Options.KeepVersions): it cannot be rolled back to.
	Pruned bool `json:"pruned,omitempty"`
}

// Info is a program as the API shows it.
type Info struct {
	Name     string   `json:"name"`
	Manifest Manifest `json:"manifest"`
	Revision
	// Bound is whether the program is bound to its route now; Error says
	// why not.
	Bound      bool       `json:"bound"`
	Error      string     `json:"error,omitempty"`
	ContractID string     `json:"contractId,omitempty"`
	History    []Revision `json:"history,omitempty"`
}

// New returns the Manager of e and binds every program kept in
// Options.KV again, each at its stored version. A program that cannot be
// bound is audited (program.refused), logged and listed with its error;
// it stays unbound until deployed again. A program stored under a key
// that is not a program name (ValidName), which no deploy writes, is
// skipped (see restore).
func New(ctx context.Context, e *pigeon.Engine, opts *Options) (*Manager, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Middleware = slices.Clone(o.Middleware)
	if o.KV == nil {
		o.KV = memory.New(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxModuleSize <= 0 {
		o.MaxModuleSize = DefaultMaxModuleSize
	}
	if o.RebindDelay <= 0 {
		o.RebindDelay = DefaultRebindDelay
	}
	if o.PositionInterval <= 0 {
		o.PositionInterval = DefaultPositionInterval
	}
	if o.KeepVersions <= 0 {
		o.KeepVersions = DefaultKeepVersions
	}
	if o.MaxProgramsPerAccount == 0 {
		o.MaxProgramsPerAccount = DefaultMaxProgramsPerAccount
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = DefaultMaxMessageSize
	}
	if o.MaxMemoryPerAccount == 0 {
		o.MaxMemoryPerAccount = DefaultMaxMemoryPerAccount
	}
	if o.MaxHops == 0 {
		o.MaxHops = DefaultMaxHops
	}
	if o.MaxDescendants == 0 {
		o.MaxDescendants = DefaultMaxDescendants
	}
	if o.LineageSize <= 0 {
		o.LineageSize = DefaultLineageSize
	}
	mg := &Manager{e: e, kv: o.KV, opts: o, log: o.Logger, cache: o.Cache, progs: map[string]*program{},
		quota: newQuota(), lin: newLineage(&o)}
	if mg.cache == nil {
		mg.cache = wazero.NewCompilationCache()
	}
	mg.ctx, mg.cancel = context.WithCancel(context.Background())
	stored, err := o.KV.List(ctx, bucket)
	if err != nil {
		return nil, pigeon.WrapError(pigeon.CodeStoreUnavailable, err, "read the stored programs")
	}
	names := make([]string, 0, len(stored))
	for n := range stored {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		mg.restore(ctx, n, stored[n])
	}
	return mg, nil
}

// restore binds one stored program again. It holds the program's lock as
// a deploy does: the binding's watch, started by bind, reads p.b under it
// when the subscription ends, which may be before bind has returned.
//
// A record stored under a key that is not a program name (ValidName),
// which no deploy writes (a store changed by hand), is skipped, as the
// directory skips a stored role whose name is not a valid id: it is not
// bound, shown or listed; a warning naming the key is logged, and
// program.refused (PROGRAM_INVALID) is audited with the key quoted in its
// ref (program:"Bad Name"). Skipping it only keeps code from running, so
// it does not keep the broker from starting. Restored, it would run under
// a name no deploy takes, and a page of ListPage would name it as next,
// the after the following page refuses. The record is left in the store
// for its operator.
func (mg *Manager) restore(ctx context.Context, name string, raw []byte) {
	if !ValidName(name) {
		key := cut(name, 128) // a program name is at most 63 bytes
		mg.log.Warn("stored program skipped: its key is not a program name (a-z, 0-9, '.', '_', '-'; at most 63); it is not bound",
			"bucket", bucket, "key", key)
		_ = mg.e.Record(ctx, pigeon.EventProgramRefused, pigeon.CodeProgramInvalid, pigeon.AuditRecord{Ref: "program:" + strconv.Quote(key)})
		return
	}
	p := &program{name: name}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.snapshot()
	mg.progs[name] = p
	mg.names.add(name)
	if err := json.Unmarshal(raw, &p.rec); err != nil {
		p.err = "the stored record does not decode: " + err.Error()
		mg.log.Error("stored program unreadable", "program", name, "error", err)
		return
	}
	mg.recorded(&record{}, &p.rec, nil)
	// The manifest passes today's checks, as a deploy's does: one stored
	// by an older version (whose bounds were wider) or changed in the
	// store is refused, not bound with its limits unchecked.
	man := p.rec.Manifest
	err := p.rec.intact(name)
	if err == nil {
		err = man.normalize()
	}
	var v *version
	if err == nil {
		v, err = newVersion(ctx, mg, name, p.rec.Version, man, p.rec.Module)
	}
	if err == nil {
		var from *position
		if pos, ok := mg.loadPosition(ctx, name); ok {
			from = &pos
		}
		if p.b, err = mg.bind(ctx, p, v, from); err != nil {
			v.retire(ctx)
		} else {
			p.b.setLive(ctx, true)
		}
	}
	if err != nil {
		p.err = err.Error()
		mg.log.Error("stored program not bound", "program", name, "error", err)
		_ = mg.e.Record(ctx, pigeon.EventProgramRefused, pigeon.ErrorCode(err), pigeon.AuditRecord{Principal: logged(p.rec.Manifest.Account), Subject: logged(p.rec.Manifest.Route.Subject), Ref: "program:" + name + "@" + strconv.Itoa(p.rec.Version)})
		return
	}
	mg.audit(ctx, pigeon.EventProgramBound, pigeon.CodeOK, p.b.caller, v)
}

// intact refuses (STORE_CORRUPT) a record, stored under key, that no
// deploy writes: one naming another program than its key, or whose module
// is not the one its digest names (a record changed or damaged in the
// store). Bound, it would run code other than the code deployed, audited
// and listed under that digest, or run one program under another's name.
func (r *record) intact(key string) error {
	if r.Name != key {
		return pigeon.NewError(pigeon.CodeStoreCorrupt, "the record stored under %q names program %q", key, cut(r.Name, 128))
	}
	if sum := sha256.Sum256(r.Module); hex.EncodeToString(sum[:]) != r.SHA256 {
		return pigeon.NewError(pigeon.CodeStoreCorrupt, "the stored module of program %s version %d does not match its digest", key, r.Version)
	}
	return nil
}

// A Precondition is checked under the program's lock just before a
// deploy, a rollback or a removal changes it, with the program as it is
// then: cur is nil when no version runs under the name. An error refuses
// the change and is returned as it is. The HTTP API checks with one who
// may change which program, so that no deploy by another account slips in
// between its check and the change.
type Precondition func(cur *Info) error

// check runs pre on p's state. p.mu is held.
func (p *program) check(pre []Precondition) error {
	var cur *Info
	if p.rec.Version > 0 {
		in := p.info()
		cur = &in
	}
	for _, f := range pre {
		if err := f(cur); err != nil {
			return err
		}
	}
	return nil
}

// Deploy validates module under man and binds it as the next version of
// the program name. When a version runs already, the switch is atomic:
// deliveries in flight finish on the old version, later ones run on the
// new. A route, account or publishes change on the same pubsub subject
// hands the route over at a sequence (see handover); on another subject
// it binds a new subscription before the old one stops. A deploy that
// fails (PROGRAM_INVALID with its check, or the store's error) leaves the
// old version running. by is who deploys, for the audit; authorizing it
// is the caller's business, with pre when it depends on what runs under
// the name.
func (mg *Manager) Deploy(ctx context.Context, by *pigeon.Principal, name string, man Manifest, module []byte, pre ...Precondition) (Info, error) {
	if by == nil {
		return Info{}, pigeon.NewError(pigeon.CodeInvalidArgument, "a deploy names who deploys")
	}
	if !ValidName(name) {
		return Info{}, invalid(checkManifest, "%q is not a program name (a-z, 0-9, '.', '_', '-'; at most 63)", name)
	}
	p, err := mg.locked(name, true)
	if err != nil {
		return Info{}, err
	}
	defer p.mu.Unlock()
	defer mg.forgetEmpty(p)
	defer p.snapshot()
	if err := p.check(pre); err != nil {
		return Info{}, err
	}
	return mg.deploy(ctx, p, by, man, module, 0)
}

// Rollback deploys an earlier version of the program name again, its
// module and manifest, as the next version: validated and swapped as
// Deploy does, audited program.rolled_back. version 0 is the version
// before the current one. A version whose module is no longer kept is
// PROGRAM_VERSION_PRUNED; one that never was, PROGRAM_NOT_FOUND. pre is
// checked first (see Precondition).
func (mg *Manager) Rollback(ctx context.Context, by *pigeon.Principal, name string, version int, pre ...Precondition) (Info, error) {
	if by == nil {
		return Info{}, pigeon.NewError(pigeon.CodeInvalidArgument, "a rollback names who rolls back")
	}
	p, err := mg.deployed(name)
	if err != nil {
		return Info{}, err
	}
	defer p.mu.Unlock()
	defer p.snapshot()
	if err := p.check(pre); err != nil {
		return Info{}, err
	}
	rev, err := p.info().RollbackTarget(version)
	if err != nil {
		return Info{}, err
	}
	module, err := mg.kv.Get(ctx, modules, moduleKey(name, rev.Version))
	if errors.Is(err, store.ErrNotFound) {
		return Info{}, pruned(name, rev.Version)
	}
	if err != nil {
		return Info{}, pigeon.WrapError(pigeon.CodeStoreUnavailable, err, "read program %s version %d", name, rev.Version)
	}
	if sum := sha256.Sum256(module); hex.EncodeToString(sum[:]) != rev.SHA256 {
		return Info{}, pigeon.NewError(pigeon.CodeStoreCorrupt, "the kept module of program %s version %d does not match its digest", name, rev.Version)
	}
	return mg.deploy(ctx, p, by, *rev.Manifest, module, rev.Version)
}

// RollbackTarget returns the earlier version a rollback to version
// deploys again (0: the one before the current version).
func (in Info) RollbackTarget(version int) (Revision, error) {
	if version < 0 {
		return Revision{}, pigeon.NewError(pigeon.CodeInvalidArgument, "a version is at least 1")
	}
	if version == 0 {
		if len(in.History) == 0 {
			return Revision{}, pigeon.NewError(pigeon.CodeInvalidArgument, "program %s has no earlier version", in.Name)
		}
		version = in.History[len(in.History)-1].Version
	}
	if version == in.Version {
		return Revision{}, pigeon.NewError(pigeon.CodeInvalidArgument, "version %d of program %s is the one running", version, in.Name)
	}
	for _, r := range in.History {
		if r.Version == version {
			if r.Pruned || r.Manifest == nil {
				return Revision{}, pruned(in.Name, version)
			}
			return r, nil
		}
	}
	if version < in.Version { // versions are numbered from 1: an earlier one dropped from the history
		return Revision{}, pruned(in.Name, version)
	}
	return Revision{}, pigeon.NewError(pigeon.CodeProgramNotFound, "program %s has no version %d", in.Name, version)
}

func pruned(name string, version int) error {
	return pigeon.NewError(pigeon.CodeProgramVersionPruned,
		"the module of version %d of program %s is no longer kept (only the last versions' are): deploy it again", version, name)
}

func moduleKey(name string, version int) string { return name + "@" + strconv.Itoa(version) }

// deploy binds module under man as p's next version (a rollback of
// rollbackOf when not 0). p.mu is held.
func (mg *Manager) deploy(ctx context.Context, p *program, by *pigeon.Principal, man Manifest, module []byte, rollbackOf int) (Info, error) {
	name := p.name
	number := p.rec.Version + 1
	refuse := func(err error) (Info, error) {
		_ = mg.e.Record(ctx, pigeon.EventProgramRefused, pigeon.ErrorCode(err), pigeon.AuditRecord{Principal: by.ID, Subject: logged(man.Route.Subject), Ref: "program:" + name + "@" + strconv.Itoa(number)})
		return Info{}, err
	}
	if err := man.normalize(); err != nil {
		return refuse(err)
	}
	res, err := mg.reserve(p, &man)
	if err != nil {
		return refuse(err)
	}
	defer mg.release(res)
	v, err := newVersion(ctx, mg, name, number, man, module)
	if err != nil {
		return refuse(err)
	}
	old := p.b
	nb := old
	handover := false
	if old == nil || !sameBinding(&old.cur.Load().man, &man) {
		if old != nil && old.tr != nil && old.tr.subject == man.Route.Subject {
			handover = true
			nb, err = mg.handover(ctx, p, old, v)
		} else {
			nb, err = mg.bind(ctx, p, v, nil)
		}
		if err != nil {
			v.retire(ctx)
			return refuse(invalidBind(err))
		}
	}
	rec := record{Name: name, Version: number, Manifest: man, Module: module, SHA256: v.sum, DeployedAt: time.Now().UTC(), DeployedBy: by.ID, RollbackOf: rollbackOf, History: p.rec.History}
	var prune []int
	if p.rec.Version > 0 {
		prev := p.rec.revision()
		man := p.rec.Manifest
		prev.Manifest = &man
		rec.History = append(slices.Clone(rec.History), prev)
		prune = rec.keep(mg.opts.KeepVersions)
		rec.trim(max(MaxHistory, mg.opts.KeepVersions-1))
		err = mg.kv.Put(ctx, modules, moduleKey(name, prev.Version), p.rec.Module)
		err = storeError(err, "keep the module of program %s version %d", name, prev.Version)
	}
	if err == nil {
		err = mg.save(ctx, rec)
	}
	if err != nil {
		// The new binding's contract is revoked with it: left live it
		// would stay usable, and counted among the account's contracts,
		// until it expired, one more at each deploy that fails here.
		switch {
		case nb == old:
			v.retire(ctx)
		case handover:
			nb.halt(ctx)
			v.retire(ctx)
			mg.resume(ctx, p, old, nb.from())
			nb.revoke(ctx)
		default:
			nb.stop(ctx)
			nb.revoke(ctx)
		}
		return refuse(err)
	}
	for _, n := range prune {
		mg.forget(ctx, modules, moduleKey(name, n))
	}
	event := pigeon.EventProgramDeployed
	switch {
	case old == nil:
	case nb == old:
		event = pigeon.EventProgramSwapped
		old.cur.Swap(v).retire(ctx)
	case handover:
		event = pigeon.EventProgramSwapped
		old.cur.Load().retire(ctx)
		old.revoke(ctx)
	default:
		event = pigeon.EventProgramSwapped
		old.stop(ctx)
		old.revoke(ctx)
	}
	if rollbackOf > 0 {
		event = pigeon.EventProgramRolledBack
	}
	mg.recorded(&p.rec, &rec, res)
	p.b, p.rec, p.err = nb, rec, ""
	if nb != old {
		nb.setLive(ctx, true)
	}
	mg.audit(ctx, event, pigeon.CodeOK, nb.caller, v)
	return p.info(), nil
}

// keep marks the earlier versions beyond the last keep versions (the
// current one included) pruned and returns those it marked.
func (r *record) keep(keep int) []int {
	var out []int
	for i := range max(len(r.History)-(keep-1), 0) {
		if !r.History[i].Pruned {
			r.History[i].Pruned = true
			out = append(out, r.History[i].Version)
		}
	}
	return out
}

// MaxHistory is how many earlier versions a program's history lists at
// least (more when Options.KeepVersions keeps more modules): the oldest
// beyond it are dropped, as pruned versions. Each holds its manifest (up
// to 64 KiB), and the whole record is rewritten at each deploy and read by
// every GET and at start: without a bound, redeploying a program again
// and again would grow it without end.
const MaxHistory = 100

// trim drops the oldest earlier versions beyond n, which keep (with n at
// least Options.KeepVersions - 1) has pruned already.
func (r *record) trim(n int) {
	if extra := len(r.History) - n; extra > 0 {
		r.History = slices.Delete(r.History, 0, extra)
	}
}

// invalidBind is a binding failure as a PROGRAM_INVALID refusal that
// keeps the engine's code in its details.
func invalidBind(err error) error {
	e := invalid(checkBind, "the program cannot be bound: %v", err)
	e.Details["cause"] = string(pigeon.ErrorCode(err))
	return e
}

// Get returns one program, or PROGRAM_NOT_FOUND. It shows the program as
// of its last change, without waiting for a deploy, rollback or removal
// in progress (which may wait for the deliveries in flight).
func (mg *Manager) Get(_ context.Context, name string) (Info, error) {
	p, err := mg.program(name, false)
	if err != nil {
		return Info{}, err
	}
	in := p.view.Load()
	if in == nil {
		return Info{}, notFound(name)
	}
	return *in, nil
}

// List returns every deployed program, by name.
func (mg *Manager) List(ctx context.Context) []Info {
	mg.mu.Lock()
	names := make([]string, 0, len(mg.progs))
	for n := range mg.progs {
		names = append(names, n)
	}
	mg.mu.Unlock()
	slices.Sort(names)
	out := make([]Info, 0, len(names))
	for _, n := range names {
		if in, err := mg.Get(ctx, n); err == nil {
			out = append(out, in)
		}
	}
	return out
}

// Remove unbinds a program (waiting for its deliveries in flight), drops
// it from the store and audits the removal. pre is checked first (see
// Precondition).
func (mg *Manager) Remove(ctx context.Context, by *pigeon.Principal, name string, pre ...Precondition) error {
	if by == nil {
		return pigeon.NewError(pigeon.CodeInvalidArgument, "a removal names who removes")
	}
	p, err := mg.deployed(name)
	if err != nil {
		return err
	}
	defer p.mu.Unlock()
	defer p.snapshot()
	if err := p.check(pre); err != nil {
		return err
	}
	if err := mg.kv.Delete(ctx, bucket, name); err != nil {
		return pigeon.WrapError(pigeon.CodeStoreUnavailable, err, "delete program %s", name)
	}
	if p.b != nil {
		p.b.stop(ctx)
		p.b.revoke(ctx)
	}
	for _, r := range p.rec.History {
		if !r.Pruned {
			mg.forget(ctx, modules, moduleKey(name, r.Version))
		}
	}
	mg.forget(ctx, positions, name)
	_ = mg.e.Record(ctx, pigeon.EventProgramRemoved, pigeon.CodeOK, pigeon.AuditRecord{Principal: by.ID, Subject: logged(p.rec.Manifest.Route.Subject), Ref: "program:" + name + "@" + strconv.Itoa(p.rec.Version)})
	mg.recorded(&p.rec, &record{}, nil)
	p.b, p.rec = nil, record{}
	mg.forgetEmpty(p)
	return nil
}

// Close unbinds every program, waiting for the deliveries in flight (or
// ctx), revokes their contracts and stops renewing bindings. It keeps the
// programs in the store. It is idempotent.
func (mg *Manager) Close(ctx context.Context) error {
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil
	}
	mg.closed = true
	progs := make([]*program, 0, len(mg.progs))
	for _, p := range mg.progs {
		progs = append(progs, p)
	}
	mg.mu.Unlock()
	mg.cancel()
	for _, p := range progs {
		p.mu.Lock()
		if p.b != nil {
			// Its contract is revoked too: left live it would stay usable,
			// and counted among its account's contracts, until it expired
			// (New negotiates fresh ones).
			p.b.stop(ctx)
			p.b.revoke(ctx)
		}
		p.mu.Unlock()
	}
	done := make(chan struct{})
	go func() { mg.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if mg.opts.Cache == nil {
		_ = mg.cache.Close(ctx)
	}
	return nil
}

// program returns the program name, creating an empty one when create.
func (mg *Manager) program(name string, create bool) (*program, error) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.closed {
		return nil, pigeon.NewError(pigeon.CodeShutdown, "the program manager is closed")
	}
	p := mg.progs[name]
	if p == nil {
		if !create {
			return nil, notFound(name)
		}
		p = &program{name: name}
		mg.progs[name] = p
		mg.names.add(name)
	}
	return p, nil
}

// locked returns the program name (created when create), locked: the
// caller unlocks p.mu. p is the one the Manager's table holds once its
// lock is taken. A program found before it was locked may have been
// dropped from the table meanwhile (its first deploy failed, it was
// removed: forgetEmpty, under its lock); a deploy on it would bind a
// program Get, List, Remove and Close never see, and a later deploy of
// the name a second one beside it. It is then looked up again.
func (mg *Manager) locked(name string, create bool) (*program, error) {
	for {
		p, err := mg.program(name, create)
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		mg.mu.Lock()
		closed, current := mg.closed, mg.progs[name] == p
		mg.mu.Unlock()
		switch {
		case closed:
			p.mu.Unlock()
			return nil, pigeon.NewError(pigeon.CodeShutdown, "the program manager is closed")
		case current:
			return p, nil
		}
		p.mu.Unlock()
	}
}

// deployed returns the program called name, locked (the caller unlocks
// p.mu), or PROGRAM_NOT_FOUND when it has no version.
func (mg *Manager) deployed(name string) (*program, error) {
	p, err := mg.locked(name, false)
	if err != nil {
		return nil, err
	}
	if p.rec.Version == 0 {
		p.mu.Unlock()
		return nil, notFound(name)
	}
	return p, nil
}

// forgetEmpty drops p from the table when it holds no version (a first
// deploy that failed, a removal). p.mu is held.
func (mg *Manager) forgetEmpty(p *program) {
	if p.rec.Version != 0 {
		return
	}
	mg.mu.Lock()
	if mg.progs[p.name] == p {
		delete(mg.progs, p.name)
		mg.names.remove(p.name)
	}
	mg.mu.Unlock()
}

func notFound(name string) error {
	return pigeon.NewError(pigeon.CodeProgramNotFound, "no program %q is deployed", name)
}

func (mg *Manager) save(ctx context.Context, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return pigeon.WrapError(pigeon.CodeInternal, err, "encode program %s", rec.Name)
	}
	return storeError(mg.kv.Put(ctx, bucket, rec.Name, b), "store program %s", rec.Name)
}

// forget deletes a key of the KV; a failure is only logged (what is left
// is unused).
func (mg *Manager) forget(ctx context.Context, bkt, key string) {
	if err := mg.kv.Delete(ctx, bkt, key); err != nil {
		mg.log.Warn("program data not deleted", "bucket", bkt, "key", key, "error", err)
	}
}

// storeError is a KV write's error with the engine's code (nil for nil).
func storeError(err error, format string, args ...any) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrFull):
		return pigeon.WrapError(pigeon.CodeStoreFull, err, format, args...)
	}
	return pigeon.WrapError(pigeon.CodeStoreUnavailable, err, format, args...)
}

// audit records ev for version v running under caller.
func (mg *Manager) audit(ctx context.Context, ev pigeon.Event, code pigeon.Code, caller pigeon.Caller, v *version) {
	_ = mg.e.Record(context.WithoutCancel(ctx), ev, code, pigeon.AuditRecord{
		Principal: caller.Principal.ID, ContractID: caller.ContractID, Subject: v.man.Route.Subject, Ref: v.ref(),
	})
}

// sleep waits d or until Close; false means closed.
func (mg *Manager) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-mg.ctx.Done():
		return false
	}
}

func (r *record) revision() Revision {
	return Revision{Version: r.Version, SHA256: r.SHA256, Size: len(r.Module), DeployedAt: r.DeployedAt, DeployedBy: r.DeployedBy, RollbackOf: r.RollbackOf}
}

// snapshot sets what Get and List show of p: nothing while it holds no
// version. p.mu is held.
func (p *program) snapshot() {
	if p.rec.Version == 0 {
		p.view.Store(nil)
		return
	}
	in := p.info()
	p.view.Store(&in)
}

// info is p as the API shows it. p.mu is held.
func (p *program) info() Info {
	in := Info{Name: p.name, Manifest: p.rec.Manifest, Revision: p.rec.revision(), Bound: p.b != nil, Error: p.err, History: p.rec.History}
	if p.b != nil {
		in.ContractID = p.b.caller.ContractID
	}
	return in
}
