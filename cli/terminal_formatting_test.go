package cli

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"pigeon/internal/textrule"

	"github.com/stretchr/testify/require"
)

// formattingRunes are the formatting characters that reorder the text
// around them or break its line where a terminal shows it ("Trojan
// Source", CVE-2021-42574): "alice\u202Egnp.exe" shows as "aliceexe.png".
var formattingRunes = textrule.Formatting()

// formattingText holds every formatting rune, between text.
var formattingText = func() string {
	var b strings.Builder
	b.WriteString("alice")
	for _, r := range formattingRunes {
		b.WriteRune(r)
		b.WriteString("x")
	}
	return b.String() + "gnp.exe"
}()

// plainText is text the terminal shows as it is: other scripts, right to
// left ones included, and the zero width joiners, which reorder nothing.
const plainText = "é 日本 … مرحبا 👩\u200d💻 می\u200cخواهم"

// requireNoReordering fails when out holds a formatting rune raw.
func requireNoReordering(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		require.False(t, slices.Contains(formattingRunes, r), "U+%04X at %d of %q", r, i, out)
	}
}

// reordering is true of the formatting runes and of nothing else in the
// Basic Multilingual Plane.
func TestReorderingIsTheFormattingRunes(t *testing.T) {
	for r := rune(0); r <= 0xffff; r++ {
		require.Equal(t, slices.Contains(formattingRunes, r), reordering(r), "U+%04X", r)
	}
}

// printable writes each formatting rune as a Go escape (\u202e) and
// leaves other text as it is.
func TestPrintableEscapesFormattingCharacters(t *testing.T) {
	for _, r := range formattingRunes {
		got := printable("alice" + string(r) + "gnp.exe")
		require.Equal(t, fmt.Sprintf(`alice\u%04xgnp.exe`, r), got)
	}
	require.Equal(t, plainText, printable(plainText))
	requireNoReordering(t, printable(formattingText))
	requireTerminalSafe(t, printable(formattingText+"\x1b[2J"))
}

// terminalSafeJSON writes each formatting rune in a string as a \u
// escape, and the JSON reads as the same values; writeJSONLine and the
// log writer escape them too.
func TestTerminalSafeJSONEscapesFormattingCharacters(t *testing.T) {
	for _, r := range formattingRunes {
		in := `{"id":"alice` + string(r) + `gnp.exe"}`
		got := terminalSafeJSON([]byte(in))
		require.Equal(t, fmt.Sprintf(`{"id":"alice\u%04xgnp.exe"}`, r), string(got))
		var a, b any
		require.NoError(t, json.Unmarshal([]byte(in), &a))
		require.NoError(t, json.Unmarshal(got, &b))
		require.Equal(t, a, b)
	}
	plain := []byte(`{"text":"` + plainText + `"}`)
	require.Equal(t, string(plain), string(terminalSafeJSON(plain)), "text that reorders nothing is left as it is")

	v := map[string]any{"principal": formattingText, "plain": plainText}
	var line strings.Builder
	require.NoError(t, writeJSONLine(&line, v))
	requireNoReordering(t, line.String())
	var back map[string]any
	require.NoError(t, json.Unmarshal([]byte(line.String()), &back))
	require.Equal(t, v, back)

	var logs strings.Builder
	slog.New(slog.NewJSONHandler(terminalSafeRecords{&logs}, nil)).Info("denied", "principal", formattingText)
	requireNoReordering(t, logs.String())
	require.Contains(t, logs.String(), `alice\u061cx`)
}

// What a server answers (records stored before the broker refused
// formatting characters in names, a message's data, or a server of
// anyone's choosing behind --url) is printed with its formatting runes
// escaped: an audit record's principal, an account listing, a refusal's
// message and its code. Before, "alice\u202Egnp.exe" reached the
// operator's terminal raw and showed as "aliceexe.png".
func TestClientCommandsEscapeFormattingCharacters(t *testing.T) {
	raw := formattingText
	answers := map[string]string{
		"/v1/audit": `{"records":[{"seq":1,"id":"aud_1","type":"publish.denied","time":"2026-12-05T10:00:00Z","outcome":"deny","principal":"` + raw +
			`","subject":"` + raw + `","ref":"` + raw + `"}]}`,
		"/v1/accounts":       `{"accounts":[{"id":"` + raw + `","attributes":{"team":"` + raw + `"},"roles":["` + raw + `"]}]}`,
		"/v1/quarantine/q-1": `{"error":{"code":"FORBIDDEN","message":"` + raw + `","details":{"gate":"` + raw + `"}}}`,
		"/v1/programs/prog":  `{"error":{"code":"` + raw + `","message":"` + raw + `"}}`,
	}
	hs := answeringServer(t, answers)

	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"audit tail", []string{"audit", "tail"}, 0},
		{"account list", []string{"account", "list"}, 0},
		{"a refusal's message", []string{"quarantine", "show", "q-1"}, 1},
		{"a refusal's code", []string{"program", "show", "prog"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := append(tc.args[:len(tc.args):len(tc.args)], "--url", hs.URL, "--token", "t")
			code := Main(t.Context(), args, &stdout, &stderr)
			out := stdout.String() + stderr.String()
			require.Equal(t, tc.code, code, out)
			requireNoReordering(t, out)
			requireTerminalSafe(t, out)
			require.Contains(t, out, `alice\u061cx\u200ex`)
		})
	}
}
