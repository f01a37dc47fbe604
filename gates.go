package pigeon

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"pigeon/internal/jsontext"
	"pigeon/seal"
)

// Names of the built-in gates, in the order they run; duplicate detection
// runs last, in the store, after the application's gates. docs/policy.md,
// "Gate order on publish", is the full description of the order.
const (
	GateEnvelope       = "envelope"
	GateContract       = "contract"
	GateRate           = "rate"
	GateRule           = "rule"
	GateIntent         = "intent"
	GateIdempotency    = "idempotency"
	GateClassification = "classification"
	GateRegion         = "region"
	GateForbidden      = "forbidden-fields"
	GateTokenized      = "tokenized-fields"
	GateEncryption     = "encryption"
	GateSchema         = "schema"
	GateQuality        = "data-quality"
	GateSignature      = "signature"
	// GateRetention refuses, after the application's gates, a message
	// whose stored envelope alone is larger than its subject's
	// retention.maxBytes (PAYLOAD_TOO_LARGE).
	GateRetention = "retention"
	GateDuplicate = "duplicate"
)

// SealedField is the data field that carries an end-to-end sealed payload.
const SealedField = "sealed"

// publishOnly marks a built-in gate that governs what a publish into a
// subject's log must look like (its rules, intent, idempotency key, schema
// and data quality). A reply is not published into the log: it passes
// every other gate, the application's included, and the rate gate too
// (a reply has a bucket of its own, rateGate).
type publishOnly interface{ publishOnly() }

func (ruleGate) publishOnly()        {}
func (intentGate) publishOnly()      {}
func (idempotencyGate) publishOnly() {}
func (schemaGate) publishOnly()      {}
func (qualityGate) publishOnly()     {}

// replyChain is chain without its publish-only gates, in order.
func replyChain(chain []Gate) []Gate {
	var out []Gate
	for _, g := range chain {
		if _, ok := g.(publishOnly); !ok {
			out = append(out, g)
		}
	}
	return out
}

// builtinGates returns the built-in chain; the broker appends its own
// options' gates after it and ends with duplicate detection in the store.
func builtinGates(e *Engine) []Gate {
	return []Gate{
		envelopeGate{},
		contractGate{e: e},
		rateGate{l: e.limiter},
		ruleGate{},
		intentGate{},
		idempotencyGate{},
		classificationGate{},
		regionGate{},
		forbiddenGate{},
		tokenizedGate{},
		encryptionGate{},
		schemaGate{},
		qualityGate{},
		signatureGate{e: e},
	}
}

type envelopeGate struct{}

func (envelopeGate) Name() string { return GateEnvelope }
func (envelopeGate) Check(_ context.Context, a *Admission) Verdict {
	m := a.Message
	switch {
	case a.dataErr != "":
		return Deny(a.dataCode, a.dataErr)
	case m.SpecVersion != SpecVersion:
		return Deny(CodeEnvelopeInvalid, "specversion must be "+SpecVersion)
	case m.Subject == "":
		return Deny(CodeEnvelopeInvalid, "subject is required")
	case m.Type == "":
		return Deny(CodeEnvelopeInvalid, "type is required")
	case m.Source == "":
		return Deny(CodeEnvelopeInvalid, "source is required")
	case m.Intent == "":
		return Deny(CodeEnvelopeInvalid, "intent is required")
	}
	if name, most := longField(m); name != "" {
		return Deny(CodeEnvelopeInvalid, "envelope field "+name+" is longer than "+strconv.Itoa(most)+" bytes")
	}
	if !printable(m.ID) && hasControl(m.ID) {
		// An id is a name of one line: delivery records' digests and the
		// audit log's text form join ids by newlines. A formatting
		// character (U+202E, U+2028) would show it as another.
		return Deny(CodeEnvelopeInvalid, "the message id holds a control or formatting character")
	}
	if name := controlField(m); name != "" {
		// The names of a message are written into audit records,
		// decisions, quarantine records and receipts, and shown by
		// consoles and tools: ESC, CSI (U+009B) or CR in one would drive
		// the terminal that shows it, and U+202E (right-to-left override)
		// or U+2028 (line separator) would show it, or the text after it,
		// as another. Reason is prose and data the publisher's payload:
		// neither is refused for its content here.
		return Deny(CodeEnvelopeInvalid, "envelope field "+name+" holds a control or formatting character")
	}
	if isPAN(m.ID) {
		// The id is written where data never is: in the audit log (which
		// is never rewritten), the quarantine, delivery records and every
		// answer. A card number there would defeat the card-number gate,
		// so it is refused here, before the contract (never quarantined),
		// and every record of the refusal names it as "[REDACTED]".
		return Deny(CodeRawPANDetected, "the message id is a raw card number")
	}
	if a.timeErr {
		return Deny(CodeEnvelopeInvalid, "time must be an RFC 3339 timestamp")
	}
	return Allow()
}

// MaxEnvelopeField is the longest text envelope field a publisher sets,
// in bytes, but for reason (MaxReason) and data.
const MaxEnvelopeField = 256

// CheckRegion refuses a caller's region that no message could carry:
// longer than MaxEnvelopeField bytes (BAD_REQUEST) or not UTF-8
// (INVALID_UTF8). A transport checks the region a request names at its
// edge; negotiation checks the one it is given.
func CheckRegion(region string) error {
	switch {
	case len(region) > MaxEnvelopeField:
		return NewError(CodeBadRequest, "the region is longer than %d bytes", MaxEnvelopeField)
	case !utf8.ValidString(region):
		return NewError(CodeInvalidUTF8, "the region is not valid UTF-8")
	}
	return nil
}

// controlField names the first name of m a publisher sets (subject,
// type, intent, idempotencyKey, classification, region, replyTo,
// correlationId, the signature's kid, alg and sig) that holds a control
// or formatting character (hasControl); "" when none does. The id is
// checked on its own, source is the principal's, and reason is prose.
func controlField(m *Message) string {
	// The names are nearly always printable ASCII, which holds none: that
	// is checked eight bytes at a time, and only a name that is not is
	// looked into.
	if printable(m.Subject) && printable(m.Type) && printable(m.Intent) && printable(m.IdempotencyKey) &&
		printable(m.Classification) && printable(m.Region) && printable(m.ReplyTo) && printable(m.CorrelationID) {
		return controlSignature(m)
	}
	return controlFieldByRunes(m)
}

// controlFieldByRunes is controlField reading every name rune by rune.
func controlFieldByRunes(m *Message) string {
	fields := [...]struct{ name, v string }{
		{"subject", m.Subject}, {"type", m.Type}, {"intent", m.Intent}, {"idempotencyKey", m.IdempotencyKey},
		{"classification", m.Classification}, {"region", m.Region}, {"replyTo", m.ReplyTo}, {"correlationId", m.CorrelationID},
	}
	for _, f := range fields {
		if hasControl(f.v) {
			return f.name
		}
	}
	return controlSignature(m)
}

// controlSignature names the first of m's signature's kid, alg and sig
// that holds a control or formatting character; "" when none does.
func controlSignature(m *Message) string {
	if sig := m.Signature; sig != nil {
		switch {
		case hasControl(sig.KID):
			return "signature.kid"
		case hasControl(sig.Alg):
			return "signature.alg"
		case hasControl(sig.Sig):
			return "signature.sig"
		}
	}
	return ""
}

// printable reports whether s is printable ASCII (jsontext.PrintableASCII).
func printable(s string) bool { return jsontext.PrintableASCII(s) }

// longField names the first text field of m a publisher sets that is
// longer than it may be, and that bound; "" when none is. (Source is the
// principal's, and time is an RFC 3339 timestamp.) An Ed25519 signature,
// the only kind verified, is 86 characters.
func longField(m *Message) (string, int) {
	const most = MaxEnvelopeField
	switch {
	case len(m.ID) > most:
		return "id", most
	case len(m.Type) > most:
		return "type", most
	case len(m.Subject) > most:
		return "subject", most
	case len(m.Intent) > most:
		return "intent", most
	case len(m.IdempotencyKey) > most:
		return "idempotencyKey", most
	case len(m.Classification) > most:
		return "classification", most
	case len(m.Region) > most:
		return "region", most
	case len(m.ReplyTo) > most:
		return "replyTo", most
	case len(m.CorrelationID) > most:
		return "correlationId", most
	case len(m.Reason) > MaxReason:
		return "reason", MaxReason
	}
	if sig := m.Signature; sig != nil {
		// Stored and delivered as sent where no policy verifies it.
		switch {
		case len(sig.KID) > most:
			return "signature.kid", most
		case len(sig.Alg) > most:
			return "signature.alg", most
		case len(sig.Sig) > most:
			return "signature.sig", most
		}
	}
	return "", 0
}

type contractGate struct{ e *Engine }

func (contractGate) Name() string { return GateContract }
func (g contractGate) Check(ctx context.Context, a *Admission) Verdict {
	if a.subj == nil {
		return Deny(CodeSubjectNotFound, "unknown subject")
	}
	now := a.Now
	if now.IsZero() { // never let a missing time skip the expiry check
		now = g.e.now()
	}
	c, code, reason := g.e.checkContractAt(ctx, a.contractID, a.Principal, a.subj, a.op, now)
	if code != CodeOK {
		return Deny(code, reason)
	}
	// The request acts in the region its contract was negotiated for,
	// which the contract's rules were judged for: another region named
	// by the request (an HTTP request's x-pigeon-region, a Caller made by
	// hand) is refused, so it cannot take a message of its own region past
	// crossRegion: deny, or have rules judged for a region the contract
	// was not granted in. A caller naming none acts in the contract's.
	if r := c.info.Region; a.Region != r {
		if a.Region != "" {
			return Deny(CodeRegionDenied, "the request's region is not the region its contract was negotiated for")
		}
		a.Region = r
		if a.Message.Region == "" {
			a.Message.Region = r
		}
	}
	// The gates after this one, and the rules among them, see the roles
	// the contract holds now, and the caller merged with the contract's
	// account now: refused as checkContractAt refuses it when that breaks
	// a principal's bounds (the account read again, created since).
	p, reason := c.rulePrincipal(&g.e.dir, a.Principal)
	if reason != "" {
		return Deny(CodeGrantRevoked, reason)
	}
	a.contract, a.Contract, a.Principal = c, c, p
	return Allow()
}

type rateGate struct{ l *rateLimiter }

func (rateGate) Name() string { return GateRate }
func (g rateGate) Check(_ context.Context, a *Admission) Verdict {
	switch {
	case a.subj.rate == nil:
		return Allow()
	case a.Request != nil:
		// A reply writes its record and is handed over (to every node of
		// a cluster): without a bucket a responder could answer one
		// stored request, however old, as fast as it liked. Its bucket is
		// the replier's toward the requester, under the subject's limit.
		if g.l.allowReply(a.subj, a.Principal.ID, a.Request.Source, a.Now) {
			return Allow()
		}
		return Deny(CodeRateLimited, "reply rate limit exceeded for this subject and requester")
	case g.l.allow(a.subj, a.Principal.ID, a.Now):
		return Allow()
	}
	return Deny(CodeRateLimited, "rate limit exceeded for this subject")
}

type ruleGate struct{}

func (ruleGate) Name() string { return GateRule }
func (ruleGate) Check(_ context.Context, a *Admission) Verdict {
	if a.contract != nil {
		if g := a.contract.permits[a.subj.name]; g != nil && g.viaRole&opBit(a.op) != 0 {
			// Granted by a role permission: catalog deny rules still win,
			// and the message must lie within the permission's routes.
			if v := a.subj.evalDenies(a.op, a); !v.Allowed() {
				return v
			}
			if !g.inScope(a.op, a.tree()) {
				return Deny(CodePolicyDenied, "the message is outside the routes this principal holds")
			}
			return Allow()
		}
	}
	return a.subj.evalRules(a.op, a)
}

// evalDenies applies only the subject's deny rules for op.
func (s *subject) evalDenies(op Operation, a *Admission) Verdict {
	m := a.Message
	for _, r := range s.rules[op] {
		if !r.deny || !r.matchesIdentity(a.Principal, a.Region) {
			continue
		}
		if len(r.intents) > 0 && !slices.Contains(r.intents, m.Intent) {
			continue
		}
		if r.when != nil {
			ok, err := r.when.Eval(a.condVars())
			if err == nil && !ok {
				continue
			}
		}
		return Deny(CodePolicyDenied, "a deny rule matched")
	}
	return Allow()
}

// evalRules applies the subject's rules for op to one message: a matching
// deny rule wins; otherwise some allow rule must match completely.
func (s *subject) evalRules(op Operation, a *Admission) Verdict {
	var (
		allowed     bool
		intentMiss  bool
		reasonMiss  bool
		whenFailed  bool
		evalFailure bool
	)
	m := a.Message
	for _, r := range s.rules[op] {
		if !r.matchesIdentity(a.Principal, a.Region) {
			continue
		}
		if len(r.intents) > 0 && !slices.Contains(r.intents, m.Intent) {
			intentMiss = intentMiss || !r.deny
			continue
		}
		if r.requireReason && m.Reason == "" {
			reasonMiss = reasonMiss || !r.deny
			continue
		}
		if r.when != nil {
			ok, err := r.when.Eval(a.condVars())
			if err != nil {
				evalFailure = true
				if r.deny {
					return Deny(CodePolicyDenied, "a deny rule could not be evaluated")
				}
				continue
			}
			if !ok {
				whenFailed = whenFailed || !r.deny
				continue
			}
		}
		if r.deny {
			return Deny(CodePolicyDenied, "a deny rule matched")
		}
		allowed = true
	}
	switch {
	case allowed:
		return Allow()
	case intentMiss:
		return Deny(CodeIntentDenied, "intent is not allowed to this principal")
	case reasonMiss:
		return Deny(CodePolicyDenied, "a reason is required")
	case evalFailure:
		return Deny(CodePolicyDenied, "a rule condition could not be evaluated")
	case whenFailed:
		return Deny(CodePolicyDenied, "no rule condition holds for this message")
	}
	return Deny(CodePolicyDenied, "no rule allows this principal")
}

type intentGate struct{}

func (intentGate) Name() string { return GateIntent }
func (intentGate) Check(_ context.Context, a *Admission) Verdict {
	if len(a.subj.intents) == 0 || a.subj.hasIntent(a.Message.Intent) {
		return Allow()
	}
	return Deny(CodeIntentDenied, "intent is not listed on the subject")
}

type idempotencyGate struct{}

func (idempotencyGate) Name() string { return GateIdempotency }
func (idempotencyGate) Check(_ context.Context, a *Admission) Verdict {
	if a.subj.policy.Delivery.Idempotency.Required && a.idemKey == "" {
		if p := a.subj.idemPath; p != nil {
			if v, ok := p.Lookup(a.doc()); ok {
				if _, num := v.(float64); num {
					return Deny(CodeIdempotencyRequired, "the idempotency key "+a.subj.policy.Delivery.Idempotency.Key+
						" must be a string or an integer within ±(2^53−1): this number has no exact key")
				}
			}
		}
		return Deny(CodeIdempotencyRequired, "an idempotency key is required on this subject")
	}
	return Allow()
}

type classificationGate struct{}

func (classificationGate) Name() string { return GateClassification }
func (classificationGate) Check(_ context.Context, a *Admission) Verdict {
	want := a.subj.policy.Data.Classification
	if want == "" || a.Message.Classification == want {
		return Allow()
	}
	return Deny(CodeClassificationDenied, "classification must be "+want)
}

type regionGate struct{}

func (regionGate) Name() string { return GateRegion }
func (regionGate) Check(_ context.Context, a *Admission) Verdict {
	rp := &a.subj.policy.RegionPolicy
	region := a.Message.Region
	if len(rp.AllowedRegions) > 0 && !slices.Contains(rp.AllowedRegions, region) {
		return Deny(CodeRegionDenied, "region is not allowed on this subject")
	}
	if rp.CrossRegion == "deny" && region != a.Region {
		return Deny(CodeRegionDenied, "cross-region publish is denied on this subject")
	}
	return Allow()
}

type forbiddenGate struct{}

func (forbiddenGate) Name() string { return GateForbidden }
func (forbiddenGate) Check(_ context.Context, a *Admission) Verdict {
	for i := range a.subj.forbidden {
		f := &a.subj.forbidden[i]
		if f.FindIn(a.doc(), &a.dataNames, isPresent) {
			return Deny(CodeSensitiveFieldDenied, "forbidden field "+f.String()+" is present")
		}
	}
	return Allow()
}

// isPresent reports whether a value a forbidden path matches counts as
// present: any value but null.
func isPresent(v any) bool { return v != nil }

type tokenizedGate struct{}

func (tokenizedGate) Name() string { return GateTokenized }
func (tokenizedGate) Check(_ context.Context, a *Admission) Verdict {
	for i := range a.subj.tokenized {
		f := &a.subj.tokenized[i]
		if f.FindIn(a.doc(), &a.dataNames, holdsPAN) {
			return Deny(CodeRawPANDetected, "field "+f.String()+" holds a raw card number, not a token")
		}
	}
	return Allow()
}

// holdsPAN reports whether v, a value a tokenized path matches, is or
// holds a raw card number: a string or number isPAN accepts, or an array
// or object holding one at any depth (an object's member names too). A
// tokenized field holds a token; an object under it would otherwise carry
// a card number past the gate to paymentToken.pan.
func holdsPAN(v any) bool {
	switch x := v.(type) {
	case string:
		return isPAN(x)
	case float64:
		return floatIsPAN(x)
	case []any:
		return slices.ContainsFunc(x, holdsPAN)
	case map[string]any:
		for k, v := range x {
			if isPAN(k) || holdsPAN(v) {
				return true
			}
		}
	case jsontext.Object:
		for i := range x {
			if isPAN(x[i].Name) || holdsPAN(x[i].Value) {
				return true
			}
		}
	}
	return false
}

// floatIsPAN reports whether the number f, written in full, is a card
// number. Beyond 2^53 a double is not the number its JSON text spells:
// every integer within half a step of it decodes to it, and the store
// keeps, and a receiver that reads numbers exactly gets, the text. So f is
// a card number when any integer of 13 to 19 digits that rounds to it is
// one; from 2^57 on, where a step spans 32 integers and more, some always
// is (twenty consecutive integers hold a full decade, and one of its ten
// last digits completes the Luhn sum).
func floatIsPAN(f float64) bool {
	const (
		least = 1e12                           // the least 13-digit number
		most  = 10_000_000_000_000_000_000 - 1 // the greatest 19-digit number
	)
	a := math.Abs(f)
	if a < least || a > 1.1e19 { // not 13 to 19 digits, whatever the text
		return false
	}
	var buf [32]byte
	if a < 1<<53 { // exact: the text spells this number
		return isPAN(string(strconv.AppendFloat(buf[:0], a, 'f', -1, 64)))
	}
	n := uint64(a)
	lo := n - (n-uint64(math.Nextafter(a, 0)))/2
	hi := min(n+(uint64(math.Nextafter(a, math.Inf(1)))-n)/2, most)
	switch {
	case lo > hi:
		return false
	case hi-lo >= 19:
		return true
	}
	for n := lo; n <= hi; n++ {
		if isPAN(string(strconv.AppendUint(buf[:0], n, 10))) {
			return true
		}
	}
	return false
}

// isPAN reports whether s is a Luhn-valid card number of 13 to 19 digits,
// ignoring spaces and dashes between digits: every Unicode space (a tab,
// a newline, a no-break space) and dash (an en dash), which read, print
// and strip as the ASCII ones do, so that they cannot hide a number.
func isPAN(s string) bool {
	var digits [19]byte
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if n == len(digits) {
				return false
			}
			digits[n] = c - '0'
			n++
		case c == ' ' || c == '-':
		case c < utf8.RuneSelf:
			if !unicode.IsSpace(rune(c)) {
				return false
			}
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if !unicode.IsSpace(r) && !unicode.Is(unicode.Pd, r) {
				return false
			}
			i += size - 1
		}
	}
	if n < 13 {
		return false
	}
	sum := 0
	for i := 0; i < n; i++ {
		d := int(digits[n-1-i])
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// noPAN returns s, or "[REDACTED]" when s is a raw card number (isPAN):
// what the audit log, the quarantine and a refusal record of a string a
// client chose (a message id, a subject it names, a reference).
func noPAN(s string) string {
	if isPAN(s) {
		return Redacted
	}
	return s
}

// RedactPANs returns s with every card number written inside it named
// "[REDACTED]", as the audit log names them: for free text a log keeps
// that may quote what a client sent (a panic's value, a peer's error).
func RedactPANs(s string) string { return noPANIn(s) }

// noPANIn returns s with every card number written inside it named
// "[REDACTED]": free text a client chose that the audit log keeps whole (a
// replay's reason, a group key holding a subscription's selector and
// filter), where noPAN, which looks at the whole value, never matches. A
// card number is any run of 13 to 19 digits isPAN accepts, taken from
// groups of digits joined by the spaces and dashes isPAN ignores: a group
// of more than 19 digits is no card number, as for isPAN; a run may start
// or end at any group boundary ("order 42 4111 1111 1111 1111" loses the
// card number however the 42 reads). Other text stays as it was.
func noPANIn(s string) string {
	type group struct{ start, end, digits int }
	var (
		groups []group
		spans  [][2]int // to redact, in order, possibly overlapping
	)
	flush := func() {
		for i := range groups {
			n := 0
			for j := i; j < len(groups); j++ {
				if n += groups[j].digits; n > 19 {
					break
				}
				if n >= 13 && isPAN(s[groups[i].start:groups[j].end]) {
					spans = append(spans, [2]int{groups[i].start, groups[j].end})
				}
			}
		}
		groups = groups[:0]
	}
	sep := -1 // where the separators after the last group began; -1: none allowed
	for i := 0; i < len(s); {
		c := s[i]
		if c >= '0' && c <= '9' {
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			if sep < 0 {
				flush()
			}
			groups = append(groups, group{i, j, j - i})
			i, sep = j, j
			continue
		}
		r, size := rune(c), 1
		if c >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if sep < 0 || !(r == ' ' || r == '-' || unicode.IsSpace(r) || unicode.Is(unicode.Pd, r)) {
			sep = -1
		}
		i += size
	}
	flush()
	if len(spans) == 0 {
		return s
	}
	var b strings.Builder
	at := 0
	for k := 0; k < len(spans); {
		start, end := spans[k][0], spans[k][1]
		for k++; k < len(spans) && spans[k][0] < end; k++ {
			end = max(end, spans[k][1])
		}
		b.WriteString(s[at:start])
		b.WriteString(Redacted)
		at = end
	}
	b.WriteString(s[at:])
	return b.String()
}

// encryptionGate enforces end-to-end encryption on subjects that declare
// data.encryption "required" together with data.routingFields: data must be
// an object with a sealed part and no clear field beyond the routing
// fields. (Reference catalogs use encryption "required" without routing
// fields to mean encryption in transit and at rest, which the broker's
// transports and store provide; that meaning is kept.)
type encryptionGate struct{}

func (encryptionGate) Name() string { return GateEncryption }
func (encryptionGate) Check(_ context.Context, a *Admission) Verdict {
	if !a.subj.e2e {
		return Allow()
	}
	obj, ok := a.tree().(map[string]any)
	if !ok {
		return Deny(CodeEncryptionRequired, "data must be an object with a sealed part")
	}
	if sealed, ok := obj[SealedField].(map[string]any); !ok || len(sealed) == 0 {
		return Deny(CodeEncryptionRequired, "data must carry a sealed part")
	}
	for k := range obj {
		if k != SealedField && !a.subj.routing[k] {
			return Deny(CodeEncryptionRequired, "field "+k+" must be sealed: only routing fields may stay in clear")
		}
	}
	// The sealed part must be what package seal makes, read as a
	// recipient reads it: its members and no other, a known version,
	// binary fields of their sizes. Any other object under the name
	// (clear text, say) would pass for sealed and be stored and delivered
	// in clear. Only its recipient can tell that it opens.
	if sd, err := seal.ReadSealed(a.Message.Data); err != nil {
		return Deny(CodeEncryptionRequired, "the sealed part is not a sealed object")
	} else if err := sd.Validate(); err != nil {
		return Deny(CodeEncryptionRequired, "the sealed part is not a sealed object: "+sealFault(err))
	}
	return Allow()
}

// sealFault names what is wrong with a sealed part, without its content.
func sealFault(err error) string {
	if errors.Is(err, seal.ErrUnsupported) {
		return "unknown version or algorithm"
	}
	return "a field is malformed"
}

type schemaGate struct{}

func (schemaGate) Name() string { return GateSchema }
func (schemaGate) Check(_ context.Context, a *Admission) Verdict {
	if a.subj.schema == nil {
		return Allow()
	}
	data, raw := a.doc(), []byte(a.Message.Data)
	if a.subj.e2e {
		// Only the clear (routing) fields are validated; the sealed part is opaque.
		data, raw = clearPart(a.tree(), raw)
	}
	var reason string
	if a.dataExact {
		// Every number of Data is exact, so every number of its clear part.
		reason = a.subj.schema.ValidateExact(data, raw)
	} else {
		reason = a.subj.schema.Validate(data, raw)
	}
	if reason != "" {
		return Deny(CodeSchemaInvalid, reason)
	}
	return Allow()
}

type qualityGate struct{}

func (qualityGate) Name() string { return GateQuality }
func (qualityGate) Check(_ context.Context, a *Admission) Verdict {
	for _, q := range a.subj.quality {
		ok, err := q.cond.Eval(a.condVars())
		if err == nil && ok {
			continue
		}
		reason := "data-quality rule " + q.name + " failed"
		if err != nil {
			reason = "data-quality rule " + q.name + " could not be evaluated"
		}
		if q.quarantine {
			return Quarantine(q.code, reason)
		}
		return Deny(q.code, reason)
	}
	return Allow()
}

// signatureGate admits, on subjects with integrity.signature "required",
// only messages whose signature verifies against the sender's published
// signing key valid at the message time; on subjects with "optional",
// unsigned messages and messages whose signature so verifies. A signature
// that is there is never passed on unchecked where policy speaks of
// signatures: a receiver that verifies it must find what the gate found.
type signatureGate struct{ e *Engine }

func (signatureGate) Name() string { return GateSignature }
func (g signatureGate) Check(ctx context.Context, a *Admission) Verdict {
	m := a.Message
	switch a.subj.policy.Integrity.Signature {
	case "required":
		if m.Signature == nil {
			return Deny(CodeSignatureRequired, "this subject requires a signed message")
		}
	case "optional":
		if m.Signature == nil {
			return Allow()
		}
	default:
		return Allow()
	}
	keys, err := g.e.AccountKeys(ctx, a.Principal.ID)
	if err != nil {
		return Deny(CodeSignatureInvalid, "the sender publishes no signing key")
	}
	if err := VerifyMessageWithKeys(m, keys); err != nil {
		return Deny(ErrorCode(err), "the signature does not verify against the sender's published keys")
	}
	return Allow()
}

// clearPart returns data without its sealed part, decoded and as text.
// The text is cut from text, data's text as stored, each member's value
// as published: encoding the decoded doubles again would turn
// 100.0000000000000001 into 100, and the schema gate would judge a number
// other than the one stored and delivered.
func clearPart(data any, text []byte) (any, []byte) {
	obj, ok := data.(map[string]any)
	if !ok {
		return data, []byte("null")
	}
	c := make(map[string]any, len(obj))
	for k, v := range obj {
		if k != SealedField {
			c[k] = v
		}
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(text, &members) == nil {
		delete(members, SealedField)
		if raw, err := json.Marshal(members); err == nil {
			return c, raw
		}
	}
	raw, _ := json.Marshal(c) // the gate gives the decoder's text: not reached from it
	return c, raw
}

// quarantinable reports whether a denial with code is kept in quarantine
// under the subject's policy.
func (s *subject) quarantinable(code Code) bool {
	q := &s.policy.Quarantine
	switch code {
	case CodeSchemaInvalid:
		return q.OnSchemaViolation
	case CodeSensitiveFieldDenied, CodeClassificationDenied, CodeRegionDenied, CodeIntentDenied, CodeRawPANDetected:
		return q.OnPolicyViolation
	}
	return false
}
