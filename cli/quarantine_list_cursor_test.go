package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/demo"
)

// TestQuarantineListEndsOnAServerThatDoesNotMoveOn: `pigeon quarantine
// list` asks for page after page, each from the (time, id) of the last
// record of the one before, until a page is empty. It ended only on a
// page whose last record was the cursor it had asked from, so a server
// that alternated between two pages, or moved its records back in time,
// kept it reading and printing for as long as it was answered. Each
// record must now come after the one printed before it (by time, then
// id; the first from --since on), otherwise the command ends with an
// error (exit 1) after the records it printed. A server that answers as
// Pigeon does, records sharing an instant among them, is read to its end
// (exit 0).
func TestQuarantineListEndsOnAServerThatDoesNotMoveOn(t *testing.T) {
	base := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	type rec struct {
		ID   string    `json:"id"`
		Time time.Time `json:"time"`
	}
	at := func(sec int, id string) rec { return rec{ID: id, Time: base.Add(time.Duration(sec) * time.Second)} }
	// honest are five records, three of them sharing an instant, in the
	// order Pigeon lists them: by time, then id.
	honest := []rec{at(0, "q-b"), at(1, "q-a"), at(1, "q-c"), at(1, "q-d"), at(2, "q-a")}
	// asPigeon answers the records of all after (since, after), two a page.
	asPigeon := func(all []rec) func(since, after string) []rec {
		return func(since, after string) []rec {
			var s time.Time
			if since != "" {
				var err error
				if s, err = time.Parse(time.RFC3339Nano, since); err != nil {
					return nil
				}
			}
			var out []rec
			for _, r := range all {
				if r.Time.Before(s) || after != "" && r.Time.Equal(s) && r.ID <= after {
					continue
				}
				if out = append(out, r); len(out) == 2 {
					break
				}
			}
			return out
		}
	}
	for _, tc := range []struct {
		name   string
		since  string
		answer func(since, after string) []rec
		code   int
		lines  int // records printed
	}{
		{name: "as Pigeon answers", answer: asPigeon(honest), lines: 5},
		{name: "as Pigeon answers, from --since in another zone", since: base.Add(time.Second).In(time.FixedZone("", 3600)).Format(time.RFC3339Nano),
			answer: asPigeon(honest), lines: 4},
		{name: "the same page again", answer: func(string, string) []rec { return honest[:2] }, code: 1, lines: 2},
		{name: "two pages in turn", answer: func(_, after string) []rec {
			if after == honest[1].ID {
				return honest[2:4]
			}
			return honest[:2]
		}, code: 1, lines: 4},
		{name: "back in time, a new record each page", answer: func(since, _ string) []rec {
			s, err := time.Parse(time.RFC3339Nano, since)
			if err != nil {
				s = base
			}
			return []rec{{ID: "q-" + s.Format("150405"), Time: s.Add(-time.Second)}}
		}, code: 1, lines: 1},
		{name: "records out of order", answer: func(string, string) []rec { return []rec{honest[1], honest[0]} }, code: 1, lines: 1},
		{name: "records before --since", since: base.Add(time.Second).Format(time.RFC3339Nano),
			answer: func(string, string) []rec { return honest[:2] }, code: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 10 {
					http.Error(w, "enough", http.StatusTeapot)
					return
				}
				q := r.URL.Query()
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"records": tc.answer(q.Get("since"), q.Get("after"))})
			}))
			t.Cleanup(hs.Close)
			args := []string{"quarantine", "list", "--url", hs.URL, "--token", "t"}
			if tc.since != "" {
				args = append(args, "--since", tc.since)
			}
			var stdout, stderr strings.Builder
			code := Main(t.Context(), args, &stdout, &stderr)
			require.Equal(t, tc.code, code, "stderr %s", stderr.String())
			require.Equal(t, tc.lines, strings.Count(stdout.String(), "\n"), "stdout %s", stdout.String())
			require.NotContains(t, stderr.String(), "enough", "the command ended on its own")
			if tc.code != 0 {
				require.Contains(t, stderr.String(), "does not come after")
			}
		})
	}
}

// TestQuarantineRecordsPrintTerminalSafe: a quarantined message is a
// publisher's text, kept as it came: a string in its data may hold a C1
// control (U+009B is CSI) or DEL, which JSON allows unescaped, and
// `pigeon quarantine list` and `show` printed the records as the server
// sent them, so a publisher whose message was quarantined wrote escape
// sequences to the auditor's terminal; a hostile server could add bytes
// that are not UTF-8 and, in list, a carriage return between a record's
// tokens (a line that overwrites itself). Each is now written as a JSON
// escape (a byte that is not UTF-8 as \ufffd, as a decoder reads it), and
// a record of list on one line, so the output reads as the same JSON.
func TestQuarantineRecordsPrintTerminalSafe(t *testing.T) {
	ctx := t.Context()
	e, hs := demoServer(t, nil)
	c := demoCaller(t, e, "orders-token", "notifications.send")
	const recipient = "c\u009b2J\u007f\u0085"
	m := demo.Notification("k-1")
	m.Data = json.RawMessage(`{"recipientId":"` + recipient + `","channel":"sms","templateId":"t","recipient":{"ssn":"078-05-1120"}}`)
	_, err := e.Publish(ctx, c, m)
	var pe *pigeon.Error
	require.ErrorAs(t, err, &pe)
	id := pe.Details["quarantineId"].(string)

	// hostile lists one record with a byte that is not UTF-8 and a
	// carriage return between its tokens.
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("after") != "" {
			_, _ = w.Write([]byte(`{"records":[]}`))
			return
		}
		_, _ = w.Write([]byte("{\"records\":[{\"id\":\"q-1\",\r\"time\":\"2026-12-05T10:00:00Z\",\"subject\":\"a\xffb\"}]}"))
	}))
	t.Cleanup(hostile.Close)

	for _, tc := range []struct {
		name  string
		url   string
		args  []string
		check func(t *testing.T, rec map[string]any)
	}{
		{"list", hs.URL, []string{"list"}, func(t *testing.T, rec map[string]any) {
			require.Equal(t, recipient, rec["message"].(map[string]any)["data"].(map[string]any)["recipientId"])
		}},
		{"show", hs.URL, []string{"show", id}, func(t *testing.T, rec map[string]any) {
			require.Equal(t, recipient, rec["record"].(map[string]any)["message"].(map[string]any)["data"].(map[string]any)["recipientId"])
		}},
		{"list from a hostile server", hostile.URL, []string{"list"}, func(t *testing.T, rec map[string]any) {
			require.Equal(t, "a\uFFFDb", rec["subject"])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := append([]string{"quarantine"}, tc.args...)
			code := Main(ctx, append(args, "--url", tc.url, "--token", "auditor-token"), &stdout, &stderr)
			require.Equal(t, 0, code, "stderr %s", stderr.String())
			requireTerminalSafe(t, stdout.String())
			out := stdout.String()
			if tc.args[0] == "list" {
				require.Equal(t, 1, strings.Count(out, "\n"), "one record, one line: %q", out)
			}
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &rec))
			tc.check(t, rec)
		})
	}
}
