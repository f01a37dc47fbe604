package pigeon

import (
	"errors"
	"fmt"
)

// Code is a stable, machine-readable decision or error code. The same code
// appears in a Decision, in the audit record, in the HTTP error body and in
// the WebSocket error frame. Codes never change meaning once published.
type Code string

// Stable codes. The first group matches the reference broker one for one.
// The list is the one reference of stable codes, so it also holds
// METHOD_NOT_ALLOWED, which only the HTTP server (package server)
// produces. PAYLOAD_TOO_LARGE is the HTTP server's for a request body over
// its limit, and the engine's for a message whose stored envelope alone is
// larger than its subject's retention.maxBytes (GateRetention).
const (
	CodeOK                        Code = ""
	CodeUnauthenticated           Code = "UNAUTHENTICATED"
	CodeForbidden                 Code = "FORBIDDEN"
	CodePolicyDenied              Code = "POLICY_DENIED"
	CodeReplayDenied              Code = "REPLAY_DENIED"
	CodeRegionDenied              Code = "REGION_DENIED"
	CodeIntentDenied              Code = "INTENT_DENIED"
	CodeContractRequired          Code = "CONTRACT_REQUIRED"
	CodeContractNotFound          Code = "CONTRACT_NOT_FOUND"
	CodeContractExpired           Code = "CONTRACT_EXPIRED"
	CodeContractPrincipalMismatch Code = "CONTRACT_PRINCIPAL_MISMATCH"
	CodeContractStale             Code = "CONTRACT_STALE"
	CodeContractRevoked           Code = "CONTRACT_REVOKED"
	CodeSubjectNotInContract      Code = "SUBJECT_NOT_IN_CONTRACT"
	CodeOperationNotInContract    Code = "OPERATION_NOT_IN_CONTRACT"
	CodeNoPermittedSubjects       Code = "NO_PERMITTED_SUBJECTS"
	CodeRateLimited               Code = "RATE_LIMITED"
	CodeSensitiveFieldDenied      Code = "SENSITIVE_FIELD_DENIED"
	CodeRawPANDetected            Code = "RAW_PAN_DETECTED"
	CodeIdempotencyRequired       Code = "IDEMPOTENCY_REQUIRED"
	CodeClassificationDenied      Code = "CLASSIFICATION_DENIED"
	CodeEnvelopeInvalid           Code = "ENVELOPE_INVALID"
	CodeSchemaInvalid             Code = "SCHEMA_INVALID"
	CodeSubjectNotFound           Code = "SUBJECT_NOT_FOUND"
	CodeMessageNotFound           Code = "MESSAGE_NOT_FOUND"
	CodeQuarantineNotFound        Code = "QUARANTINE_NOT_FOUND"
	CodeBadRequest                Code = "BAD_REQUEST"
	CodePayloadTooLarge           Code = "PAYLOAD_TOO_LARGE"  // a body over the server's limit, a message over its subject's maxBytes
	CodeMethodNotAllowed          Code = "METHOD_NOT_ALLOWED" // produced by the HTTP server only
	CodeNotFound                  Code = "NOT_FOUND"
	CodeInternal                  Code = "INTERNAL"

	// Codes beyond the reference broker.
	CodeDataQuality        Code = "DATA_QUALITY_FAILED"
	CodeAckNotAllowed      Code = "ACK_NOT_ALLOWED"
	CodeSelectorInvalid    Code = "SELECTOR_INVALID"
	CodeFilterInvalid      Code = "FILTER_INVALID"
	CodeRequestTimeout     Code = "REQUEST_TIMEOUT"
	CodeDeliveryExhausted  Code = "DELIVERY_EXHAUSTED"
	CodePolicyInvalid      Code = "POLICY_INVALID"
	CodeStoreCorrupt       Code = "STORE_CORRUPT"
	CodeAuditTampered      Code = "AUDIT_TAMPERED"
	CodeStoreUnavailable   Code = "STORE_UNAVAILABLE"
	CodeStoreFull          Code = "STORE_FULL"
	CodeShutdown           Code = "SHUTTING_DOWN"
	CodeSessionClosed      Code = "SESSION_CLOSED"
	CodeGrantRevoked       Code = "GRANT_REVOKED"
	CodeSignatureRequired  Code = "SIGNATURE_REQUIRED"
	CodeSignatureInvalid   Code = "SIGNATURE_INVALID"
	CodeEncryptionRequired Code = "ENCRYPTION_REQUIRED"
	CodeInvalidArgument    Code = "INVALID_ARGUMENT"
	CodeConflict           Code = "CONFLICT"
	CodeTooManyContracts   Code = "TOO_MANY_CONTRACTS"
	// CodeTooManySubscriptions refuses a subscription beyond
	// Options.MaxSubscriptionsPerPrincipal.
	CodeTooManySubscriptions Code = "TOO_MANY_SUBSCRIPTIONS"
	// CodeTooManyGroups refuses a subscription that would start a
	// consumer group beyond Options.MaxGroupsPerSubject.
	CodeTooManyGroups Code = "TOO_MANY_GROUPS"
	// CodeDuplicateKey refuses JSON with an object holding two members of
	// one name anywhere in a message or frame: readers disagree on which
	// one wins, so the gates could judge a value a receiver never sees.
	CodeDuplicateKey Code = "DUPLICATE_KEY"
	// CodeInvalidUTF8 refuses text that is not UTF-8, or a \u escape of a
	// lone UTF-16 surrogate, anywhere in a message or frame.
	CodeInvalidUTF8 Code = "INVALID_UTF8"
	// CodeMessageIDTaken refuses a publish or request whose id is the id
	// of a message the broker holds (or of a request waiting for its
	// reply): ids name one message, so acks and replies cannot be misrouted.
	CodeMessageIDTaken Code = "MESSAGE_ID_TAKEN"
	// CodeIdentityUnavailable refuses a credential that cannot be judged
	// now: a JWT signed with a key its identity provider's key set does not
	// hold while that provider cannot be reached. It is not a verdict on
	// the credential; retrying later may succeed.
	CodeIdentityUnavailable Code = "IDENTITY_UNAVAILABLE"

	// Codes of programs (package programs, docs/programs.md).
	// CodeProgramInvalid refuses a deploy: the manifest or the module
	// failed validation (Details "check" names the check); nothing is bound.
	CodeProgramInvalid Code = "PROGRAM_INVALID"
	// CodeProgramNotFound names a program that is not deployed.
	CodeProgramNotFound Code = "PROGRAM_NOT_FOUND"
	// CodeProgramTrapped fails a delivery whose program trapped (or
	// returned a failure, or could not be started).
	CodeProgramTrapped Code = "PROGRAM_TRAPPED"
	// CodeProgramTimeout fails a delivery whose program ran past its time
	// per message.
	CodeProgramTimeout Code = "PROGRAM_TIMEOUT"
	// CodeProgramLimit fails a delivery whose program exceeded a limit
	// (messages emitted per input, or memory), and a deploy of one program
	// more than its account may run (programs.Options.MaxProgramsPerAccount).
	CodeProgramLimit Code = "PROGRAM_LIMIT_EXCEEDED"
	// CodeProgramVersionPruned refuses a rollback to a version whose module
	// is no longer kept (only the last versions' modules are).
	CodeProgramVersionPruned Code = "PROGRAM_VERSION_PRUNED"
)

// CodeStoreNoQuorum: a replicated store could not commit a write in time
// for want of a quorum of its replicas. Retryable; a retry with the same
// idempotency key cannot store the message twice.
const CodeStoreNoQuorum Code = "STORE_NO_QUORUM"

// CodeClusterUnconfirmed: a change that takes access away (a revocation,
// a role or account change) was made, but a live node of the cluster did
// not confirm in time that it applied it (see ClusterBarrier). The change
// stays made; retrying the call waits for the confirmation again. A
// reply gets it when its notice to the other nodes was not written
// (ClusterReplyNotifier): the reply is recorded, but a requester waiting
// on another node may not get it.
const CodeClusterUnconfirmed Code = "CLUSTER_UNCONFIRMED"

// CodeHopsExceeded refuses a message that has been through more bridges
// and programs than a route carries one through (the bridge's
// Options.MaxHops, say): its envelope says so, as it would in a loop. The
// refusal is final: a retry is refused again.
const CodeHopsExceeded Code = "HOPS_EXCEEDED"

// CodeEncryptionReq is the old name of CodeEncryptionRequired.
//
// Deprecated: use CodeEncryptionRequired, named like CodeSignatureRequired.
const CodeEncryptionReq = CodeEncryptionRequired

// Known reports whether c is one of the stable codes this package
// declares (CodeOK aside): a client reading a code from somewhere other
// than an error body (the reason of a WebSocket close, say) takes it as
// the server's code only then. TestKnownCodesAreTheDeclaredOnes holds the
// list to the constants.
func (c Code) Known() bool {
	switch c {
	case CodeUnauthenticated, CodeForbidden, CodePolicyDenied, CodeReplayDenied, CodeRegionDenied, CodeIntentDenied,
		CodeContractRequired, CodeContractNotFound, CodeContractExpired, CodeContractPrincipalMismatch,
		CodeContractStale, CodeContractRevoked, CodeSubjectNotInContract, CodeOperationNotInContract,
		CodeNoPermittedSubjects, CodeRateLimited, CodeSensitiveFieldDenied, CodeRawPANDetected,
		CodeIdempotencyRequired, CodeClassificationDenied, CodeEnvelopeInvalid, CodeSchemaInvalid,
		CodeSubjectNotFound, CodeMessageNotFound, CodeQuarantineNotFound, CodeBadRequest, CodePayloadTooLarge,
		CodeMethodNotAllowed, CodeNotFound, CodeInternal, CodeDataQuality, CodeAckNotAllowed, CodeSelectorInvalid,
		CodeFilterInvalid, CodeRequestTimeout, CodeDeliveryExhausted, CodePolicyInvalid, CodeStoreCorrupt,
		CodeAuditTampered, CodeStoreUnavailable, CodeStoreFull, CodeShutdown, CodeSessionClosed, CodeGrantRevoked,
		CodeSignatureRequired, CodeSignatureInvalid, CodeEncryptionRequired, CodeInvalidArgument, CodeConflict,
		CodeTooManyContracts, CodeTooManySubscriptions, CodeTooManyGroups, CodeDuplicateKey, CodeInvalidUTF8,
		CodeMessageIDTaken, CodeIdentityUnavailable, CodeProgramInvalid, CodeProgramNotFound, CodeProgramTrapped,
		CodeProgramTimeout, CodeProgramLimit, CodeProgramVersionPruned, CodeStoreNoQuorum, CodeClusterUnconfirmed,
		CodeHopsExceeded:
		return true
	}
	return false
}

// Sentinel errors. Every *Error matches exactly one group with errors.Is, so
// callers can branch on the kind of failure without listing codes.
var (
	// ErrDenied groups admission denials: the message or request was refused
	// by policy and nothing was stored.
	ErrDenied = errors.New("pigeon: denied")
	// ErrQuarantined groups refusals whose message was kept, redacted, in
	// quarantine for review.
	ErrQuarantined = errors.New("pigeon: quarantined")
	// ErrContract groups contract failures (missing, unknown, expired,
	// revoked, stale, stolen or out of scope).
	ErrContract = errors.New("pigeon: contract invalid")
	// ErrUnauthenticated is returned when a credential resolves to no principal.
	ErrUnauthenticated = errors.New("pigeon: unauthenticated")
	// ErrNotFound groups lookups of unknown subjects, messages and records.
	ErrNotFound = errors.New("pigeon: not found")
	// ErrInvalid groups malformed input: envelopes, selectors, filters, policies.
	ErrInvalid = errors.New("pigeon: invalid input")
	// ErrTimeout is returned when a request's deadline passes without a reply.
	ErrTimeout = errors.New("pigeon: timeout")
	// ErrClosed is returned by a broker or session after Shutdown or Close.
	ErrClosed = errors.New("pigeon: closed")
	// ErrStore groups storage failures (corrupt, tampered, full, unavailable).
	ErrStore = errors.New("pigeon: store failure")
	// ErrProgram groups failures of a program handling a delivery (trap,
	// timeout, exceeded limit).
	ErrProgram = errors.New("pigeon: program failed")
)

// Error is the one typed error of the package. Read it with errors.As; group
// it with errors.Is against the Err* sentinels. Message never holds payload
// values, so it is safe to log.
type Error struct {
	Code     Code           `json:"code"`
	Message  string         `json:"message"`
	Details  map[string]any `json:"details,omitempty"`
	Decision *Decision      `json:"-"`
	cause    error
}

// Error implements error.
func (e *Error) Error() string {
	if e.Message == "" {
		return "pigeon: " + string(e.Code)
	}
	return fmt.Sprintf("pigeon: %s: %s", e.Code, e.Message)
}

// Unwrap returns the underlying cause, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is reports whether target is the sentinel group of e's code. A refusal
// refused by an admission gate also matches ErrDenied, and one whose message
// was quarantined matches ErrQuarantined too.
func (e *Error) Is(target error) bool {
	if e.Decision != nil {
		if target == ErrDenied || (target == ErrQuarantined && e.Decision.Outcome == OutcomeQuarantine) {
			return true
		}
	}
	return target == e.Code.group()
}

// errShutdown is the error of every operation refused because the broker
// is shutting down.
func errShutdown() *Error { return NewError(CodeShutdown, "broker is shutting down") }

// NewError builds an *Error with a code and message.
func NewError(code Code, format string, args ...any) *Error {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	return &Error{Code: code, Message: msg}
}

// WrapError builds an *Error with a code that wraps cause.
func WrapError(code Code, cause error, format string, args ...any) *Error {
	e := NewError(code, format, args...)
	e.cause = cause
	return e
}

// ErrorCode returns the code of err when it is (or wraps) an *Error, and
// CodeInternal for any other non-nil error.
func ErrorCode(err error) Code {
	if err == nil {
		return CodeOK
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInternal
}

func (c Code) group() error {
	switch c {
	case CodeUnauthenticated, CodeIdentityUnavailable:
		return ErrUnauthenticated
	case CodeContractRequired, CodeContractNotFound, CodeContractExpired, CodeContractPrincipalMismatch,
		CodeContractStale, CodeContractRevoked, CodeSubjectNotInContract, CodeOperationNotInContract,
		CodeGrantRevoked:
		return ErrContract
	case CodeSubjectNotFound, CodeMessageNotFound, CodeQuarantineNotFound, CodeNotFound, CodeProgramNotFound,
		CodeProgramVersionPruned:
		return ErrNotFound
	case CodeBadRequest, CodeEnvelopeInvalid, CodeSelectorInvalid, CodeFilterInvalid, CodePolicyInvalid,
		CodePayloadTooLarge, CodeInvalidArgument, CodeMethodNotAllowed, CodeConflict, CodeDuplicateKey, CodeInvalidUTF8,
		CodeMessageIDTaken, CodeProgramInvalid:
		return ErrInvalid
	case CodeRequestTimeout:
		return ErrTimeout
	case CodeShutdown, CodeSessionClosed:
		return ErrClosed
	case CodeStoreCorrupt, CodeAuditTampered, CodeStoreUnavailable, CodeStoreFull, CodeStoreNoQuorum, CodeClusterUnconfirmed, CodeInternal:
		return ErrStore
	case CodeDeliveryExhausted:
		return ErrQuarantined
	case CodeProgramTrapped, CodeProgramTimeout, CodeProgramLimit:
		return ErrProgram
	}
	return ErrDenied
}
