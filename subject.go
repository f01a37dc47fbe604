package pigeon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"pigeon/internal/cond"
	"pigeon/internal/datapath"
	"pigeon/internal/schema"
)

// Defaults of a subject's delivery settings.
const (
	DefaultAckWait        = 30 * time.Second
	DefaultIdempotencyTTL = 24 * time.Hour
	DefaultMaxAttempts    = 5
)

// subject is one subject policy compiled once per version. It is immutable
// after compile and shared by every contract compiled from it.
type subject struct {
	policy    SubjectPolicy
	name      string
	policyID  string
	schemaID  string
	digest    string
	mode      Mode
	intents   []string
	forbidden []datapath.Path
	tokenized []datapath.Path
	redact    []datapath.Path
	schema    *schema.Schema
	rules     map[Operation][]*rule
	quality   []*qualityRule
	idemTTL   time.Duration
	ackWait   time.Duration
	maxAtt    int
	maxDelay  time.Duration
	backoff   string
	replayAge time.Duration
	rate      *RateLimitPolicy
	idemPath  *datapath.Path  // non-nil when the key is a "data." path
	e2e       bool            // end-to-end encryption enforced
	treeData  bool            // a publish's data is read as a tree (Engine.wantsTree): a data-quality rule, a publish condition or e2e
	routing   map[string]bool // fields that stay in clear beside the sealed part
	bounds    *trimBounds     // retention.maxMessages and maxBytes; nil without
	maxBytes  int             // retention.maxBytes, as an int (0: no bound)
}

// rule is a compiled RuleSpec.
type rule struct {
	deny          bool
	anyPrincipal  bool
	principals    []string
	roles         []string
	intents       []string
	regions       []string
	attributes    map[string]string
	requireReason bool
	when          *cond.Condition
}

type qualityRule struct {
	name       string
	quarantine bool
	code       Code
	cond       *cond.Condition
}

// compileSubject compiles p against the catalog's schemas.
func compileSubject(p SubjectPolicy, schemas map[string][]byte) (*subject, error) {
	if p.Name == "" {
		return nil, NewError(CodePolicyInvalid, "subject without a name")
	}
	if p.Version == "" {
		return nil, NewError(CodePolicyInvalid, "subject %s: version is required", p.Name)
	}
	s := &subject{
		policy:   p,
		name:     p.Name,
		policyID: p.PolicyID(),
		mode:     p.Mode,
		intents:  slices.Clone(p.Intents),
		rules:    map[Operation][]*rule{},
		rate:     p.RateLimit,
		bounds:   newTrimBounds(p.Retention.MaxMessages, p.Retention.MaxBytes),
		maxBytes: int(min(max(p.Retention.MaxBytes, 0), math.MaxInt)),
	}
	if s.mode == "" {
		s.mode = ModePubSub
	}
	switch s.mode {
	case ModePubSub, ModeWorkQueue, ModeRequestReply:
	default:
		return nil, NewError(CodePolicyInvalid, "subject %s: unknown mode %q", p.Name, p.Mode)
	}
	for _, f := range p.Data.ForbiddenFields {
		s.forbidden = append(s.forbidden, datapath.Parse(f))
	}
	for _, f := range p.Data.TokenizedFields {
		s.tokenized = append(s.tokenized, datapath.Parse(f))
	}
	s.redact = append(slices.Clone(s.forbidden), s.tokenized...)
	if p.Data.Encryption == "required" && p.Data.RoutingFields != nil {
		s.e2e = true
		s.routing = map[string]bool{}
		for _, f := range p.Data.RoutingFields {
			s.routing[f] = true
		}
	}
	digest := sha256.New()
	pj, _ := json.Marshal(p)
	digest.Write(pj)
	if p.Schema != nil && p.Schema.Name != "" {
		raw, ok := schemas[p.Schema.Name]
		if !ok {
			return nil, NewError(CodePolicyInvalid, "subject %s: unknown schema %q", p.Name, p.Schema.Name)
		}
		sch, err := schema.Compile(raw)
		if err != nil {
			return nil, WrapError(CodePolicyInvalid, err, "subject %s: schema %s does not compile: %v", p.Name, p.Schema.Name, err)
		}
		s.schema = sch
		s.schemaID = p.Schema.Name
		digest.Write(raw)
	}
	s.digest = hex.EncodeToString(digest.Sum(nil)[:12])
	for op, specs := range p.Policy {
		if !validOperation(string(op)) {
			return nil, NewError(CodePolicyInvalid, "subject %s: unknown operation %q", p.Name, op)
		}
		for i, spec := range specs {
			r, err := compileRule(spec)
			if err != nil {
				return nil, WrapError(CodePolicyInvalid, err, "subject %s: policy.%s[%d]: %v", p.Name, op, i, err)
			}
			s.rules[op] = append(s.rules[op], r)
		}
	}
	for i, q := range p.Rules {
		c, err := compileCondition(q.Expr)
		if err != nil {
			return nil, WrapError(CodePolicyInvalid, err, "subject %s: rules[%d] (%s): %v", p.Name, i, q.Name, err)
		}
		qr := &qualityRule{name: q.Name, cond: c, code: Code(q.Code)}
		switch q.OnFailure {
		case "", "deny":
		case "quarantine":
			qr.quarantine = true
		default:
			return nil, NewError(CodePolicyInvalid, "subject %s: rules[%d]: onFailure must be deny or quarantine", p.Name, i)
		}
		if qr.code == "" {
			qr.code = CodeDataQuality
		}
		s.quality = append(s.quality, qr)
	}
	s.treeData = len(s.quality) > 0 || s.e2e || slices.ContainsFunc(s.rules[OpPublish], func(r *rule) bool { return r.when != nil })
	if r := p.RateLimit; r != nil && (r.PerSecond <= 0 || r.Burst < 1) {
		return nil, NewError(CodePolicyInvalid, "subject %s: rateLimit needs perSecond > 0 and burst >= 1", p.Name)
	}
	if k := p.Delivery.Idempotency.Key; strings.HasPrefix(k, "data.") && len(k) > 5 {
		p := datapath.Parse(k[5:])
		s.idemPath = &p
	}
	s.idemTTL = msOr(p.Delivery.Idempotency.TTLMs, DefaultIdempotencyTTL)
	s.ackWait = msOr(p.Delivery.AckWaitMs, DefaultAckWait)
	s.maxAtt = p.Delivery.Retry.MaxAttempts
	if s.maxAtt <= 0 {
		s.maxAtt = DefaultMaxAttempts
	}
	s.maxDelay = msOr(p.Delivery.Retry.MaxDelayMs, time.Minute)
	s.backoff = p.Delivery.Retry.Backoff
	s.replayAge = time.Duration(p.Replay.MaxAgeMs) * time.Millisecond
	return s, nil
}

func msOr(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// compileCondition compiles a CEL condition; a failure is an *Error with
// CodePolicyInvalid whose message carries the CEL issues.
func compileCondition(expr string) (*cond.Condition, error) {
	c, err := cond.Compile(expr)
	if err != nil {
		code := CodePolicyInvalid
		if errors.Is(err, cond.ErrEnvironment) {
			code = CodeInternal
		}
		return nil, WrapError(code, err, "%s", err)
	}
	return c, nil
}

func compileRule(spec RuleSpec) (*rule, error) {
	r := &rule{
		principals:    slices.Clone(spec.Principals),
		roles:         slices.Clone(spec.Roles),
		intents:       slices.Clone(spec.Intents),
		regions:       slices.Clone(spec.Regions),
		attributes:    maps.Clone(spec.Attributes),
		requireReason: spec.RequireReason,
	}
	switch spec.Effect {
	case EffectAllow:
	case EffectDeny:
		r.deny = true
	default:
		return nil, NewError(CodePolicyInvalid, "effect must be \"allow\" or \"deny\", not %q", spec.Effect)
	}
	r.anyPrincipal = len(r.principals) == 0 || slices.Contains(r.principals, "*")
	if spec.When != "" {
		c, err := compileCondition(spec.When)
		if err != nil {
			return nil, err
		}
		r.when = c
	}
	return r, nil
}

// matchesIdentity reports whether the rule applies to the principal in the
// region, ignoring everything that depends on a message.
func (r *rule) matchesIdentity(p *Principal, region string) bool {
	if !r.anyPrincipal && !slices.Contains(r.principals, p.ID) {
		return false
	}
	if len(r.roles) > 0 && !slices.ContainsFunc(r.roles, p.HasRole) {
		return false
	}
	if len(r.regions) > 0 && !slices.Contains(r.regions, region) {
		return false
	}
	for k, v := range r.attributes {
		if p.Attributes[k] != v {
			return false
		}
	}
	return true
}

// messageDependent reports whether the rule looks at the message.
func (r *rule) messageDependent() bool {
	return len(r.intents) > 0 || r.requireReason || r.when != nil
}

// identityVerdict says at negotiation whether the catalog grants op to p in
// region (some allow rule matches the identity) and whether it refuses it
// outright (a deny rule that does not depend on the message matches).
func (s *subject) identityVerdict(op Operation, p *Principal, region string) (allowed, denied bool) {
	for _, r := range s.rules[op] {
		if !r.matchesIdentity(p, region) {
			continue
		}
		if r.deny {
			if !r.messageDependent() {
				return false, true
			}
			continue
		}
		allowed = true
	}
	return allowed, false
}

// hasIntent reports whether the subject lists intent.
func (s *subject) hasIntent(intent string) bool { return slices.Contains(s.intents, intent) }
