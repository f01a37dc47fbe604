package pigeon

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"pigeon/store"
)

// maxAuditText bounds each text field of an audit record, in bytes. The
// fields name things a client may choose (a subject it asked for, a
// message id, a contract id it sent), and a refusal is audited before, or
// because, they pass the envelope's bounds: without a bound of its own, a
// client could make each refusal write as much to the log as it sends.
// Every name the broker accepts is shorter (envelope fields: 256 bytes).
const maxAuditText = 512

// auditText is s as an audit record keeps it: valid UTF-8, each invalid
// sequence replaced by U+FFFD, quoted as Go's %q quotes it when it holds a
// control character (C0, DEL, C1: ESC, CSI or CR in a name a client
// chose would drive the terminal that shows the log), and at most
// maxAuditText bytes, a longer text cut on a character boundary and
// marked with the length it had and a digest of it (cutMark). A
// record's hash is over the text it keeps, so every export of the record
// (JSON over HTTP, a cluster's stored copy) verifies: JSON cannot carry
// invalid UTF-8, and an encoder would replace it after the hash was taken.
func auditText(s string) string {
	if len(s) <= maxAuditText && !hasControl(s) && utf8.ValidString(s) {
		return s
	}
	orig := s
	s = strings.ToValidUTF8(s, "\uFFFD")
	if hasControl(s) {
		s = strconv.Quote(s)
	}
	if len(s) <= maxAuditText {
		return s
	}
	mark := cutMark(orig)
	cut := maxAuditText - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// cutMark ends the kept part of a text s cut by auditText: the length s
// had and 16 hex digits of its SHA-256, so that two texts sharing the
// kept part (two long principals differing at the end) read apart.
func cutMark(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "…(cut from " + strconv.Itoa(len(s)) + " bytes, sha256 " + hex.EncodeToString(sum[:8]) + ")"
}

// boundAuditText applies auditText to the text fields of r that name
// things: its type, hashes, id and sequence ranges are the broker's own.
// An accepted publish's record, and a delivery's, the records written
// for every message, are left as they are: every text in them passed the
// envelope gate (the message id) or is the catalog's or the broker's.
func boundAuditText(r *store.AuditRecord) {
	if r.Outcome == string(OutcomeAllow) {
		switch Event(r.Type) {
		case EventPublishAccepted, EventDeliveryDispatched, EventDeliveryAcked:
			return
		}
	}
	for _, f := range [...]*string{&r.Outcome, &r.Code, &r.Gate, &r.Subject, &r.Principal, &r.ContractID, &r.PolicyID, &r.SchemaID, &r.MessageID, &r.Ref} {
		*f = auditText(*f)
	}
}
