package policy

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// An empty routingFields list enforces end-to-end encryption where no
// list does not, so a policy written out as JSON and read back keeps the
// difference (omitempty dropped the empty list: an export and re-import
// turned enforcement off).
func TestEmptyRoutingFieldsSurviveJSON(t *testing.T) {
	for _, tc := range []struct {
		in   DataPolicy
		want string
	}{
		{DataPolicy{Encryption: "required", RoutingFields: []string{}}, `{"encryption":"required","routingFields":[]}`},
		{DataPolicy{Encryption: "required"}, `{"encryption":"required"}`},
		{DataPolicy{Encryption: "required", RoutingFields: []string{"kind"}}, `{"encryption":"required","routingFields":["kind"]}`},
	} {
		b, err := json.Marshal(tc.in)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(b))
		var back DataPolicy
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, tc.in.RoutingFields == nil, back.RoutingFields == nil, "%s", b)
	}
}
