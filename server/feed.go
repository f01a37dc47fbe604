package server

import (
	"sync"
	"time"

	"pigeon"
)

// DefaultFeedSize is how many recent decisions a Feed keeps when NewFeed
// is given no size.
const DefaultFeedSize = 4096

// maxFeedSubjects bounds the subjects a Feed keeps rates for; decisions on
// further subjects are counted under otherSubject. Refusals of subjects
// the catalog does not hold count under unknownSubject, whatever name the
// client sent, so that a flood of invented names does not push the
// catalog's subjects under otherSubject.
const (
	maxFeedSubjects = 1000
	otherSubject    = "_other"
	unknownSubject  = "_unknown"
)

// Feed is the live console's source: a pigeon.Observer that keeps the most
// recent publish decisions in a ring of fixed size and counts decisions
// per subject and outcome. Its memory is bounded whatever the rate of
// decisions: a reader that falls behind loses the oldest and is told how
// many. Give it to the engine (pigeon.Options.Observer, with
// pigeon.Observers beside metrics) and to the server (Options.Feed).
//
// Feed is safe for concurrent use. Audited takes one mutex for a copy of
// a few strings; the other Observer methods do nothing.
type Feed struct {
	mu        sync.Mutex
	ring      []FeedDecision
	total     uint64 // decisions ever recorded; the next one's sequence is total+1
	rates     map[string]*SubjectRates
	inCatalog func(string) bool // SetInCatalog's
}

var _ pigeon.Observer = (*Feed)(nil)

// FeedDecision is one publish decision as the console shows it: no
// payload, no reason text beyond the code's.
type FeedDecision struct {
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Subject   string    `json:"subject"`
	Principal string    `json:"principal"`
	Outcome   string    `json:"outcome"`
	Code      string    `json:"code"`
	Gate      string    `json:"gate,omitempty"`
	MessageID string    `json:"messageId,omitempty"`
}

// SubjectRates counts one subject's decisions since the feed started.
type SubjectRates struct {
	Accepted    uint64 `json:"accepted"`
	Denied      uint64 `json:"denied"`
	Quarantined uint64 `json:"quarantined"`
}

// NewFeed returns a feed that keeps the last size decisions (size <= 0:
// DefaultFeedSize).
func NewFeed(size int) *Feed {
	if size <= 0 {
		size = DefaultFeedSize
	}
	return &Feed{ring: make([]FeedDecision, size), rates: map[string]*SubjectRates{}}
}

// SetInCatalog tells the feed which subjects the catalog holds (usually
// func(s string) bool { _, err := e.Subject(s); return err == nil }): an
// envelope refusal, made before the catalog is consulted, of a subject it
// does not know counts under "_unknown" in Rates. Without it, only
// SUBJECT_NOT_FOUND refusals do. The decisions themselves keep the name.
func (f *Feed) SetInCatalog(fn func(subject string) bool) {
	f.mu.Lock()
	f.inCatalog = fn
	f.mu.Unlock()
}

// Audited records a publish decision; other records are ignored.
func (f *Feed) Audited(r pigeon.AuditRecord) {
	switch pigeon.Event(r.Type) {
	case pigeon.EventPublishAccepted, pigeon.EventPublishDuplicate, pigeon.EventPublishDenied, pigeon.EventPublishFailed:
	default:
		return
	}
	code := r.Code
	if code == "" {
		code = "OK"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total++
	f.ring[(f.total-1)%uint64(len(f.ring))] = FeedDecision{Seq: f.total, Time: r.Time, Subject: r.Subject, Principal: r.Principal,
		Outcome: r.Outcome, Code: code, Gate: r.Gate, MessageID: r.MessageID}
	subject := r.Subject
	if code == string(pigeon.CodeSubjectNotFound) || r.Gate == pigeon.GateEnvelope && f.inCatalog != nil && !f.inCatalog(subject) {
		subject = unknownSubject
	}
	rt := f.rates[subject]
	if rt == nil {
		name := subject
		if len(f.rates) >= maxFeedSubjects {
			name = otherSubject
		}
		if rt = f.rates[name]; rt == nil {
			rt = &SubjectRates{}
			f.rates[name] = rt
		}
	}
	switch pigeon.Outcome(r.Outcome) {
	case pigeon.OutcomeAllow:
		rt.Accepted++
	case pigeon.OutcomeQuarantine:
		rt.Quarantined++
	default:
		rt.Denied++
	}
}

// Took does nothing.
func (*Feed) Took(pigeon.Stage, string, time.Duration) {}

// Committed does nothing.
func (*Feed) Committed(pigeon.CommitLog, int, time.Duration) {}

// Noted does nothing.
func (*Feed) Noted(pigeon.Note, string) {}

// Since returns the decisions after sequence after, the newest max of them
// when there are more (a sample under a flood), and the sequence to ask
// after next time. skipped counts the decisions after after that are not
// returned: overwritten in the ring or left out of the sample.
func (f *Feed) Since(after uint64, max int) (ds []FeedDecision, next, skipped uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if after > f.total { // a feed restarted under the reader
		after = 0
	}
	n := f.total - after
	keep := min(n, uint64(len(f.ring)), uint64(max))
	ds = make([]FeedDecision, 0, keep)
	for s := f.total - keep + 1; s <= f.total; s++ {
		ds = append(ds, f.ring[(s-1)%uint64(len(f.ring))])
	}
	return ds, f.total, n - keep
}

// Rates returns each subject's decision counts since the feed started.
func (f *Feed) Rates() map[string]SubjectRates {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]SubjectRates, len(f.rates))
	for k, v := range f.rates {
		out[k] = *v
	}
	return out
}
