package programs

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"pigeon"
)

// Manifest says where a program is bound, whom it runs as and what it may
// use. It is deployed beside the module (docs/programs.md).
type Manifest struct {
	// Route is the route the program's handler is bound to.
	Route Route `json:"route"`
	// Account is the account the program runs as: its deliveries are
	// checked, and its messages published, under a contract negotiated for
	// this principal, with the account's roles and attributes.
	Account string `json:"account"`
	// Publishes lists the subjects the program may publish to, beside the
	// route's subject (which it may always answer requests on). The
	// contract is negotiated for them all.
	Publishes []string `json:"publishes,omitempty"`
	// Limits bound each delivery; zero fields take the defaults.
	Limits Limits `json:"limits,omitzero"`
	// Env is the program's environment (WASI environ), for its
	// configuration. It is stored and shown by GET: no secrets.
	Env map[string]string `json:"env,omitempty"`
}

// Route is the subscription a program is bound to, as a subscriber's.
type Route struct {
	Subject     string `json:"subject"`
	Selector    string `json:"selector,omitempty"`
	Filter      string `json:"filter,omitempty"`
	Group       string `json:"group,omitempty"`
	MaxInFlight int    `json:"maxInFlight,omitempty"`
}

// Limits bound what one delivery may use.
type Limits struct {
	// MemoryPages caps an instance's linear memory, in 64 KiB pages
	// (default DefaultMemoryPages, at most MaxMemoryPages).
	MemoryPages uint32 `json:"memoryPages,omitempty"`
	// TimeoutMs is the time one message may take, in milliseconds
	// (default DefaultTimeout, at most MaxTimeout).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MaxEmits caps the messages (publishes and replies) one delivery may
	// emit (default DefaultMaxEmits, at most MaxEmitsLimit).
	MaxEmits int `json:"maxEmits,omitempty"`
}

// Defaults and bounds of Limits.
const (
	DefaultMemoryPages = 256 // 16 MiB
	MaxMemoryPages     = 16384
	DefaultTimeout     = time.Second
	MaxTimeout         = time.Minute
	DefaultMaxEmits    = 16
	MaxEmitsLimit      = 1000
	maxEnv             = 64
	maxManifest        = 64 << 10
)

// StackReserve is the call stack Manifest.Memory counts for each instance,
// beside its linear memory: 144 MiB. wazero's compiler runs a call on a
// stack it allocates on the Go heap, 10 KiB at first, and grows it by
// copying it into one twice as large (plus the frame that did not fit)
// while it is at most 50,000,000 bytes; past that a call that needs more
// fails with a stack overflow. A stack is thus at most ≈ 100,000,000
// bytes, and the one it was copied from, ≈ 50,000,000 more, stays
// referenced until the call next leaves to Go: ≈ 150,000,000 bytes (143
// MiB) at the deepest, whatever limits.memoryPages says. No setting of
// wazero lowers that ceiling (a constant of its compiler engine). An
// instance sheds a grown stack when its delivery ends (instance.shed),
// so only the instances in use hold one.
const StackReserve = 144 << 20

// Memory is the most memory a program's instances take at once, in bytes:
// route.maxInFlight instances, each of limits.memoryPages 64 KiB pages of
// linear memory and a call stack of up to StackReserve.
func (m *Manifest) Memory() int64 {
	return int64(max(m.Route.MaxInFlight, 1)) * (int64(m.Limits.MemoryPages)*64<<10 + StackReserve)
}

// Timeout is the time one message may take.
func (l Limits) Timeout() time.Duration { return time.Duration(l.TimeoutMs) * time.Millisecond }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName reports whether name may name a program: 1 to 63 characters
// of a-z, 0-9, '.', '_' and '-', starting with a letter or digit.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ParseManifest decodes a manifest (JSON, unknown fields refused), fills
// the defaults and checks every field. A manifest that reads two ways (an
// object with a member named twice, a member named as a field in another
// case, which encoding/json would take for it) or holds a string that is
// not UTF-8 is refused too, and so is one whose names hold a control
// character (see checkText). A refusal is PROGRAM_INVALID with check
// "manifest".
func ParseManifest(b []byte) (Manifest, error) {
	if len(b) > maxManifest {
		return Manifest{}, invalid(checkManifest, "the manifest exceeds %d bytes", maxManifest)
	}
	var m Manifest
	if err := pigeon.CheckJSON(bytes.TrimSpace(b)); err != nil {
		return Manifest{}, invalid(checkManifest, "the manifest does not decode: %v", err)
	}
	if err := pigeon.CheckNames(b, &m); err != nil {
		return Manifest{}, invalid(checkManifest, "the manifest does not decode: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, invalid(checkManifest, "the manifest does not decode: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, invalid(checkManifest, "the manifest has data after its object")
	}
	return m, m.normalize()
}

// normalize fills the defaults and checks every field.
func (m *Manifest) normalize() error {
	r := &m.Route
	switch {
	case r.Subject == "":
		return invalid(checkManifest, "route.subject is required")
	case m.Account == "":
		return invalid(checkManifest, "account is required")
	case r.MaxInFlight < 0 || r.MaxInFlight > pigeon.MaxInFlightLimit:
		return invalid(checkManifest, "route.maxInFlight must be between 1 and %d", pigeon.MaxInFlightLimit)
	case m.Limits.MemoryPages > MaxMemoryPages:
		return invalid(checkManifest, "limits.memoryPages must be at most %d", MaxMemoryPages)
	case m.Limits.TimeoutMs < 0 || m.Limits.TimeoutMs > MaxTimeout.Milliseconds(): // not Timeout(), which overflows
		return invalid(checkManifest, "limits.timeoutMs must be between 1 and %d", MaxTimeout.Milliseconds())
	case m.Limits.MaxEmits < 0 || m.Limits.MaxEmits > MaxEmitsLimit:
		return invalid(checkManifest, "limits.maxEmits must be between 1 and %d", MaxEmitsLimit)
	case len(m.Env) > maxEnv:
		return invalid(checkManifest, "env holds at most %d values", maxEnv)
	}
	for k, v := range m.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return invalid(checkManifest, "env name %q or its value is malformed", k)
		}
	}
	for _, s := range m.Publishes {
		if s == "" {
			return invalid(checkManifest, "publishes holds an empty subject")
		}
	}
	if err := m.checkText(); err != nil {
		return err
	}
	if len(m.Env) == 0 {
		m.Env = nil
	}
	if len(m.Publishes) == 0 {
		m.Publishes = nil
	}
	if r.MaxInFlight == 0 {
		r.MaxInFlight = 1
	}
	if m.Limits.MemoryPages == 0 {
		m.Limits.MemoryPages = DefaultMemoryPages
	}
	if m.Limits.TimeoutMs == 0 {
		m.Limits.TimeoutMs = DefaultTimeout.Milliseconds()
	}
	if m.Limits.MaxEmits == 0 {
		m.Limits.MaxEmits = DefaultMaxEmits
	}
	return nil
}

// checkText refuses a name of the manifest (route.subject, route.group,
// account, a subject of publishes, an env name) that is not UTF-8 or
// holds a control or formatting character as the broker reads one in
// every name (pigeon.IsControlRune: C0, DEL, C1, and U+202E and the others
// that reorder the text around them or break its line), and a
// route.filter that holds one other than tab, newline and carriage
// return, which lay out an expression over lines: an expression is code,
// shown in listings, and a literal that means to hold a formatting
// character writes it as an escape. An env value is data the program
// reads, not a name: it holds no control character but tab, newline and
// carriage return (a certificate, say, its lines ended CRLF where it was
// written on Windows), and may hold the formatting characters
// (right-to-left text a program is configured with). The manifest is
// stored, shown by GET and in listings, and its subject is written into
// program.refused audit records: ESC, CSI (U+009B) or CR in it would
// drive the terminal that shows it, and U+202E would show it as another
// name.
func (m *Manifest) checkText() error {
	names := []struct{ field, v string }{{"route.subject", m.Route.Subject}, {"route.group", m.Route.Group}, {"account", m.Account}}
	for i, s := range m.Publishes {
		names = append(names, struct{ field, v string }{"publishes[" + strconv.Itoa(i) + "]", s})
	}
	for _, n := range names {
		if !textName(n.v) {
			return invalid(checkManifest, "%s %q is not UTF-8 text without control or formatting characters", n.field, n.v)
		}
	}
	if !layoutCode(m.Route.Filter) {
		return invalid(checkManifest, "route.filter holds a control or formatting character other than tab, newline and carriage return")
	}
	for _, k := range slices.Sorted(maps.Keys(m.Env)) {
		if !textName(k) {
			return invalid(checkManifest, "env name %q is not UTF-8 text without control or formatting characters", k)
		}
		if !layoutText(m.Env[k]) {
			return invalid(checkManifest, "the value of env %q holds a control character other than tab, newline and carriage return", k)
		}
	}
	return nil
}

// layoutText reports whether s is UTF-8 without control characters but
// tab, newline and carriage return: data laid out over lines.
func layoutText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) && !lineLayout(r) })
}

// layoutCode reports whether s is UTF-8 without control or formatting
// characters (pigeon.IsControlRune) but tab, newline and carriage
// return: an expression laid out over lines.
func layoutCode(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return pigeon.IsControlRune(r) && !lineLayout(r) })
}

// lineLayout reports whether r is tab, newline or carriage return.
func lineLayout(r rune) bool { return r == '\t' || r == '\n' || r == '\r' }

// textName reports whether s is UTF-8 without control or formatting
// characters (pigeon.IsControlRune), as every name of the broker is.
func textName(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, pigeon.IsControlRune)
}

// logged is a name of a manifest as an audit record carries it: itself
// when it is text, "" when checkText refuses it (a manifest refused, or
// one stored by an older version), so no control character is written
// into the log.
func logged(s string) string {
	if textName(s) {
		return s
	}
	return ""
}

// subjects is what the program's contract is negotiated for: the route's
// subject first, then Publishes, without repeats.
func (m *Manifest) subjects() []string {
	out := []string{m.Route.Subject}
	for _, s := range m.Publishes {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// sameBinding reports whether a and b bind the same subscription under
// the same account and contract, so a new version can replace the old one
// in place.
func sameBinding(a, b *Manifest) bool {
	return a.Route == b.Route && a.Account == b.Account && slices.Equal(a.subjects(), b.subjects())
}
