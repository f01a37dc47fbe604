package pigeon_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestDataNumberWithAHugeExponent: a publisher sent data holding a number
// written with an exponent no exact reader holds (0e10000000000000000000,
// 1e-10000000000000000000: zero to a float, so the decoder took them) on
// a subject whose schema the direct validator does not cover; gojsonschema
// dereferenced the math/big value it could not make and panicked inside
// Publish, which over WebSocket ends the broker's process. Such data is now
// refused ENVELOPE_INVALID before any gate, naming the exponent, and a
// number of three exponent digits is still judged by the schema.
func TestDataNumberWithAHugeExponent(t *testing.T) {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{
		Authenticator: pigeon.NewStaticTokens(pigeon.StaticToken{Token: "t", Principal: "spiffe://shop/meter"}),
		Catalog: &pigeon.Catalog{
			Schemas: map[string][]byte{"reading.v1": []byte(`{"type":"object","required":["v"],
				"properties":{"v":{"$ref":"#/definitions/n"}},"definitions":{"n":{"type":"number","minimum":0}}}`)},
			Subjects: []pigeon.SubjectPolicy{{
				Name: "meter.readings", Version: "v1", Mode: pigeon.ModePubSub, Intents: []string{"record"},
				Schema: &pigeon.SchemaRef{Name: "reading.v1"},
				Policy: map[pigeon.Operation][]pigeon.RuleSpec{pigeon.OpPublish: {{Effect: "allow", Principals: []string{"spiffe://shop/meter"}}}},
			}},
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
	s, err := e.Connect(ctx, "t", []string{"meter.readings"})
	require.NoError(t, err)
	publish := func(data string) error {
		_, err := s.Publish(ctx, &pigeon.Message{Type: "reading", Subject: "meter.readings", Intent: "record", Data: json.RawMessage(data)})
		return err
	}
	for _, data := range []string{`{"v":0e10000000000000000000}`, `{"v":1e-10000000000000000000}`, `{"v":1e-1000000}`, `{"v":1,"w":[0E+1000]}`} {
		var err error
		require.NotPanics(t, func() { err = publish(data) }, data)
		require.Equal(t, pigeon.CodeEnvelopeInvalid, pigeon.ErrorCode(err), "%s: %v", data, err)
		require.ErrorContains(t, err, "exponent", data)
	}
	require.NoError(t, publish(`{"v":1e-999}`))
	require.NoError(t, publish(`{"v":0e999}`))
	require.Equal(t, pigeon.CodeSchemaInvalid, pigeon.ErrorCode(publish(`{"v":-1e-999}`)))
}
