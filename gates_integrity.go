package pigeon

import "context"

// Names of the integrity gates.
const (
	GateEncryption = "encryption"
	GateSignature  = "signature"
)

// SealedField is the data field that carries an end-to-end sealed payload.
const SealedField = "sealed"

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
	obj, ok := a.Data.(map[string]any)
	if !ok {
		return Deny(CodeEncryptionReq, "data must be an object with a sealed part")
	}
	if sealed, ok := obj[SealedField].(map[string]any); !ok || len(sealed) == 0 {
		return Deny(CodeEncryptionReq, "data must carry a sealed part")
	}
	for k := range obj {
		if k != SealedField && !a.subj.routing[k] {
			return Deny(CodeEncryptionReq, "field "+k+" must be sealed: only routing fields may stay in clear")
		}
	}
	return Allow()
}

// signatureGate admits, on subjects with integrity.signature "required",
// only messages whose signature verifies against the sender's published
// signing key valid at the message time.
type signatureGate struct{ e *Engine }

func (signatureGate) Name() string { return GateSignature }
func (g signatureGate) Check(_ context.Context, a *Admission) Verdict {
	if a.subj.policy.Integrity.Signature != "required" {
		return Allow()
	}
	m := a.Message
	if m.Signature == nil {
		return Deny(CodeSignatureRequired, "this subject requires a signed message")
	}
	keys, err := g.e.AccountKeys(context.Background(), a.Principal.ID)
	if err != nil {
		return Deny(CodeSignatureInvalid, "the sender publishes no signing key")
	}
	if err := VerifyMessageWithKeys(m, keys); err != nil {
		return Deny(ErrorCode(err), "the signature does not verify against the sender's published keys")
	}
	return Allow()
}
