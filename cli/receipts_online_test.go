package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestReceiptsOnlineStopsAHostileServer: a server whose every
// page names a next past the cursor asked, but whose pages do not move
// the command past the receipts it has printed (an empty page with a
// next, its cursor one further each time; a page whose next is before
// its last receipt, so that the next page answers that receipt again;
// receipts out of order, or at or before the cursor asked), ends
// `pigeon audit receipts --url` with an error (exit 1) within two
// requests. Before, the empty pages were asked for without end (the
// command had printed nothing, so --max never stopped it) and the
// repeated receipts were printed twice. A server that answers as Pigeon
// does (a full page, next its last receipt's cursor) is read to the end.
func TestReceiptsOnlineStopsAHostileServer(t *testing.T) {
	receipt := func(auditSeq, seq uint64) pigeon.Receipt {
		return pigeon.Receipt{Event: pigeon.EventDeliveryDispatched, Principal: "bob", AuditSeq: auditSeq, Seq: seq}
	}
	page := func(next string, rs ...pigeon.Receipt) func(pigeon.ReceiptCursor) any {
		return func(pigeon.ReceiptCursor) any {
			if rs == nil {
				rs = []pigeon.Receipt{}
			}
			return map[string]any{"receipts": rs, "next": next}
		}
	}
	for _, tc := range []struct {
		name string
		max  string
		// answer is the page the server answers to a request after a.
		answer func(a pigeon.ReceiptCursor) any
	}{
		{"empty pages, each next one further", "5", func(a pigeon.ReceiptCursor) any {
			return map[string]any{"receipts": []pigeon.Receipt{}, "next": pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 1}.String()}
		}},
		{"empty pages, no cap", "-1", func(a pigeon.ReceiptCursor) any {
			return map[string]any{"receipts": []pigeon.Receipt{}, "next": pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 1}.String()}
		}},
		{"a next before its last receipt", "-1", func(a pigeon.ReceiptCursor) any {
			return map[string]any{"receipts": []pigeon.Receipt{receipt(a.AuditSeq+1, 0), receipt(a.AuditSeq+2, 0)},
				"next": pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 1}.String()}
		}},
		{"receipts out of order", "-1", func(a pigeon.ReceiptCursor) any {
			return map[string]any{"receipts": []pigeon.Receipt{receipt(a.AuditSeq+2, 0), receipt(a.AuditSeq+1, 0)},
				"next": pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 2}.String()}
		}},
		{"the same receipt twice", "-1", func(a pigeon.ReceiptCursor) any {
			return map[string]any{"receipts": []pigeon.Receipt{receipt(a.AuditSeq+1, 0), receipt(a.AuditSeq+1, 0)},
				"next": pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 1}.String()}
		}},
		{"a receipt at the cursor asked", "5", page("", receipt(0, 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 1000 {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				a, err := pigeon.ParseReceiptCursor(r.URL.Query().Get("after"))
				require.NoError(t, err)
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(tc.answer(a))
			}))
			t.Cleanup(hs.Close)
			code, stdout, stderr := (*running)(nil).pigeon(t, t.Context(), "audit", "receipts", "--url", hs.URL, "--token", "t", "--max", tc.max, "msg_x")
			require.Equal(t, 1, code, "stdout %s stderr %s", stdout, stderr)
			require.Empty(t, stdout, "nothing of a hostile answer is printed")
			require.LessOrEqual(t, calls.Load(), int64(2), "the command stopped: %s", stderr)
		})
	}

	// As Pigeon answers: full pages of two, next the last one's cursor.
	var calls atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		a, err := pigeon.ParseReceiptCursor(r.URL.Query().Get("after"))
		require.NoError(t, err)
		out := map[string]any{"receipts": []pigeon.Receipt{receipt(a.AuditSeq+1, 7), receipt(a.AuditSeq+2, 7)}}
		if a.AuditSeq < 4 {
			out["next"] = pigeon.ReceiptCursor{AuditSeq: a.AuditSeq + 2, Seq: 7}.String()
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(hs.Close)
	code, stdout, stderr := (*running)(nil).pigeon(t, context.Background(), "audit", "receipts", "--url", hs.URL, "--token", "t", "--max", "2", "--after", "0", "msg_x")
	require.Equal(t, 3, code, stderr)
	require.Equal(t, 2, strings.Count(stdout, "\n"))
	require.Contains(t, stderr, "--after 2:7")
	code, stdout, stderr = (*running)(nil).pigeon(t, context.Background(), "audit", "receipts", "--url", hs.URL, "--token", "t", "--max", "-1", "msg_x")
	require.Equal(t, 0, code, stderr)
	for i := range 6 {
		require.Contains(t, stdout, fmt.Sprintf(`"auditSeq":%d,"seq":7`, i+1))
	}
	require.Equal(t, int64(1+3), calls.Load())
}

// TestReceiptsNoDeliveryLineIsPrintable: the id of a message no
// delivery of is recorded is written on stderr as every other line of the
// command writes text it did not choose (printable): an id pasted from a
// log or a record with a terminal's control sequences in it cannot clear
// the screen or fake a line of output. Before, this one line wrote it raw.
func TestReceiptsNoDeliveryLineIsPrintable(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"receipts":[]}`))
	}))
	t.Cleanup(hs.Close)
	code, stdout, stderr := (*running)(nil).pigeon(t, t.Context(), "audit", "receipts", "--url", hs.URL, "--token", "t", "msg\x1b[2J\npigeon: all clear\u009b")
	require.Equal(t, 0, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "no delivery of")
	require.NotContains(t, stderr, "\x1b")
	require.NotContains(t, stderr, "\u009b")
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
}
