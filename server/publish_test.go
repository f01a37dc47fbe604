package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// A publish body of unknown length (chunked) is read within the limit like
// one that declares its length, and the answer is the result as
// json.Marshal writes it.
func TestPublishStreamedBody(t *testing.T) {
	f := newFixture(t)
	id := f.contract(t, "checkout-token", "payments.authorize")
	post := func(body io.Reader) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodPost, f.hs.URL+"/v1/messages", body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer checkout-token")
		req.Header.Set("X-Pigeon-Contract", id)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}

	m := demo.Payment("o-streamed")
	m.Data = json.RawMessage(`{ "merchantId" : "m-1", "orderId" : "o-1", "amount" : 1, "currency" : "GBP", "paymentToken" : "t<&>" }`)
	resp, b := post(io.MultiReader(strings.NewReader(msgBody(t, m))))
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", b)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	var res pigeon.Result
	require.NoError(t, json.Unmarshal(b, &res))
	want, err := json.Marshal(&res)
	require.NoError(t, err)
	require.Equal(t, string(want)+"\n", string(b), "byte for byte as json.Marshal")
	require.Equal(t, `{"merchantId":"m-1","orderId":"o-1","amount":1,"currency":"GBP","paymentToken":"t\u003c\u0026\u003e"}`, string(res.Message.Data))

	huge := `{"data":"` + strings.Repeat("x", 1<<20) + `"}`
	resp, b = post(io.MultiReader(strings.NewReader(huge)))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, pigeon.CodePayloadTooLarge, response{status: resp.StatusCode, body: b}.code(t))
}
