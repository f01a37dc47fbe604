package ws

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"pigeon"
)

// WireError is the error object of the wire protocols: the "error" of a
// WebSocket error frame and of an HTTP error body alike,
// {"code","message","details"}. A refusal by an admission gate carries
// details.gate, a quarantined one details.quarantineId, and both carry the
// whole decision as details.decision.
type WireError struct {
	Code    pigeon.Code    `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// EncodeError turns any error into its wire form. A *pigeon.Error keeps
// its code, message and details; a context error becomes REQUEST_TIMEOUT;
// anything else is INTERNAL with a message that reveals nothing.
func EncodeError(err error) WireError {
	var pe *pigeon.Error
	switch {
	case errors.As(err, &pe):
		w := WireError{Code: pe.Code, Message: pe.Message, Details: make(map[string]any, len(pe.Details)+1)}
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
		return WireError{Code: pigeon.CodeRequestTimeout, Message: "the request ended before an answer", Details: map[string]any{}}
	}
	return WireError{Code: pigeon.CodeInternal, Message: "internal error", Details: map[string]any{}}
}

// Err rebuilds the *pigeon.Error the wire error stands for: the same code,
// message and details, and the decision when details.decision holds one, so
// that errors.Is(err, pigeon.ErrDenied) and pigeon.ErrQuarantined answer as
// they do in process.
func (w WireError) Err() *pigeon.Error {
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
// code and the body {"error":{"code","message","details"}}.
func WriteHTTPError(w http.ResponseWriter, err error) {
	we := EncodeError(err)
	body, mErr := json.Marshal(struct {
		Error WireError `json:"error"`
	}{we})
	if mErr != nil {
		body = []byte(`{"error":{"code":"INTERNAL","message":"internal error","details":{}}}`)
		we.Code = pigeon.CodeInternal
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(we.Code.Status())
	_, _ = w.Write(body)
}
