package pigeon

import (
	"context"
	"encoding/json"
	"time"

	"pigeon/internal/cond"
	"pigeon/internal/datapath"
	"pigeon/internal/jsontext"
)

// Outcome is what admission decided about a message.
type Outcome string

// Outcomes of admission.
const (
	OutcomeAllow      Outcome = "allow"
	OutcomeDeny       Outcome = "deny"
	OutcomeQuarantine Outcome = "quarantine"
)

// Verdict is one gate's answer. The zero Verdict allows.
type Verdict struct {
	Outcome Outcome
	Code    Code
	// Reason explains the verdict to a human. It must never quote a payload
	// value: it is stored in audit records and returned to callers.
	Reason string
}

// Allow lets the message through to the next gate.
func Allow() Verdict { return Verdict{} }

// Deny refuses the message with a stable code. The broker turns a denial
// into a quarantine where the subject's policy says so.
func Deny(code Code, reason string) Verdict {
	return Verdict{Outcome: OutcomeDeny, Code: code, Reason: reason}
}

// Quarantine refuses the message and keeps a redacted copy for review,
// whatever the subject's quarantine policy says.
func Quarantine(code Code, reason string) Verdict {
	return Verdict{Outcome: OutcomeQuarantine, Code: code, Reason: reason}
}

// Allowed reports whether the verdict lets the message pass.
func (v Verdict) Allowed() bool { return v.Outcome == "" || v.Outcome == OutcomeAllow }

// Gate is one admission check. Gates run in a fixed order for every
// published message; the first one that does not allow decides.
//
// Check must be safe for concurrent use, must not retain the Admission, and
// must not mutate it. It should be fast: it runs on every publish. A Check
// that panics refuses its message, INTERNAL, and the panic is logged; the
// broker goes on.
type Gate interface {
	Name() string
	Check(ctx context.Context, a *Admission) Verdict
}

// GateFunc adapts a function to a Gate.
func GateFunc(name string, fn func(ctx context.Context, a *Admission) Verdict) Gate {
	return gateFunc{name: name, fn: fn}
}

type gateFunc struct {
	name string
	fn   func(context.Context, *Admission) Verdict
}

func (g gateFunc) Name() string                                    { return g.name }
func (g gateFunc) Check(ctx context.Context, a *Admission) Verdict { return g.fn(ctx, a) }

// Admission is what a gate sees of one publish. A gate must not change
// it: the broker fills it in, and only the built-in contract gate sets
// Contract, for the gates after it.
type Admission struct {
	// Message is the envelope after defaults were applied and Source was
	// set to the authenticated principal.
	Message *Message
	// Data is Message.Data decoded (map[string]any, []any, string, float64,
	// bool or nil). The broker's own gates read the data in a form of
	// their own where they can; Data is there before any other gate runs.
	Data any
	// Principal is the authenticated caller. After the contract gate its
	// Roles are those the contract holds now (the account's roles as the
	// contract's last access check found them), which every later gate and
	// rule matches: a connection that authenticated hours ago acts with the
	// roles it has, not those it had. Gates must not modify it.
	Principal *Principal
	// Region is the publishing session's region.
	Region string
	// Contract is the caller's contract (nil before the contract gate).
	Contract Contract
	// Policy is the subject's policy (nil when the subject is unknown).
	Policy *SubjectPolicy
	// Now is the broker's clock at admission.
	Now time.Time
	// Request is, for a reply, the request it answers; nil for a publish.
	Request *Message

	m          Message
	subj       *subject
	contract   *contract
	contractID string
	op         Operation
	idemKey    string
	nowText    string // Now as the envelope writes times, once formatted
	size       int    // the stored envelope's length, once encoded (toStore)
	dataCode   Code   // with dataErr: why the data or envelope text is refused
	dataErr    string
	timeErr    bool
	vars       cond.Vars // with hasVars: what CEL conditions see, built once
	hasVars    bool
	// sent is the publisher's data once Message.Data is the decoder's
	// copy, the one the gates judge, the store keeps and subscribers get
	// (prepare); nil when the data was empty or did not decode.
	sent json.RawMessage
	// dataNames summarises Data's member names when Data is an object, so
	// the field gates skip walking it for paths it cannot hold.
	dataNames datapath.Names
	// dataExact reports that the decoder found every number in Data one a
	// double compares as its decimal (jsontext.Document.Exact).
	dataExact bool
	// flat is the data in the flat form (jsontext.DecodeFlat) while lazy:
	// Data is then not built yet, and is built from it (tree) before a
	// gate that reads Data, a condition or a refusal needs it.
	flat  any
	lazy  bool
	arena *jsontext.Arena // where flat is kept, given back by free
	// release is the quarantine record the message is released from
	// (ReleaseQuarantine), "" for a publish: a refusal keeps the message
	// there instead of quarantining a copy.
	release string
}

// doc is the data as the broker's own gates read it: in the flat form
// while Data is not built, Data once it is. Both hold the same document
// (jsontext.DecodeFlat), and every reader of doc answers alike on either.
func (a *Admission) doc() any {
	if a.lazy {
		return a.flat
	}
	return a.Data
}

// tree builds Data from the flat form, once, and returns it.
func (a *Admission) tree() any {
	if a.lazy {
		a.Data, a.flat, a.lazy = jsontext.Tree(a.flat), nil, false
	}
	return a.Data
}

// condVars returns the variables CEL conditions see, built once.
func (a *Admission) condVars() *cond.Vars {
	if !a.hasVars {
		a.vars, a.hasVars = condVars(a.Principal, a.Message, condData(a.tree(), a.Message.Data, a.dataExact)), true
	}
	return &a.vars
}

// condData is what conditions see of data, decoded from text: data
// itself when the decoder found every number exact, else the text decoded
// with each number a double does not hold faithfully made an error
// (cond.ExactData), so conditions judge numbers as the store keeps them.
func condData(data any, text []byte, exact bool) any {
	if exact || len(text) == 0 {
		return data
	}
	if v, err := cond.ExactData(text); err == nil {
		return v
	}
	return data
}

// condVars is the one place that builds the variables of a CEL condition:
// principal p and message m with its decoded data.
func condVars(p *Principal, m *Message, data any) cond.Vars {
	return cond.Vars{
		Principal: cond.Principal{ID: p.ID, Attributes: p.Attributes, Roles: p.Roles},
		Message: cond.Message{ID: m.ID, Type: m.Type, Source: m.Source, Subject: m.Subject, Intent: m.Intent,
			Region: m.Region, Reason: m.Reason, Classification: m.Classification, Data: data},
	}
}

// Decision is the recorded outcome of one admission or operation.
type Decision struct {
	Outcome      Outcome   `json:"outcome"`
	Code         Code      `json:"code,omitempty"`
	Gate         string    `json:"gate,omitempty"`
	Reason       string    `json:"reason,omitempty"`
	Subject      string    `json:"subject,omitempty"`
	SubjectID    string    `json:"subjectId,omitempty"`
	ContractID   string    `json:"contractId,omitempty"`
	PolicyID     string    `json:"policyId,omitempty"`
	SchemaID     string    `json:"schemaId,omitempty"`
	Principal    string    `json:"principal,omitempty"`
	MessageID    string    `json:"messageId,omitempty"`
	QuarantineID string    `json:"quarantineId,omitempty"`
	Time         time.Time `json:"time"`
}

// err turns a refusing decision into the package's typed error.
func (d *Decision) err() *Error {
	e := &Error{Code: d.Code, Message: d.Reason, Decision: d}
	if d.QuarantineID != "" {
		e.Details = map[string]any{"quarantineId": d.QuarantineID, "gate": d.Gate}
	} else if d.Gate != "" {
		e.Details = map[string]any{"gate": d.Gate}
	}
	return e
}
