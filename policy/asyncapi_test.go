package policy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"pigeon/demo"
	"pigeon/policy"
)

// asyncAPISchema compiles the AsyncAPI 3.0.0 JSON Schema of the
// @asyncapi/specs package (testdata/asyncapi-3.0.0.schema.json, the
// "without-$id" bundle; Apache-2.0).
func asyncAPISchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("testdata/asyncapi-3.0.0.schema.json")
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("asyncapi-3.0.0.json", doc))
	s, err := c.Compile("asyncapi-3.0.0.json")
	require.NoError(t, err)
	return s
}

func TestAsyncAPIOfTheDemoValidates(t *testing.T) {
	out, err := policy.AsyncAPI(demo.Catalog(), policy.AsyncAPIInfo{})
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
	require.NoError(t, err)
	require.NoError(t, asyncAPISchema(t).Validate(doc))

	var d struct {
		AsyncAPI string `json:"asyncapi"`
		Channels map[string]struct {
			Address string         `json:"address"`
			Pigeon  map[string]any `json:"x-pigeon"`
		} `json:"channels"`
		Operations map[string]struct {
			Action string `json:"action"`
		} `json:"operations"`
		Components struct {
			Messages map[string]struct {
				Payload map[string]any `json:"payload"`
			} `json:"messages"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(out, &d))
	require.Equal(t, "3.0.0", d.AsyncAPI)
	require.Equal(t, "payments.authorize", d.Channels["payments.authorize"].Address)
	require.Equal(t, "pci", d.Channels["payments.authorize"].Pigeon["classification"])
	require.Equal(t, "requestReply", d.Channels["payments.authorize"].Pigeon["mode"])
	require.Equal(t, []any{"authorize_payment"}, d.Channels["payments.authorize"].Pigeon["intents"])
	require.Equal(t, "send", d.Operations["publish.notifications.send"].Action)
	require.Equal(t, "receive", d.Operations["receive.notifications.send"].Action)
	require.Contains(t, d.Components.Messages["payments.authorize"].Payload["required"], "orderId")
	require.NotContains(t, string(out), "spiffe://", "principals are not exported")
}

func TestAsyncAPIRefusesAMissingSchema(t *testing.T) {
	c := demo.Catalog()
	delete(c.Schemas, "payment.authorization.v1")
	_, err := policy.AsyncAPI(c, policy.AsyncAPIInfo{})
	require.ErrorContains(t, err, "payment.authorization.v1")
}

// TestAsyncAPIValidatorRejects: the schema is strict enough to catch a
// broken document (so the validation above means something).
func TestAsyncAPIValidatorRejects(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"asyncapi":"3.0.0","info":{"title":"x","version":"1"},"operations":{"p":{"action":"publish","channel":{"$ref":"#/channels/x"}}}}`)))
	require.NoError(t, err)
	require.Error(t, asyncAPISchema(t).Validate(doc))
}
