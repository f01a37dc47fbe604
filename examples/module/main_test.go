package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out))
	s := out.String()
	require.Contains(t, s, `checkout-api (authenticated): 202 {"messageId":`)
	require.Contains(t, s, `"requestedBy":"spiffe://merchant-prod/ns/checkout/sa/checkout-api"`)
	require.Contains(t, s, "no credential: 401")
	require.Contains(t, s, "bad request: 400")
	require.Contains(t, s, "from spiffe://merchant-prod/ns/orders/sa/orders-api", "published under the module's own principal")
}
