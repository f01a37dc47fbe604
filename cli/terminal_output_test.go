package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
	"pigeon/store"
)

// hostileText holds what a terminal acts on: ESC and BEL (an OSC that
// retitles the window), CSI as a C1 control (U+009B), DEL, NEL (U+0085)
// and CR. A Go string: in JSON, ESC and CR must be escaped, the others
// may be raw.
const hostileText = "x\x1b]0;owned\x07\u009b2J\x7f\u0085\ry"

// lockedBuffer is a strings.Builder that a command may write while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// jsonLines decodes out, one JSON document a line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "line %q", line)
		recs = append(recs, rec)
	}
	return recs
}

// TestStreamingCommandsPrintServerTextTerminalSafe: `pigeon subscribe`,
// `pigeon audit tail` and `pigeon audit receipts` printed through
// json.Encoder, which writes DEL and C1 controls (U+009B is CSI) raw in a
// string, as JSON allows: a publisher's message data and a principal id
// (an identity provider's, a token file's) reached the terminal of
// whoever subscribed or read the audit log as escape sequences. Each
// record is now one line of the same JSON with them escaped. Here the
// values come from a real server: a message published with them in its
// data, and a principal whose publish was denied and audited.
func TestStreamingCommandsPrintServerTextTerminalSafe(t *testing.T) {
	ctx := t.Context()
	e, hs := demoServer(t, nil)

	// A message whose data holds C1 controls and DEL raw (JSON allows
	// them) and ESC and CR escaped (JSON requires it).
	recipient := "c\u009b2J\u007f\u0085"
	data := `{"recipientId":"` + recipient + `\u001b[8m\r","channel":"sms","templateId":"t"}`
	c := demoCaller(t, e, "orders-token", "notifications.send")
	m := demo.Notification("k-1")
	m.Data = json.RawMessage(data)
	res, err := e.Publish(ctx, c, m)
	require.NoError(t, err)

	// A replay whose reason, the replayer's text, is hostile is refused
	// (its record carries no reason); one of plain text is the ref of the
	// audit record and of the message's receipts. A publish to a subject
	// named with control characters is refused, and its record holds the
	// name quoted. So the broker itself writes none into its log, and the
	// hostile server below stands for one that would.
	rc := demoCaller(t, e, "notify-replay-token", "notifications.send")
	_, err = e.Replay(ctx, rc, pigeon.ReplayRequest{Subject: "notifications.send", Reason: hostileText})
	require.Equal(t, pigeon.CodeBadRequest, pigeon.ErrorCode(err), "%v", err)
	const reason = "incident 42"
	_, err = e.Replay(ctx, rc, pigeon.ReplayRequest{Subject: "notifications.send", Reason: reason})
	require.NoError(t, err)
	bad := demo.Notification("k-2")
	bad.Subject = "notifications.send" + hostileText
	_, err = e.Publish(ctx, c, bad)
	require.Error(t, err)

	t.Run("subscribe", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var stdout, stderr lockedBuffer
		done := make(chan int, 1)
		go func() {
			done <- Main(sctx, []string{"subscribe", "--url", hs.URL, "--token", "notifier-token", "--subject", "notifications.send"}, &stdout, &stderr)
		}()
		require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "\n") }, 10*time.Second, 10*time.Millisecond, "stderr %s", stderr.String())
		cancel()
		require.Equal(t, 0, <-done, "stderr %s", stderr.String())
		out := stdout.String()
		requireTerminalSafe(t, out+stderr.String())
		recs := jsonLines(t, out)
		require.Len(t, recs, 1)
		msg := recs[0]["message"].(map[string]any)
		require.Equal(t, res.Message.ID, msg["id"])
		require.Equal(t, recipient+"\x1b[8m\r", msg["data"].(map[string]any)["recipientId"])
	})

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"audit tail", []string{"audit", "tail", "--url", hs.URL, "--token", "auditor-token"}},
		{"audit receipts", []string{"audit", "receipts", "--url", hs.URL, "--token", "auditor-token", res.Message.ID}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(ctx, tc.args, &stdout, &stderr)
			require.Equal(t, 0, code, "stderr %s", stderr.String())
			requireTerminalSafe(t, stdout.String()+stderr.String())
			var refs []any
			for _, rec := range jsonLines(t, stdout.String()) {
				refs = append(refs, rec["ref"])
			}
			require.Contains(t, refs, reason, stdout.String())
		})
	}
}

// TestClientCommandsPrintHostileServerTextTerminalSafe: what a server of
// anyone's choosing (behind --url) answers, where Pigeon itself would not
// send it: bytes that are not UTF-8, a CR between a document's tokens, C1
// controls in a receipt, an audit record, a program's manifest, or the
// message of an error. Every command prints it terminal-safe, the JSON
// reading as the same values.
func TestClientCommandsPrintHostileServerTextTerminalSafe(t *testing.T) {
	// raw is hostileText as it may stand in a JSON string: ESC, BEL and
	// CR escaped, the C1 controls and DEL raw, and a byte that is not
	// UTF-8.
	const raw = `x\u001b]0;owned\u0007` + "\u009b2J\x7f\u0085" + `\ry` + "\xff"
	const want = hostileText + "\uFFFD"
	answers := map[string]string{
		"/v1/audit/receipts/msg_x": `{"receipts":[{"event":"delivery.dispatched","time":"2026-12-05T10:00:00Z","principal":"` + raw +
			`","contractId":"` + raw + `","ref":"` + raw + `","auditSeq":2,"subject":"notifications.send","seq":1}],"next":""}`,
		"/v1/audit": `{"records":[{"seq":1,"id":"aud_1","type":"publish.denied","time":"2026-12-05T10:00:00Z","outcome":"deny","principal":"` + raw +
			`","subject":"` + raw + `","ref":"` + raw + `"}]}`,
		"/v1/programs":            "{\"programs\":[{\"name\":\r\"" + raw + "\",\"manifest\":{\"about\":\"" + raw + "\"}}]}",
		"/v1/quarantine/q-1":      `{"error":{"code":"FORBIDDEN","message":"` + raw + `","details":{"gate":"` + raw + `"}}}`,
		"/v1/programs/prog":       `{"error":{"code":"` + raw + `","message":"` + raw + `"}}`,
		"/v1/subjects/s/messages": "{\"purged\":\r1,\"x\":\"" + raw + "\"}",
	}
	hs := answeringServer(t, answers)

	for _, tc := range []struct {
		name  string
		cmd   []string
		pos   []string
		code  int
		check func(t *testing.T, stdout, stderr string)
	}{
		{"audit receipts", []string{"audit", "receipts"}, []string{"msg_x"}, 0, func(t *testing.T, stdout, _ string) {
			recs := jsonLines(t, stdout)
			require.Len(t, recs, 1)
			for _, f := range []string{"principal", "contractId", "ref"} {
				require.Equal(t, want, recs[0][f], f)
			}
		}},
		{"audit tail", []string{"audit", "tail"}, nil, 0, func(t *testing.T, stdout, _ string) {
			recs := jsonLines(t, stdout)
			require.Len(t, recs, 1)
			for _, f := range []string{"principal", "subject", "ref"} {
				require.Equal(t, want, recs[0][f], f)
			}
		}},
		{"program list", []string{"program", "list"}, nil, 0, func(t *testing.T, stdout, _ string) {
			recs := jsonLines(t, stdout)
			require.Len(t, recs, 1)
			require.Equal(t, want, recs[0]["name"])
			require.Equal(t, want, recs[0]["manifest"].(map[string]any)["about"])
		}},
		{"a refusal's message", []string{"quarantine", "show"}, []string{"q-1"}, 1, func(t *testing.T, _, stderr string) {
			_, doc, ok := strings.Cut(strings.TrimSuffix(stderr, "\n"), "\n")
			require.True(t, ok, stderr)
			var out struct{ Error map[string]any }
			require.NoError(t, json.Unmarshal([]byte(doc), &out), stderr)
			require.Equal(t, want, out.Error["message"])
			require.Equal(t, want, out.Error["details"].(map[string]any)["gate"])
		}},
		{"a refusal's code", []string{"program", "show"}, []string{"prog"}, 1, func(t *testing.T, _, stderr string) {
			require.Contains(t, stderr, `\x1b]0;owned`)
		}},
		{"subject purge", []string{"subject", "purge"}, []string{"s"}, 0, func(t *testing.T, stdout, _ string) {
			require.Equal(t, "pigeon subject purge: 1 message of s purged\n", stdout)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := append(append(tc.cmd, "--url", hs.URL, "--token", "t"), tc.pos...)
			code := Main(t.Context(), args, &stdout, &stderr)
			require.Equal(t, tc.code, code, "stdout %q stderr %q", stdout.String(), stderr.String())
			requireTerminalSafe(t, stdout.String()+stderr.String())
			tc.check(t, stdout.String(), stderr.String())
		})
	}
}

// TestAuditReceiptsOfflinePrintsTheLogTerminalSafe: `pigeon audit
// receipts --data` reads a data directory's log, which anyone who can
// write the files can forge: a principal, contract or ref holding C1
// controls and DEL reached the auditor's terminal raw. They are printed
// escaped, the same JSON.
func TestAuditReceiptsOfflinePrintsTheLogTerminalSafe(t *testing.T) {
	dir, _ := auditDir(t, 2, func(r *store.AuditRecord) {
		r.Outcome, r.Code, r.Principal, r.ContractID, r.Ref = "allow", "OK", hostileText, hostileText, hostileText
		if r.Seq == 1 {
			r.Type, r.MessageID, r.Seqs = string(pigeon.EventPublishAccepted), "msg_x", "1"
			return
		}
		r.Type, r.Seqs, r.Count, r.Digest = string(pigeon.EventDeliveryDispatched), "1", 1, strings.Repeat("ab", 32)
	})
	var stdout, stderr strings.Builder
	code := Main(t.Context(), []string{"audit", "receipts", "--data", dir, "msg_x"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr %s", stderr.String())
	requireTerminalSafe(t, stdout.String()+stderr.String())
	recs := jsonLines(t, stdout.String())
	require.NotEmpty(t, recs)
	for _, rec := range recs {
		require.Equal(t, hostileText, rec["principal"])
		require.Equal(t, hostileText, rec["contractId"])
	}
}

// TestWriteJSONLineIsEncoderOutputTerminalSafe: writeJSONLine writes what
// json.Encoder writes, byte for byte, where that holds nothing a terminal
// acts on, and otherwise the same JSON with it escaped.
func TestWriteJSONLineIsEncoderOutputTerminalSafe(t *testing.T) {
	for _, v := range []any{
		map[string]any{"a": "plain <b> & ünïcode ✓ \u2028", "n": 1.5, "l": []int{1, 2}},
		map[string]any{"evil": hostileText + "\xff", "raw": json.RawMessage("{\"k\" :\r\"\u009b\xff\"}")},
	} {
		var enc, got bytes.Buffer
		require.NoError(t, json.NewEncoder(&enc).Encode(v))
		require.NoError(t, writeJSONLine(&got, v))
		requireTerminalSafe(t, got.String())
		var a, b any
		require.NoError(t, json.Unmarshal(enc.Bytes(), &a))
		require.NoError(t, json.Unmarshal(got.Bytes(), &b))
		require.Equal(t, a, b)
		if bytes.Equal(terminalSafeJSON(enc.Bytes()), enc.Bytes()) {
			require.Equal(t, enc.String(), got.String())
		}
	}
}

// answeringServer is a server that answers each path of answers with its
// body, 403 when the body is an error, and 404 any other path: a server
// behind --url whose text the CLI prints.
func answeringServer(t *testing.T, answers map[string]string) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if strings.Contains(a, `"error"`) {
			w.WriteHeader(http.StatusForbidden)
		}
		_, _ = w.Write([]byte(a))
	}))
	t.Cleanup(hs.Close)
	return hs
}
