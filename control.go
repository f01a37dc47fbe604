package pigeon

import "pigeon/internal/textrule"

// hasControl reports whether s holds a character that drives or
// rearranges what a terminal, console or log viewer shows of it: a
// control character (C0, DEL, C1) or a formatting character that reorders
// the text around it or breaks its line (U+061C, U+200E, U+200F, U+2028
// to U+202E, U+2066 to U+2069). The rule is textrule's (internal/textrule),
// the one every package of the broker reads, so that a name refused here
// is refused by the policy linter, the manifest checks, the identity
// providers and the selector parser too.
//
// It is the broker's one reading of "a control character" in a name (an
// id, a principal, a message's names, a replay's reason, an account's
// attributes, a role's subjects, a group's name) and in audit texts; it
// runs on every message and every audit record. It inlines, so that the
// callers call textrule.HasControl, a byte scan, directly.
func hasControl(s string) bool { return textrule.HasControl(s) }

// IsControlRune reports whether r is a character the broker refuses in
// every name it keeps (an id, a principal, a subject, a group, a
// catalog's or a program manifest's names, an account's attributes): a
// control character as unicode.IsControl reads one (C0, DEL, C1), or a
// formatting character that reorders the text around it or breaks its
// line (U+061C, U+200E, U+200F, U+2028 to U+202E, U+2066 to U+2069).
// U+200C and U+200D, and every other character, are text. It is the rule
// the engine holds a principal to, whatever Authenticator returned it;
// an identity provider, or an application's own Authenticator, may read
// it to refuse such a name itself, with the reason it knows.
func IsControlRune(r rune) bool { return textrule.IsControlRune(r) }
