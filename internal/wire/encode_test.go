package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/internal/wire"
)

// resultData are data texts on both sides of what json.Marshal rewrites in
// a json.Marshaler's output.
var resultData = []string{
	``,
	`{}`,
	`{"merchantId":"m-100","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_9f8e7d6c"}`,
	"{ \"a\" :\t[ 1 ,\n 2 ] ,\r\n \"b c\" : \"d e\" }",
	`{"html":"<b>&amp;</b>","q":"a\"<\\"}`,
	"{\"ls\":\"a\u2028b\u2029c\u2027\"}",
	`"<>"`,
	`[1, "\\", "\\\""]`,
	` 42 `,
	`null`,
}

func TestAppendResultIsJSONMarshal(t *testing.T) {
	for _, data := range resultData {
		for _, status := range []string{pigeon.StatusAccepted, pigeon.StatusDuplicate} {
			requireSameResult(t, status, data)
		}
	}
	want, err := json.Marshal(&pigeon.Result{Status: "accepted"})
	require.NoError(t, err)
	require.Equal(t, string(want), string(wire.AppendResult(nil, &pigeon.Result{Status: "accepted"})))
}

// requireSameResult holds AppendResult to json.Marshal for a full message
// with data.
func requireSameResult(t *testing.T, status, data string) {
	t.Helper()
	m := &pigeon.Message{SpecVersion: "1.0", ID: "msg_1", Type: "t<>", Source: "spiffe://x/y", Subject: "a.b",
		Time: "2026-01-01T00:00:00.000Z", Intent: "i", IdempotencyKey: "k&", Classification: "pci", Region: "uk",
		Data: json.RawMessage(data), Reason: "r\u2028", Signature: &pigeon.Signature{KID: "k", Alg: "ed25519", Sig: "s"},
		Sequence: 7, ContractID: "ctr", SubjectID: "a.b", SchemaID: "s.v1", AcceptedAt: "2026-01-01T00:00:00.001Z"}
	res := &pigeon.Result{Status: status, Message: m}
	want, err := json.Marshal(res)
	require.NoError(t, err)
	before := string(m.Data)
	require.Equal(t, string(want), string(wire.AppendResult([]byte("prefix"), res)[len("prefix"):]))
	require.Equal(t, before, string(m.Data), "the message is not changed")
}

// FuzzAppendResult holds AppendResult to json.Marshal on any valid data.
func FuzzAppendResult(f *testing.F) {
	for _, d := range resultData {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if data == "" || !json.Valid([]byte(data)) {
			t.Skip()
		}
		requireSameResult(t, pigeon.StatusAccepted, data)
	})
}
