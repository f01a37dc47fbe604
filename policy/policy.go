// Package policy is the broker's policy catalog: the subject policy types,
// loading a catalog from JSON and YAML files (LoadDir, LoadFS,
// ParseSubject) and checking it (Lint, LintDir, LintFS). It does not import
// package pigeon: the broker imports it, aliases the types it takes in its
// Options, and lints every catalog it registers.
package policy

import "encoding/json"

// Operation is something a contract can permit on a subject.
type Operation string

// Operations a rule can allow or deny.
const (
	OpPublish Operation = "publish"
	OpReceive Operation = "receive"
	OpAck     Operation = "ack"
	OpReplay  Operation = "replay"
)

// Operations lists every operation in contract order. It is the one
// operation table: an operation's position in it is its Index.
var Operations = []Operation{OpPublish, OpReceive, OpAck, OpReplay}

// Index returns op's position in Operations, or -1 when op is not an
// operation.
func (op Operation) Index() int {
	for i, o := range Operations {
		if o == op {
			return i
		}
	}
	return -1
}

// Valid reports whether op is one of Operations.
func (op Operation) Valid() bool { return op.Index() >= 0 }

// Mode is how a subject delivers.
type Mode string

// Delivery modes.
const (
	ModePubSub       Mode = "pubsub"
	ModeWorkQueue    Mode = "workQueue"
	ModeRequestReply Mode = "requestReply"
)

// SubjectPolicy is one subject's policy in the catalog format of the
// reference broker, plus the extensions documented in docs/policy.md. It is
// plain data: the broker compiles it once per version.
type SubjectPolicy struct {
	Name         string                   `json:"name" yaml:"name"`
	Version      string                   `json:"version" yaml:"version"`
	Mode         Mode                     `json:"mode" yaml:"mode"`
	Intents      []string                 `json:"intents" yaml:"intents"`
	Schema       *SchemaRef               `json:"schema,omitempty" yaml:"schema,omitempty"`
	RegionPolicy RegionPolicy             `json:"regionPolicy" yaml:"regionPolicy"`
	Delivery     DeliveryPolicy           `json:"delivery" yaml:"delivery"`
	Replay       ReplayPolicy             `json:"replay" yaml:"replay"`
	Retention    RetentionPolicy          `json:"retention" yaml:"retention"`
	Data         DataPolicy               `json:"data" yaml:"data"`
	Quarantine   QuarantinePolicy         `json:"quarantine" yaml:"quarantine"`
	Policy       map[Operation][]RuleSpec `json:"policy" yaml:"policy"`
	RateLimit    *RateLimitPolicy         `json:"rateLimit,omitempty" yaml:"rateLimit,omitempty"`
	Rules        []QualityRule            `json:"rules,omitempty" yaml:"rules,omitempty"`
	Integrity    IntegrityPolicy          `json:"integrity,omitempty" yaml:"integrity,omitempty"`
}

// SchemaRef names the JSON schema of a subject's data.
type SchemaRef struct {
	Name          string `json:"name" yaml:"name"`
	Compatibility string `json:"compatibility,omitempty" yaml:"compatibility,omitempty"`
}

// RegionPolicy is where a subject's data may live. With CrossRegion "deny",
// a message's region must also equal the publishing session's region.
type RegionPolicy struct {
	Home           string   `json:"home,omitempty" yaml:"home,omitempty"`
	AllowedRegions []string `json:"allowedRegions,omitempty" yaml:"allowedRegions,omitempty"`
	CrossRegion    string   `json:"crossRegion,omitempty" yaml:"crossRegion,omitempty"`
}

// DeliveryPolicy governs retries, leases and idempotency.
type DeliveryPolicy struct {
	Retry       RetryPolicy       `json:"retry" yaml:"retry"`
	Idempotency IdempotencyPolicy `json:"idempotency" yaml:"idempotency"`
	// AckWaitMs is the lease of a work-queue delivery (default 30 s).
	AckWaitMs int64 `json:"ackWaitMs,omitempty" yaml:"ackWaitMs,omitempty"`
}

// RetryPolicy says how often and how fast a failed delivery is retried.
type RetryPolicy struct {
	MaxAttempts int    `json:"maxAttempts,omitempty" yaml:"maxAttempts,omitempty"`
	Backoff     string `json:"backoff,omitempty" yaml:"backoff,omitempty"`
	MaxDelayMs  int64  `json:"maxDelayMs,omitempty" yaml:"maxDelayMs,omitempty"`
}

// IdempotencyPolicy says whether a key is required and how long it dedups.
type IdempotencyPolicy struct {
	Required bool   `json:"required,omitempty" yaml:"required,omitempty"`
	Key      string `json:"key,omitempty" yaml:"key,omitempty"`
	TTLMs    int64  `json:"ttlMs,omitempty" yaml:"ttlMs,omitempty"`
}

// ReplayPolicy governs replay of retained messages.
type ReplayPolicy struct {
	Allowed       bool  `json:"allowed" yaml:"allowed"`
	RequireReason bool  `json:"requireReason,omitempty" yaml:"requireReason,omitempty"`
	MaxAgeMs      int64 `json:"maxAgeMs,omitempty" yaml:"maxAgeMs,omitempty"`
}

// RetentionPolicy says how long messages and audit records are kept, and
// how many messages and bytes of them at most.
type RetentionPolicy struct {
	MessagesMs int64 `json:"messagesMs,omitempty" yaml:"messagesMs,omitempty"`
	AuditMs    int64 `json:"auditMs,omitempty" yaml:"auditMs,omitempty"`
	// MaxMessages is the most messages the subject keeps (0: no bound).
	// Each retention pass trims the oldest beyond it, and so does a trim
	// in the background once the subject passes it by a slack
	// (MaxMessages/8, at least 32): see docs/policy.md.
	MaxMessages int64 `json:"maxMessages,omitempty" yaml:"maxMessages,omitempty"`
	// MaxBytes is the most bytes of stored messages the subject keeps (0:
	// no bound), measured as the sum of the stored envelopes' lengths
	// (store.ByteTrimmer). The oldest messages beyond it are trimmed, by
	// each retention pass and in the background past a slack (MaxBytes/8,
	// at least 64 KiB); a message whose envelope alone is larger is
	// refused.
	MaxBytes int64 `json:"maxBytes,omitempty" yaml:"maxBytes,omitempty"`
}

// DataPolicy classifies a subject's data and names sensitive fields (dot
// paths into data).
type DataPolicy struct {
	Classification  string   `json:"classification,omitempty" yaml:"classification,omitempty"`
	Encryption      string   `json:"encryption,omitempty" yaml:"encryption,omitempty"`
	Tokenization    string   `json:"tokenization,omitempty" yaml:"tokenization,omitempty"`
	ForbiddenFields []string `json:"forbiddenFields,omitempty" yaml:"forbiddenFields,omitempty"`
	TokenizedFields []string `json:"tokenizedFields,omitempty" yaml:"tokenizedFields,omitempty"`
	// RoutingFields stay in clear when data is sealed end to end. With
	// Encryption "required", a list (empty included) enforces the seal and
	// no list does not: an empty list is written out (MarshalJSON).
	RoutingFields []string `json:"routingFields,omitempty" yaml:"routingFields,omitempty"`
}

// MarshalJSON writes d as its fields say, but an empty, non-nil
// RoutingFields as [] where omitempty would leave it out: it means
// something a missing list does not (end-to-end encryption enforced), so
// a policy written out and read back must keep it.
func (d DataPolicy) MarshalJSON() ([]byte, error) {
	type plain DataPolicy
	if d.RoutingFields == nil || len(d.RoutingFields) > 0 {
		return json.Marshal(plain(d))
	}
	return json.Marshal(struct {
		plain
		RoutingFields []string `json:"routingFields"`
	}{plain(d), d.RoutingFields})
}

// QuarantinePolicy says which refusals keep a redacted copy.
type QuarantinePolicy struct {
	OnSchemaViolation bool `json:"onSchemaViolation,omitempty" yaml:"onSchemaViolation,omitempty"`
	OnPolicyViolation bool `json:"onPolicyViolation,omitempty" yaml:"onPolicyViolation,omitempty"`
	OnHandlerFailure  bool `json:"onHandlerFailure,omitempty" yaml:"onHandlerFailure,omitempty"`
}

// Effect of a rule.
const (
	EffectAllow = "allow"
	EffectDeny  = "deny"
)

// RuleSpec allows or denies one operation to matching principals. Empty
// lists match everything; "*" in Principals matches any principal.
type RuleSpec struct {
	Effect        string            `json:"effect" yaml:"effect"`
	Principals    []string          `json:"principals,omitempty" yaml:"principals,omitempty"`
	Roles         []string          `json:"roles,omitempty" yaml:"roles,omitempty"`
	Intents       []string          `json:"intents,omitempty" yaml:"intents,omitempty"`
	Regions       []string          `json:"regions,omitempty" yaml:"regions,omitempty"`
	Attributes    map[string]string `json:"attributes,omitempty" yaml:"attributes,omitempty"`
	RequireReason bool              `json:"requireReason,omitempty" yaml:"requireReason,omitempty"`
	// When is a CEL condition over principal and message; see docs/policy.md.
	When string `json:"when,omitempty" yaml:"when,omitempty"`
}

// RateLimitPolicy is a token bucket per (subject, principal).
type RateLimitPolicy struct {
	PerSecond float64 `json:"perSecond" yaml:"perSecond"`
	Burst     int     `json:"burst" yaml:"burst"`
}

// QualityRule is a subject-level data-quality rule in CEL.
type QualityRule struct {
	Name      string `json:"name" yaml:"name"`
	Expr      string `json:"expr" yaml:"expr"`
	OnFailure string `json:"onFailure,omitempty" yaml:"onFailure,omitempty"` // deny | quarantine
	Code      string `json:"code,omitempty" yaml:"code,omitempty"`
}

// IntegrityPolicy says whether messages must be signed.
type IntegrityPolicy struct {
	Signature string `json:"signature,omitempty" yaml:"signature,omitempty"` // required | optional
}

// PolicyID is name@version.
func (p *SubjectPolicy) PolicyID() string { return p.Name + "@" + p.Version }

// Catalog is a set of subject policies and the JSON schemas they name.
type Catalog struct {
	Subjects []SubjectPolicy
	// Schemas maps a schema name to its JSON text.
	Schemas map[string][]byte
	// Sources records the file each subject and schema came from (set by
	// LoadDir and LoadFS; empty for catalogs built in code). Lint, and the
	// broker when it refuses a catalog, name the file of each problem
	// from it.
	Sources Sources
}
