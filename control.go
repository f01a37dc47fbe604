package pigeon

// hasControl reports whether s holds a control character as
// unicode.IsControl reads one (C0, DEL, C1), a byte at a time: C1 is
// U+0080 to U+009F, 0xC2 then 0x80 to 0x9F in UTF-8. It is the broker's
// one reading of "a control character" in a name (an id, a principal, a
// message's names, a replay's reason, an account's attributes, a role's
// subjects) and in audit texts; it runs on every message and every audit
// record, so it decodes no rune.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return true
		case c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] < 0xa0:
			return true
		}
	}
	return false
}
