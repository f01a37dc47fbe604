package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"pigeon"
)

// TestAuditVerifyPrintsTerminalSafe: the names of the audit chains come
// from the NATS servers (a stream PIGEON_A_<node>), and anyone who can
// create a stream there can put an escape sequence, a C1 control or a
// formatting character that reorders text in one. `pigeon-cluster audit
// verify` prints every node name and error terminal-safe: nothing it
// prints holds a character pigeon.IsControlRune refuses but the newline
// ending each line.
func TestAuditVerifyPrintsTerminalSafe(t *testing.T) {
	url := runServer(t)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	const node = "n\x1b]0;owned\x07\u009b2J\u202egnp\u2028x"
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "PIGEON_A_" + node, Subjects: []string{"pigeon.a." + node}})
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"audit", "verify", "--store", url}, &out, &errb)
	printed := out.String() + errb.String()
	require.NotEmpty(t, printed, "exit %d", code)
	for l := range strings.Lines(printed) {
		l = strings.TrimSuffix(l, "\n")
		require.Equal(t, -1, strings.IndexFunc(l, pigeon.IsControlRune), "%q", l)
	}
	require.Contains(t, printed, `n\x1b]0;owned\x07\u009b2J\u202egnp\u2028x`)
}
