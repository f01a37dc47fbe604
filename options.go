package pigeon

import (
	"log/slog"
	"math"
	"time"

	"pigeon/store"
)

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
