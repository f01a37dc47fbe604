// Package wire is what Pigeon's wire protocols share: the error object of
// a WebSocket error frame and of an HTTP error body, the HTTP status of each
// code, and the envelope codec of the hot path (DecodeMessage reads an
// envelope in one pass, AppendResult writes a publish answer, both without
// reflection and both held to encoding/json by differential fuzz tests).
// The server and the WebSocket transport write errors through it, and their
// clients read them back with Error.Err.
package wire

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"pigeon"
)

// Error is the error object of the wire protocols: the "error" of a
// WebSocket error frame and of an HTTP error body alike,
// {"code","message","details"}. A refusal by an admission gate carries
// details.gate, a quarantined one details.quarantineId, and both carry the
// whole decision as details.decision.
type Error struct {
	Code    pigeon.Code    `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Encode turns any error into its wire form. A *pigeon.Error keeps its
// code, message and details; a context error becomes REQUEST_TIMEOUT;
// anything else is INTERNAL with a message that reveals nothing.
func Encode(err error) Error {
	var pe *pigeon.Error
	switch {
	case errors.As(err, &pe):
		w := Error{Code: pe.Code, Message: pe.Message, Details: make(map[string]any, len(pe.Details)+1)}
		for k, v := range pe.Details {
			w.Details[k] = v
		}
		if pe.Decision != nil {
			w.Details["decision"] = pe.Decision
		}
		if w.Code == pigeon.CodeOK {
			w.Code = pigeon.CodeInternal
		}
		return w
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return Error{Code: pigeon.CodeRequestTimeout, Message: "the request ended before an answer", Details: map[string]any{}}
	}
	return Error{Code: pigeon.CodeInternal, Message: "internal error", Details: map[string]any{}}
}

// Err rebuilds the *pigeon.Error the wire error stands for: the same code,
// message and details, and the decision when details.decision holds one, so
// that errors.Is(err, pigeon.ErrDenied) and pigeon.ErrQuarantined answer as
// they do in process.
func (w Error) Err() *pigeon.Error {
	code := w.Code
	if code == pigeon.CodeOK {
		code = pigeon.CodeInternal
	}
	e := &pigeon.Error{Code: code, Message: w.Message}
	for k, v := range w.Details {
		if k == "decision" {
			if b, err := json.Marshal(v); err == nil {
				var d pigeon.Decision
				if json.Unmarshal(b, &d) == nil && d.Outcome != "" {
					e.Decision = &d
				}
			}
			continue
		}
		if e.Details == nil {
			e.Details = map[string]any{}
		}
		e.Details[k] = v
	}
	return e
}

// WriteHTTPError writes err as an HTTP error response: the status of its
// code and the body {"error":{"code","message","details"}}, ending with a
// newline like every JSON body of the server. An error whose details carry
// retryAfterMs (a source locked out after failed authentications) is
// answered with Retry-After too, in whole seconds rounded up.
func WriteHTTPError(w http.ResponseWriter, err error) {
	we := Encode(err)
	if ms, ok := we.Details["retryAfterMs"].(int64); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(max(1, (ms+999)/1000), 10))
	}
	body, mErr := json.Marshal(struct {
		Error Error `json:"error"`
	}{we})
	if mErr != nil {
		body = []byte(`{"error":{"code":"INTERNAL","message":"internal error","details":{}}}`)
		we.Code = pigeon.CodeInternal
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(HTTPStatus(we.Code))
	_, _ = w.Write(append(body, '\n'))
}

// HTTPStatus maps a code to its HTTP status, as the reference broker does.
func HTTPStatus(c pigeon.Code) int {
	switch c {
	case pigeon.CodeOK:
		return http.StatusOK
	case pigeon.CodeUnauthenticated:
		return http.StatusUnauthorized
	case pigeon.CodeForbidden, pigeon.CodePolicyDenied, pigeon.CodeReplayDenied, pigeon.CodeRegionDenied, pigeon.CodeIntentDenied,
		pigeon.CodeContractRequired, pigeon.CodeContractNotFound, pigeon.CodeContractExpired, pigeon.CodeContractPrincipalMismatch,
		pigeon.CodeContractStale, pigeon.CodeContractRevoked, pigeon.CodeSubjectNotInContract, pigeon.CodeOperationNotInContract,
		pigeon.CodeNoPermittedSubjects, pigeon.CodeAckNotAllowed, pigeon.CodeGrantRevoked:
		return http.StatusForbidden
	case pigeon.CodeRateLimited, pigeon.CodeTooManyContracts, pigeon.CodeTooManySubscriptions, pigeon.CodeTooManyGroups:
		return http.StatusTooManyRequests
	case pigeon.CodeSensitiveFieldDenied, pigeon.CodeRawPANDetected, pigeon.CodeIdempotencyRequired, pigeon.CodeClassificationDenied,
		pigeon.CodeEnvelopeInvalid, pigeon.CodeSchemaInvalid, pigeon.CodeDataQuality, pigeon.CodeSignatureRequired, pigeon.CodeSignatureInvalid,
		pigeon.CodeEncryptionRequired, pigeon.CodeDeliveryExhausted, pigeon.CodeProgramInvalid, pigeon.CodeProgramLimit,
		pigeon.CodeHopsExceeded:
		return http.StatusUnprocessableEntity
	case pigeon.CodeSubjectNotFound, pigeon.CodeMessageNotFound, pigeon.CodeQuarantineNotFound, pigeon.CodeNotFound, pigeon.CodeProgramNotFound:
		return http.StatusNotFound
	case pigeon.CodeBadRequest, pigeon.CodeSelectorInvalid, pigeon.CodeFilterInvalid, pigeon.CodePolicyInvalid, pigeon.CodeInvalidArgument,
		pigeon.CodeDuplicateKey, pigeon.CodeInvalidUTF8:
		return http.StatusBadRequest
	case pigeon.CodePayloadTooLarge:
		return http.StatusRequestEntityTooLarge
	case pigeon.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case pigeon.CodeConflict, pigeon.CodeMessageIDTaken:
		return http.StatusConflict
	case pigeon.CodeRequestTimeout, pigeon.CodeProgramTimeout:
		return http.StatusGatewayTimeout
	case pigeon.CodeShutdown, pigeon.CodeSessionClosed, pigeon.CodeStoreUnavailable, pigeon.CodeStoreNoQuorum, pigeon.CodeClusterUnconfirmed, pigeon.CodeIdentityUnavailable:
		return http.StatusServiceUnavailable
	case pigeon.CodeStoreFull:
		return http.StatusInsufficientStorage
	case pigeon.CodeProgramVersionPruned:
		return http.StatusGone
	}
	return http.StatusInternalServerError
}

// OnceHeaders are the request headers that say who acts, where and under
// which contract. Each may be given once: readers disagree on which of two
// values counts (Go's Header.Get takes the first, many proxies act on the
// last or append their own), so a request repeating one is refused, not
// read one way here and another way in front of the broker.
var OnceHeaders = []string{"Authorization", "X-Pigeon-Region", "X-Pigeon-Contract"}

// CheckOnce refuses with BAD_REQUEST a request that gives one of names
// (canonical header names) more than once.
func CheckOnce(r *http.Request, names ...string) error {
	for _, name := range names {
		if n := len(r.Header[name]); n > 1 {
			return pigeon.NewError(pigeon.CodeBadRequest, "the %s header is given %d times: give it once", name, n)
		}
	}
	return nil
}

// Bearer returns the token of an Authorization header value h of the
// Bearer scheme (its name in any case), or "" for another scheme. Only the
// spaces and tabs HTTP allows around a value are cut: other white space
// (U+00A0, U+3000, \v) is part of the token, which is then refused, so
// that a token has one spelling for the broker and for anything that
// matches tokens before it.
func Bearer(h string) string {
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.Trim(h[7:], " \t")
	}
	return ""
}

// Credential is what request r presents: bearer (read by the caller from
// its header or subprotocol), the TLS client certificates of its
// connection, and its remote address.
func Credential(r *http.Request, bearer string) pigeon.Credential {
	c := pigeon.Credential{Bearer: bearer, RemoteAddr: r.RemoteAddr}
	if r.TLS != nil {
		c.PeerCertificates = r.TLS.PeerCertificates
	}
	return c
}
