package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"pigeon"
	"pigeon/transport/ws"
)

// requestReply is POST /v1/requests: it publishes the body's message as a
// request on a request/reply subject and answers with the reply, as the
// WebSocket request op does. The body is {"message": {…}, "timeoutMs": N};
// without timeoutMs the server waits ws.DefaultRequestTimeout, and never
// longer than the WebSocket endpoint's MaxRequestTimeout. No reply in time
// is 504 REQUEST_TIMEOUT. The response's write deadline is moved past the
// wait, so a long request outlives the server's WriteTimeout.
func requestReply(rq *request) (int, any, error) {
	var in struct {
		Message   json.RawMessage `json:"message"`
		TimeoutMs int64           `json:"timeoutMs"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	if len(in.Message) == 0 || in.Message[0] != '{' {
		return 0, nil, pigeon.NewError(pigeon.CodeBadRequest, "message must be a JSON object")
	}
	m, err := decodePublish(in.Message)
	if err != nil {
		return 0, nil, err
	}
	timeout, err := pigeon.MillisField("timeoutMs", in.TimeoutMs)
	if err != nil {
		return 0, nil, err
	}
	if timeout == 0 {
		timeout = ws.DefaultRequestTimeout
	}
	limit := rq.s.opts.WebSocket.MaxRequestTimeout
	if limit <= 0 {
		limit = ws.DefaultMaxRequestTimeout
	}
	timeout = min(timeout, limit)
	if timeout+time.Second > rq.s.opts.WriteTimeout {
		// Best effort: a ResponseWriter that cannot move its deadline
		// keeps the server's (the request then fails as any slow one).
		_ = http.NewResponseController(rq.w).SetWriteDeadline(time.Now().Add(timeout + 5*time.Second))
	}
	ctx, cancel := context.WithTimeout(rq.ctx, timeout)
	defer cancel()
	c, err := rq.caller(m.ContractID)
	if err != nil {
		return 0, nil, err
	}
	// The request waits holding its message, as a WebSocket request does,
	// and counts toward the same bound of its principal; refused by it,
	// it is audited as the WebSocket's is (publish.denied, Ref "POST
	// /v1/requests request bytes").
	release, err := rq.s.ws.HoldRequest(c.Principal.ID, m)
	if err != nil {
		if pigeon.ErrorCode(err) == pigeon.CodeRateLimited {
			rq.boundDenied(pigeon.EventPublishDenied, boundRequestBytes, c.ContractID, m.Subject, m.ID)
		}
		return 0, nil, err
	}
	defer release()
	reply, err := rq.s.e.Request(ctx, c, m)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, requestAnswer{Status: "replied", Message: reply}, nil
}

// requestAnswer is the body of a successful POST /v1/requests.
type requestAnswer struct {
	Status  string          `json:"status"`
	Message *pigeon.Message `json:"message"`
}
