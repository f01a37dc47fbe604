package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAuditReceiptsNoCapEndsOnAnAdvancingServer: a server whose every
// page is full and names the next, each after the last (as Pigeon answers
// while the message is delivered faster than pages are read, or as a
// server that makes receipts up can answer for ever), ends `pigeon audit
// receipts --url --max -1` at maxAllReceipts: the first are printed, the
// next page is named and the exit code is 3, as at a cap. Before, the
// command asked for pages for as long as it was answered, holding every
// receipt, and printed none of them.
func TestAuditReceiptsNoCapEndsOnAnAdvancingServer(t *testing.T) {
	var calls atomic.Int64
	limit := int64(maxAllReceipts/pigeon.DefaultMaxReceipts + 5)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > limit {
			http.Error(w, "enough", http.StatusTeapot)
			return
		}
		a, err := pigeon.ParseReceiptCursor(r.URL.Query().Get("after"))
		require.NoError(t, err)
		n, err := strconv.Atoi(r.URL.Query().Get("max"))
		require.NoError(t, err)
		rs := make([]pigeon.Receipt, n)
		for i := range rs {
			rs[i] = pigeon.Receipt{Event: pigeon.EventReplayExecuted, Principal: "bob", AuditSeq: a.AuditSeq + uint64(i) + 1, Seq: 7}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"receipts": rs, "next": rs[n-1].Cursor().String()})
	}))
	t.Cleanup(hs.Close)
	code, stdout, stderr := (*running)(nil).pigeon(t, t.Context(), "audit", "receipts", "--url", hs.URL, "--token", "t", "--max", "-1", "msg_x")
	require.Equal(t, 3, code, "stderr %s", stderr)
	require.Equal(t, maxAllReceipts, strings.Count(stdout, "\n"))
	require.Contains(t, stderr, fmt.Sprintf("the next page is --after %d:7", maxAllReceipts))
	require.Contains(t, stderr, "--data")
	require.Equal(t, int64(maxAllReceipts/pigeon.DefaultMaxReceipts), calls.Load(), "full pages of the server's cap")
}

// TestAuditReceiptsNoCapAgainstAServer: against a running server, `pigeon
// audit receipts --url --max -1` prints every receipt of a message when
// they fit under the ceiling (exit 0), and past it (here lowered to 2)
// the first, naming the next page, from which the rest follow: every
// receipt once, in order. Offline, from the stopped server's data
// directory, the same ceiling cuts the same first page and names the same
// next page.
func TestAuditReceiptsNoCapAgainstAServer(t *testing.T) {
	r := startServe(t, serveConfig{})
	ctx := t.Context()
	code, stdout, stderr := r.pigeon(t, ctx, "publish", "--token", "orders-token", "--subject", "notifications.send",
		"--type", "notification.requested", "--intent", "send_notification", "--key", "k-nocap", "--classification", "pii",
		"--data", `{"recipientId":"cust-42","channel":"sms","templateId":"t"}`)
	require.Equal(t, 0, code, stderr)
	var res struct{ Message struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
	id := res.Message.ID
	require.NotEmpty(t, id)
	post := func(path, body string, headers ...string) []byte {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer notify-replay-token")
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Less(t, resp.StatusCode, 300, string(b))
		return b
	}
	var contract struct{ Contract struct{ ID string } }
	require.NoError(t, json.Unmarshal(post("/v1/contracts", `{"subjects":["notifications.send"]}`), &contract))
	for i := range 3 {
		post("/v1/subjects/notifications.send/replay", `{"reason":"audit `+strconv.Itoa(i)+`"}`, "X-Pigeon-Contract", contract.Contract.ID)
	}
	receipts := func(args ...string) (int, string, string) {
		return r.pigeon(t, ctx, append(append([]string{"audit", "receipts", "--url", r.url, "--token", "auditor-token"}, args...), id)...)
	}
	code, all, stderr := receipts("--max", "-1")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 3, strings.Count(all, "\n"), all)

	old := maxAllReceipts
	maxAllReceipts = 2
	t.Cleanup(func() { maxAllReceipts = old })
	code, first, stderr := receipts("--max", "-1")
	require.Equal(t, 3, code, stderr)
	require.Equal(t, 2, strings.Count(first, "\n"))
	next := regexp.MustCompile(`the next page is --after ([0-9]+:[0-9]+)`).FindStringSubmatch(stderr)
	require.NotNil(t, next, stderr)
	code, rest, stderr := receipts("--max", "-1", "--after", next[1])
	require.Equal(t, 0, code, stderr)
	require.Equal(t, all, first+rest)

	r.stop()
	offline := func(args ...string) (int, string, string) {
		return (*running)(nil).pigeon(t, context.Background(), append(append([]string{"audit", "receipts", "--data", r.data}, args...), id)...)
	}
	code, offFirst, offStderr := offline("--max", "-1")
	require.Equal(t, 3, code, "offline, the same ceiling: %s", offStderr)
	require.Equal(t, first, offFirst)
	require.Contains(t, offStderr, "the next page is --after "+next[1]+" ")
	code, offRest, offStderr := offline("--max", "-1", "--after", next[1])
	require.Equal(t, 0, code, offStderr)
	require.Equal(t, all, offFirst+offRest)
}
