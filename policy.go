package pigeon

import (
	"fmt"
	"maps"

	"pigeon/policy"
)

// The policy types live in package policy, which also loads catalogs from
// files and lints them; these aliases keep them at hand for building a
// catalog in code (Options.Catalog).
type (
	// Operation is something a contract can permit on a subject.
	Operation = policy.Operation
	// Mode is how a subject delivers.
	Mode = policy.Mode
	// Catalog is a set of subject policies and the JSON schemas they name.
	Catalog = policy.Catalog
	// SubjectPolicy is one subject's policy; see policy.SubjectPolicy.
	SubjectPolicy = policy.SubjectPolicy
	// SchemaRef names the JSON schema of a subject's data.
	SchemaRef = policy.SchemaRef
	// RegionPolicy is where a subject's data may live.
	RegionPolicy = policy.RegionPolicy
	// DeliveryPolicy governs retries, leases and idempotency.
	DeliveryPolicy = policy.DeliveryPolicy
	// RetryPolicy says how often and how fast a failed delivery is retried.
	RetryPolicy = policy.RetryPolicy
	// IdempotencyPolicy says whether a key is required and how long it dedups.
	IdempotencyPolicy = policy.IdempotencyPolicy
	// ReplayPolicy governs replay of retained messages.
	ReplayPolicy = policy.ReplayPolicy
	// RetentionPolicy says how long messages and audit records are kept.
	RetentionPolicy = policy.RetentionPolicy
	// DataPolicy classifies a subject's data and names sensitive fields.
	DataPolicy = policy.DataPolicy
	// QuarantinePolicy says which refusals keep a redacted copy.
	QuarantinePolicy = policy.QuarantinePolicy
	// RuleSpec allows or denies one operation to matching principals.
	RuleSpec = policy.RuleSpec
	// RateLimitPolicy is a token bucket per (subject, principal).
	RateLimitPolicy = policy.RateLimitPolicy
	// QualityRule is a subject-level data-quality rule in CEL.
	QualityRule = policy.QualityRule
	// IntegrityPolicy says whether messages must be signed.
	IntegrityPolicy = policy.IntegrityPolicy
)

// Operations a rule can allow or deny.
const (
	OpPublish = policy.OpPublish
	OpReceive = policy.OpReceive
	OpAck     = policy.OpAck
	OpReplay  = policy.OpReplay
)

// Operations lists every operation in contract order (policy.Operations).
var Operations = policy.Operations

func validOperation(op string) bool { return Operation(op).Valid() }

// Delivery modes.
const (
	ModePubSub       = policy.ModePubSub
	ModeWorkQueue    = policy.ModeWorkQueue
	ModeRequestReply = policy.ModeRequestReply
)

// Effect of a rule.
const (
	EffectAllow = policy.EffectAllow
	EffectDeny  = policy.EffectDeny
)

// lintForLoad lints c as the broker registers it: schemas c refers to but
// does not hold may come from the catalog already loaded (loaded). It
// returns nil when no problem has error severity, and otherwise an *Error
// with CodePolicyInvalid whose message is the first error problem (file or
// subject, field, message) and whose details list every error problem.
func lintForLoad(c *Catalog, loaded map[string][]byte) error {
	lc := &Catalog{Subjects: c.Subjects, Schemas: c.Schemas, Sources: c.Sources}
	cloned := false
	for i := range c.Subjects {
		ref := c.Subjects[i].Schema
		if ref == nil {
			continue
		}
		if _, ok := c.Schemas[ref.Name]; ok {
			continue
		}
		if js, ok := loaded[ref.Name]; ok {
			if !cloned {
				lc.Schemas, cloned = make(map[string][]byte, len(c.Schemas)+1), true
				maps.Copy(lc.Schemas, c.Schemas)
			}
			lc.Schemas[ref.Name] = js
		}
	}
	var errs []policy.Problem
	for _, p := range policy.Lint(lc) {
		if p.IsError() {
			errs = append(errs, p)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	msg := "catalog refused: " + errs[0].String()
	if len(errs) > 1 {
		msg += fmt.Sprintf(" (and %d more errors)", len(errs)-1)
	}
	e := NewError(CodePolicyInvalid, "%s", msg)
	e.Details = map[string]any{"file": errs[0].File, "subject": errs[0].Subject, "field": errs[0].Field, "problems": errs}
	return e
}
