package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pigeon/store"
)

// Options configure a Store. The zero value (or nil) is usable: prefix
// PIGEON, one replica, file storage, node id "node".
type Options struct {
	// Prefix starts every stream, bucket and NATS subject the store uses
	// (default "PIGEON"). Letters, digits and '_' only; NATS subjects
	// carry it in lower case, so Open refuses one that differs only in
	// case from a prefix the account holds.
	Prefix string
	// Replicas is the replication factor of every stream and bucket the
	// store creates (default 1; 3 or 5 in a cluster).
	Replicas int
	// Memory keeps streams in memory instead of files (tests only: it is
	// not durable).
	Memory bool
	// Node names this node's audit chain (default "node"). Every node of a
	// cluster needs its own: letters, digits, '-' and '_', differing from
	// the others in more than case.
	Node string
	// Timeout bounds each JetStream request (default 5 s). A request that
	// times out because the stream has no quorum fails with
	// store.ErrNoQuorum.
	Timeout time.Duration
	// Liveness is how long a node that stopped confirming (a killed or
	// partitioned node) is still waited for by another node's revocation
	// (default 3 s; see Cluster.Barrier). A node confirms at least every
	// third of it, and its engine stops authorizing two thirds of it after
	// its last confirmation that succeeded (Cluster.CurrentUntil): before
	// the others stop waiting for it; and, should its watch stall while
	// it confirms, Liveness after the last read of the directory's and
	// the contracts' last entries (made every beat) its watch applied.
	Liveness time.Duration
	// BarrierTimeout bounds how long a revocation waits for every live
	// node to confirm it (default 5 s); then it fails with
	// CLUSTER_UNCONFIRMED, the change made all the same.
	BarrierTimeout time.Duration
}

// Store is a store.Store on JetStream. Open it with Open or Connect.
type Store struct {
	nc     *nats.Conn
	ownNC  bool
	js     jetstream.JetStream
	opts   Options
	pfx    string // lower-case prefix for NATS subjects
	closed atomic.Bool

	ids, idem, progress, quarantine, contracts, kv jetstream.KeyValue
	// claimGrace is how long an idempotency claim outlives its window
	// (claimTTL); tests shorten it.
	claimGrace time.Duration
	// chainRaced, when set (tests), runs in each ChainAudit try between
	// reading the chain's head and publishing after it.
	chainRaced func()
	// trimRead and trimPurged, when set (tests), run in each step of a
	// message trim: after it read its messages, and after it purged them
	// (before it frees their ids entries).
	trimRead, trimPurged func()
	// auditTrimRaced, when set (tests), runs in each TrimAuditBefore try
	// between reading the checkpoint and writing it.
	auditTrimRaced func()
	// idDebt holds the ids entries trims could not free (trim.go), for
	// the next trim to free.
	debtMu sync.Mutex
	idDebt []idEntry
	audit  jetstream.Stream
	// auditCP is the <P>_audit bucket: each node's audit checkpoint under
	// its name. trimMu makes this store's audit trims take turns.
	auditCP jetstream.KeyValue
	trimMu  sync.Mutex

	mu      sync.Mutex
	streams map[string]jetstream.Stream // message streams by Pigeon subject
	tallies map[string]*tally           // retained bytes by Pigeon subject (bytes.go)

	// dirRev is the highest revision this node wrote of the access
	// directory's keys, conRev that of the revoked contracts it wrote or
	// read (GetContract): what a barrier waits for the other nodes to
	// have applied.
	dirRev, conRev atomic.Uint64
	// dirSeen is, per directory bucket, the highest revision its lists
	// have seen since the Cluster's watch last reset it: the replica that
	// answered had every revision up to it (see Cluster.applyDirectory).
	seenMu  sync.Mutex
	dirSeen dirRevs
	// dirFloor is, per directory bucket, the highest revision this node
	// knows of (written, watched or read): a list answered by a replica
	// behind it is not returned (see directoryValues).
	dirFloor dirRevs
	// rechecked is when recheck last found every bucket and the audit
	// stream as Open requires them (Unix nanoseconds; 0: not yet).
	rechecked atomic.Int64
	// sweep frees the ids entries no trim will (sweep.go).
	sweep idSweep
}

var (
	_ store.Store             = (*Store)(nil)
	_ store.Trimmer           = (*Store)(nil)
	_ store.SeqTrimmer        = (*Store)(nil)
	_ store.AuditTrimmer      = (*Store)(nil)
	_ store.QuarantineTrimmer = (*Store)(nil)
	_ store.ContractLister    = (*Store)(nil)
	_ store.AuditChainer      = (*Store)(nil)
	_ store.BatchProgress     = (*Store)(nil)
)

// Connect dials urls (comma-separated, as nats.Connect takes them) with
// the given NATS options and opens the store on that connection, which the
// store closes on Close. An unreachable cluster fails with an error naming
// the URLs, their passwords left out (RedactedURLs).
func Connect(ctx context.Context, urls string, opts *Options, natsOpts ...nats.Option) (*Store, error) {
	natsOpts = append([]nats.Option{nats.Name("pigeon"), nats.MaxReconnects(-1)}, natsOpts...)
	nc, err := nats.Connect(urls, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: cannot reach NATS at %s: %w", RedactedURLs(urls), err)
	}
	s, err := Open(ctx, nc, opts)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.ownNC = true
	return s, nil
}

// Open opens the store on an existing connection, which stays the
// caller's. It creates the buckets and this node's audit stream when they
// are missing and refuses, naming the reason, any that another tool
// changed in a way the store cannot work with.
func Open(ctx context.Context, nc *nats.Conn, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = "PIGEON"
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Node == "" {
		o.Node = "node"
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Liveness <= 0 {
		o.Liveness = 3 * time.Second
	}
	if o.BarrierTimeout <= 0 {
		o.BarrierTimeout = 5 * time.Second
	}
	if !validName(o.Prefix, false) {
		return nil, fmt.Errorf("jetstream: prefix %q: use letters, digits and '_'", o.Prefix)
	}
	if !validName(o.Node, true) {
		return nil, fmt.Errorf("jetstream: node %q: use letters, digits, '-' and '_'", o.Node)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.Timeout))
	if err != nil {
		return nil, err
	}
	s := &Store{nc: nc, js: js, opts: o, pfx: strings.ToLower(o.Prefix), streams: map[string]jetstream.Stream{}, tallies: map[string]*tally{}, claimGrace: claimGrace}
	ctx, cancel := context.WithTimeout(ctx, 4*o.Timeout)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return nil, fmt.Errorf("jetstream: JetStream at %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	if err := s.checkCase(ctx); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		kv   *jetstream.KeyValue
		name string
	}{
		{&s.ids, "ids"}, {&s.idem, "idem"}, {&s.progress, "progress"},
		{&s.quarantine, "quarantine"}, {&s.contracts, "contracts"}, {&s.kv, "kv"}, {&s.auditCP, auditBucket},
	} {
		if *b.kv, err = s.bucket(ctx, b.name); err != nil {
			return nil, err
		}
	}
	if s.audit, err = s.ensureStream(ctx, s.auditStream(o.Node), s.auditSubject(o.Node), nil); err != nil {
		return nil, err
	}
	if err := s.checkStreams(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close releases the store (and the connection, when Connect made it). It
// is idempotent. Nothing is deleted from JetStream.
func (s *Store) Close(ctx context.Context) error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownNC {
		s.nc.Close()
	}
	return nil
}

// Conn returns the store's NATS connection.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Prefix returns the prefix of every stream and bucket of the store.
func (s *Store) Prefix() string { return s.opts.Prefix }

// begin is the check at the start of every method.
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

func (s *Store) bucketName(name string) string { return s.opts.Prefix + "_" + name }

// bucket opens or creates one KV bucket and checks that its stream can
// keep what the store puts there.
func (s *Store) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	full := s.bucketName(name)
	kv, err := s.js.KeyValue(ctx, full)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		cfg := jetstream.KeyValueConfig{Bucket: full, History: 1, Storage: s.storage(), Replicas: s.opts.Replicas}
		if name == "idem" {
			// Claims carry a per-key TTL (claimIdem): a key is gone from
			// the bucket once its claim has expired.
			cfg.LimitMarkerTTL = idemMarkerTTL
		}
		kv, err = s.js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = s.js.KeyValue(ctx, full)
		}
	}
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("jetstream: bucket %s: %w", full, err))
	}
	st, err := s.js.Stream(ctx, "KV_"+full)
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("jetstream: bucket %s: %w", full, err))
	}
	if reason := incompatible(st.CachedInfo().Config); reason != "" {
		return nil, fmt.Errorf("jetstream: bucket %s (stream KV_%s) was changed and cannot be used: %s", full, full, reason)
	}
	return kv, nil
}

// ensureStream opens or creates a stream on one subject filter and
// refuses one whose configuration would lose or misplace records.
func (s *Store) ensureStream(ctx context.Context, name, subject string, meta map[string]string) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{subject}, Storage: s.storage(), Replicas: s.opts.Replicas,
			Retention: jetstream.LimitsPolicy, Discard: jetstream.DiscardNew,
			MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1, AllowDirect: true, Duplicates: 2 * time.Minute,
			Metadata: meta,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			st, err = s.js.Stream(ctx, name)
		}
	}
	if err != nil {
		return nil, s.fail(ctx, fmt.Errorf("jetstream: stream %s: %w", name, err))
	}
	cfg := st.CachedInfo().Config
	if reason := incompatibleStream(cfg); reason != "" {
		return nil, fmt.Errorf("jetstream: stream %s was changed and cannot be used: %s", name, reason)
	}
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != subject {
		return nil, fmt.Errorf("jetstream: stream %s was changed and cannot be used: subjects are %v, want [%s]", name, cfg.Subjects, subject)
	}
	return st, nil
}

// bucketNames are the KV buckets of a prefix: the store's (the first
// seven) and the Cluster's.
var bucketNames = []string{"ids", "idem", "progress", "quarantine", "contracts", "kv", auditBucket, "leases", "replies", "applied"}

// checkCase refuses a prefix or node that differs only in case from one
// already in the account. The NATS subjects of the store are the prefix
// in lower case, so two prefixes that differ only in case share every
// message and audit subject (JetStream then refuses, one subject at a
// time, the streams of whichever comes second) and the cluster's event
// subject; and a file system that ignores case (macOS, Windows) takes
// stream names that differ only in case for one directory, a node's
// audit stream too. It lists the account's stream names once, at Open:
// two such deployments started at the very same moment may both pass,
// and the next Open of either is refused.
func (s *Store) checkCase(ctx context.Context) error {
	ours := map[string]string{} // lower case -> as named
	for _, b := range bucketNames {
		n := "KV_" + s.bucketName(b)
		ours[strings.ToLower(n)] = n
	}
	audit := s.auditStream(s.opts.Node)
	ours[strings.ToLower(audit)] = audit
	l := s.js.StreamNames(ctx)
	for name := range l.Name() {
		own, ok := ours[strings.ToLower(name)]
		switch {
		case !ok || own == name:
		case own == audit:
			return fmt.Errorf("jetstream: node %q: stream %s is the audit stream of a node whose name differs only in case; give every node a name that differs in more than case", s.opts.Node, name)
		default:
			return fmt.Errorf("jetstream: prefix %q: stream %s is of a prefix that differs only in case; both would use the NATS subjects %s.>, give each deployment a prefix that differs in more than case", s.opts.Prefix, name, s.pfx)
		}
	}
	if err := l.Err(); err != nil {
		return s.fail(ctx, fmt.Errorf("jetstream: listing streams: %w", err))
	}
	return nil
}

// checkStreams refuses message and audit streams of the prefix that
// another tool changed in a way the store cannot work with.
func (s *Store) checkStreams(ctx context.Context) error {
	for _, kind := range []string{".m.>", ".a.*"} {
		l := s.js.ListStreams(ctx, jetstream.WithStreamListSubject(s.pfx+kind))
		for info := range l.Info() {
			if reason := incompatibleStream(info.Config); reason != "" {
				return fmt.Errorf("jetstream: stream %s was changed and cannot be used: %s", info.Config.Name, reason)
			}
		}
		if err := l.Err(); err != nil {
			return s.fail(ctx, fmt.Errorf("jetstream: listing streams: %w", err))
		}
	}
	return nil
}

// recheckEvery is how often, at most, recheck reads the configuration of
// the buckets and the audit stream again.
const recheckEvery = time.Minute

// recheck refuses, as Open does, the store's buckets and this node's
// audit stream when another tool changed them since in a way that drops
// records behind the broker's back (drops: a limit, a max age, another
// retention). The calls of
// the engine's retention sweep (TrimBefore, TrimThrough, TrimAuditBefore,
// TrimQuarantineBefore, DeleteExpiredContracts) make it, so a change made
// while the broker runs is reported, and logged by the broker, within a
// sweep and a minute, for the cost of one stream info request per bucket
// a minute. A message stream is checked by its trim, which reads its
// configuration anyway. The publish path reads no configuration: between
// two sweeps, or with no retention configured, a change goes unseen until
// the next sweep or start.
func (s *Store) recheck(ctx context.Context) error {
	if last := s.rechecked.Load(); last != 0 && time.Since(time.Unix(0, last)) < recheckEvery {
		return nil
	}
	for _, b := range bucketNames[:7] {
		name := "KV_" + s.bucketName(b)
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			return s.fail(ctx, fmt.Errorf("jetstream: stream %s: %w", name, err))
		}
		if reason := drops(st.CachedInfo().Config); reason != "" {
			return fmt.Errorf("jetstream: bucket %s (stream %s) was changed and cannot be used: %s", s.bucketName(b), name, reason)
		}
	}
	info, err := s.audit.Info(ctx)
	if err != nil {
		return s.fail(ctx, err)
	}
	if reason := dropsStream(info.Config); reason != "" {
		return fmt.Errorf("jetstream: stream %s was changed and cannot be used: %s", info.Config.Name, reason)
	}
	s.rechecked.Store(time.Now().UnixNano())
	return nil
}

// incompatible says why a stream cannot hold the store's records, or "".
func incompatible(cfg jetstream.StreamConfig) string {
	if reason := drops(cfg); reason != "" {
		return reason
	}
	switch {
	case cfg.Sealed || cfg.DenyPurge:
		return "the stream is sealed or denies purges"
	case cfg.NoAck:
		return "publishes are not acknowledged"
	}
	return ""
}

// drops says why a stream would drop records behind the broker's back, or
// "": what recheck looks for while the store runs. The other changes
// incompatible refuses make the store's own requests fail.
func drops(cfg jetstream.StreamConfig) string {
	switch {
	case cfg.Retention != jetstream.LimitsPolicy:
		return fmt.Sprintf("retention is %s, want limits (records must stay until the broker trims them)", cfg.Retention)
	case cfg.MaxAge != 0:
		return fmt.Sprintf("max age is %s, want none (records would expire behind the broker's back)", cfg.MaxAge)
	case cfg.MaxMsgs > 0 || cfg.MaxBytes > 0:
		return "a message or byte limit is set (records would be dropped behind the broker's back)"
	}
	return ""
}

// incompatibleStream says why a message or audit stream cannot hold the
// store's records, or "": what incompatible says of any stream, and a
// limit of messages per NATS subject, which a KV bucket has (its history)
// but which would drop an audit chain's batches (all on one subject) as
// new ones come.
func incompatibleStream(cfg jetstream.StreamConfig) string {
	if reason := perSubject(cfg); reason != "" {
		return reason
	}
	return incompatible(cfg)
}

// dropsStream is drops of a message or audit stream.
func dropsStream(cfg jetstream.StreamConfig) string {
	if reason := perSubject(cfg); reason != "" {
		return reason
	}
	return drops(cfg)
}

func perSubject(cfg jetstream.StreamConfig) string {
	if cfg.MaxMsgsPerSubject > 0 {
		return fmt.Sprintf("a limit of %d messages per subject is set (records would be dropped behind the broker's back)", cfg.MaxMsgsPerSubject)
	}
	return ""
}

func (s *Store) storage() jetstream.StorageType {
	if s.opts.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// Names of streams and subjects. Pigeon subjects and ids are encoded so
// that any string is a valid NATS token and stream name.
func (s *Store) msgStream(subject string) string {
	return s.opts.Prefix + "_M_" + s.subjectToken(subject)
}
func (s *Store) msgSubject(subject, id string) string {
	return s.pfx + ".m." + s.subjectToken(subject) + "." + token(id)
}
func (s *Store) msgFilter(subject string) string {
	return s.pfx + ".m." + s.subjectToken(subject) + ".*"
}

// maxStreamName is the longest stream name JetStream takes.
const maxStreamName = 255

// metaSubject is the stream metadata key that holds, in hex, the subject
// of a message stream named by its subject's hash.
const metaSubject = "pigeon-subject"

// subjectToken names subject in its stream's name and NATS subjects: its
// hex, or, when that would make the stream's name longer than JetStream
// takes, "h" and the hex of its SHA-256 (never a hex, which has no 'h'),
// the subject then kept in the stream's metadata (subjectMeta).
func (s *Store) subjectToken(subject string) string {
	if len(s.opts.Prefix)+len("_M_")+2*len(subject) <= maxStreamName {
		return hex.EncodeToString([]byte(subject))
	}
	sum := sha256.Sum256([]byte(subject))
	return "h" + hex.EncodeToString(sum[:])
}

// subjectMeta is the metadata of subject's message stream: its name when
// the stream's name does not hold it.
func (s *Store) subjectMeta(subject string) map[string]string {
	if !strings.HasPrefix(s.subjectToken(subject), "h") {
		return nil
	}
	return map[string]string{metaSubject: hex.EncodeToString([]byte(subject))}
}
func (s *Store) auditStream(node string) string { return s.opts.Prefix + "_A_" + node }
func (s *Store) auditSubject(node string) string {
	return s.pfx + ".a." + node
}

// token encodes any string as a non-empty NATS token and KV key.
func token(v string) string { return "k" + base64.RawURLEncoding.EncodeToString([]byte(v)) }

func validName(v string, dash bool) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		ok := r == '_' || (dash && r == '-') || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}

// errCodeMsgIDInProcess is JetStream's JSStreamDuplicateMessageConflict
// (409): a publish came with the deduplication id of one the stream is
// still proposing, which may yet be kept or lost.
const errCodeMsgIDInProcess jetstream.ErrorCode = 10158

// fail maps a JetStream failure to the store's errors: no quorum (no
// response from the stream, a request that timed out, or a retry finding
// its first try still being proposed, which a stream without its quorum
// does not settle) becomes store.ErrNoQuorum; when the caller's ctx
// ended, the error stays the context's.
func (s *Store) fail(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil || errors.Is(err, store.ErrNoQuorum) || errors.Is(err, context.Canceled) {
		return err
	}
	var api *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.As(err, &api) && (api.Code == 503 || api.ErrorCode == errCodeMsgIDInProcess):
		return fmt.Errorf("%w: %w", store.ErrNoQuorum, err)
	}
	return err
}

// direct runs a read that JetStream may answer with a direct get. A
// stream that was just created, or whose leader just moved, may have no
// direct-get responder for a moment: direct retries the read for up to
// Options.Timeout before giving up.
func direct[T any](ctx context.Context, timeout time.Duration, read func() (T, error)) (T, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := read()
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// RedactedURLs is urls (NATS URLs separated by commas, as nats.Connect
// takes them) with the password of each URL's user info left out
// (url.URL.Redacted), for errors, logs and banners that name a cluster
// without its credentials. A part that does not parse as a URL is kept.
func RedactedURLs(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
