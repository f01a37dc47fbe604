package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestBodiesWithNonJSONSpaceAreRefused: white space JSON does not allow
// (\v, \f, U+0085, U+00A0, U+2028, U+3000) around a body makes it text
// every other JSON reader (a proxy, a firewall) refuses; the server
// trimmed it (bytes.TrimSpace) before decoding, and published the message
// or acted on the body. Only space, tab, CR and LF may surround a body.
func TestBodiesWithNonJSONSpaceAreRefused(t *testing.T) {
	f := newFixture(t)
	checkout := f.contract(t, "checkout-token", "payments.authorize")
	payment := func() string {
		return `{"type":"payment.authorization.requested","subject":"payments.authorize","intent":"authorize_payment",` +
			`"idempotencyKey":"pay-` + fmt.Sprint(time.Now().UnixNano()) + `","classification":"pci",` +
			`"data":{"merchantId":"m-1","orderId":"o-1","amount":42.5,"currency":"GBP","paymentToken":"tok_abc"}}`
	}
	for _, space := range []string{"\v", "\f", "\u0085", "\u00a0", "\u2028", "\u3000"} {
		for _, where := range []string{"before", "after"} {
			wrap := func(body string) string {
				if where == "before" {
					return space + body
				}
				return body + space
			}
			t.Run(fmt.Sprintf("%q %s", space, where), func(t *testing.T) {
				r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", wrap(payment()), "x-pigeon-contract", checkout)
				require.Equal(t, http.StatusBadRequest, r.status, "publish: %s", r.body)
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))

				r = f.do(t, http.MethodPost, "/v1/contracts", "checkout-token", wrap(`{"subjects":["payments.authorize"]}`))
				require.Equal(t, http.StatusBadRequest, r.status, "negotiate: %s", r.body)
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))

				r = f.do(t, http.MethodPost, "/v1/requests", "checkout-token", wrap(`{"message":`+payment()+`}`), "x-pigeon-contract", checkout)
				require.Equal(t, http.StatusBadRequest, r.status, "request: %s", r.body)
				require.Equal(t, pigeon.CodeBadRequest, r.code(t))
			})
		}
	}
	// JSON's own white space is trimmed as before.
	r := f.do(t, http.MethodPost, "/v1/messages", "checkout-token", " \t\r\n"+payment()+" \t\r\n", "x-pigeon-contract", checkout)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	r = f.do(t, http.MethodPost, "/v1/contracts", "checkout-token", "\r\n"+`{"subjects":["payments.authorize"]}`+"\n\t ")
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	r = f.do(t, http.MethodPost, "/v1/messages", "checkout-token", " \t\r\n", "x-pigeon-contract", checkout)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
}
