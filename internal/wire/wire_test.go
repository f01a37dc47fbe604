package wire_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/wire"
)

func TestErrorRoundTrip(t *testing.T) {
	e := pigeon.NewError(pigeon.CodeSchemaInvalid, "data does not match")
	e.Details = map[string]any{"gate": "schema"}
	e.Decision = &pigeon.Decision{Outcome: pigeon.OutcomeDeny, Code: pigeon.CodeSchemaInvalid, Gate: "schema"}
	b, err := json.Marshal(wire.Encode(e))
	require.NoError(t, err)
	var we wire.Error
	require.NoError(t, json.Unmarshal(b, &we))
	got := we.Err()
	require.Equal(t, e.Code, got.Code)
	require.Equal(t, e.Message, got.Message)
	require.Equal(t, e.Details, got.Details)
	require.Equal(t, e.Decision.Gate, got.Decision.Gate)
	require.ErrorIs(t, got, pigeon.ErrDenied)

	require.Equal(t, pigeon.CodeInternal, wire.Encode(json.Unmarshal([]byte("x"), new(int))).Code, "a foreign error reveals nothing")
	require.Equal(t, "internal error", wire.Encode(json.Unmarshal([]byte("x"), new(int))).Message)
	require.Equal(t, pigeon.CodeRequestTimeout, wire.Encode(context.DeadlineExceeded).Code)
	require.Equal(t, pigeon.CodeInternal, wire.Error{}.Err().Code)
}

// WriteHTTPError is the one writer of HTTP error bodies: the status of the
// code, JSON headers, and a body that ends with a newline.
func TestWriteHTTPError(t *testing.T) {
	rec := httptest.NewRecorder()
	wire.WriteHTTPError(rec, pigeon.NewError(pigeon.CodeStoreFull, "the store is full"))
	require.Equal(t, http.StatusInsufficientStorage, rec.Code)
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
	require.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
	body := rec.Body.String()
	require.True(t, strings.HasSuffix(body, "}\n"), "%q", body)
	require.JSONEq(t, `{"error":{"code":"STORE_FULL","message":"the store is full","details":{}}}`, body)
}

func TestHTTPStatus(t *testing.T) {
	for code, status := range map[pigeon.Code]int{
		pigeon.CodeOK:                   http.StatusOK,
		pigeon.CodeUnauthenticated:      http.StatusUnauthorized,
		pigeon.CodeForbidden:            http.StatusForbidden,
		pigeon.CodeTooManyContracts:     http.StatusTooManyRequests,
		pigeon.CodeTooManySubscriptions: http.StatusTooManyRequests,
		pigeon.CodeTooManyGroups:        http.StatusTooManyRequests,
		pigeon.CodeSchemaInvalid:        http.StatusUnprocessableEntity,
		pigeon.CodeMessageNotFound:      http.StatusNotFound,
		pigeon.CodeInvalidArgument:      http.StatusBadRequest,
		pigeon.CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
		pigeon.CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
		pigeon.CodeMessageIDTaken:       http.StatusConflict,
		pigeon.CodeRequestTimeout:       http.StatusGatewayTimeout,
		pigeon.CodeShutdown:             http.StatusServiceUnavailable,
		pigeon.CodeSessionClosed:        http.StatusServiceUnavailable,
		pigeon.CodeIdentityUnavailable:  http.StatusServiceUnavailable,
		pigeon.CodeStoreFull:            http.StatusInsufficientStorage,
		pigeon.CodeAuditTampered:        http.StatusInternalServerError,
		pigeon.CodeProgramInvalid:       http.StatusUnprocessableEntity,
		pigeon.CodeProgramNotFound:      http.StatusNotFound,
		pigeon.CodeProgramLimit:         http.StatusUnprocessableEntity,
		pigeon.CodeHopsExceeded:         http.StatusUnprocessableEntity,
		pigeon.CodeProgramTimeout:       http.StatusGatewayTimeout,
		pigeon.CodeProgramTrapped:       http.StatusInternalServerError,
		pigeon.CodeProgramVersionPruned: http.StatusGone,
		pigeon.Code("NOT_A_REAL_CODE"):  http.StatusInternalServerError,
	} {
		require.Equal(t, status, wire.HTTPStatus(code), "%s", code)
	}
}
