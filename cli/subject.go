package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// subjectPurgeCmd runs pigeon subject purge NAME: DELETE
// /v1/subjects/{name}/messages, which removes every retained message of a
// subject no longer in the catalog (role admin; docs/operations.md). It
// prints how many messages went; a refusal is the typed error, exit 1.
func subjectPurgeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const cmd = "subject purge"
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: pigeon subject purge NAME [flags]\n\nRemove every retained message of NAME, a subject no longer in the catalog (role admin).\n\nflags:")
		fs.PrintDefaults()
	}
	a := clientFlags(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if len(pos) != 1 || pos[0] == "" {
		fmt.Fprintf(stderr, "pigeon %s: one subject name is required\n", cmd)
		return 2
	}
	subject := pos[0]
	b, err := a.do(ctx, http.MethodDelete, "/v1/subjects/"+url.PathEscape(subject)+"/messages", nil)
	if err != nil {
		return fail(stderr, cmd, err)
	}
	var out struct {
		Purged *int `json:"purged"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Purged == nil {
		return fail(stderr, cmd, fmt.Errorf("unexpected answer: %s", b))
	}
	messages := "messages"
	if *out.Purged == 1 {
		messages = "message"
	}
	fmt.Fprintf(stdout, "pigeon %s: %d %s of %s purged\n", cmd, *out.Purged, messages, subject)
	return 0
}
