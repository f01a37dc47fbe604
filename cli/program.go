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

// programCmd runs pigeon program deploy|list|show|remove|rollback
// (docs/programs.md).
func programCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	cmd := "program " + sub
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := clientFlags(fs)
	module := fs.String("module", "", "deploy: the WebAssembly module (.wasm)")
	manifest := fs.String("manifest", "", "deploy: the manifest (JSON: route, account, publishes, limits, env)")
	version := fs.Int("version", 0, "rollback: the version to deploy again (default: the one before the current)")
	limit, after := nameListingFlags(fs, "list: ", "programs", "program name")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return parseExit(err)
	}
	if sub == "list" {
		// One line a program, the same JSON, terminal-safe: a manifest is
		// its deployer's text, and the server's answer may hold a
		// carriage return between tokens.
		return nameListing{cmd: cmd, noun: "programs", path: "/v1/programs", field: "programs", key: "name", after: *after, max: limit()}.run(ctx, a, stdout, stderr)
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "pigeon %s: one program name is required\n", cmd)
		return 2
	}
	path := "/v1/programs/" + url.PathEscape(pos[0])
	var b []byte
	switch sub {
	case "show":
		b, err = a.do(ctx, http.MethodGet, path, nil)
	case "remove":
		b, err = a.do(ctx, http.MethodDelete, path, nil)
	case "rollback":
		b, err = a.do(ctx, http.MethodPost, path+"/rollback", map[string]int{"version": *version})
	default: // deploy
		if *module == "" || *manifest == "" {
			fmt.Fprintf(stderr, "pigeon %s: --module and --manifest are required\n", cmd)
			return 2
		}
		var wasm, man []byte
		if wasm, err = readRegularFile(*module, maxPayloadFile); err == nil {
			man, err = readRegularFile(*manifest, maxConfigFile)
		}
		if err != nil {
			return fail(stderr, cmd, err)
		}
		if !json.Valid(man) {
			fmt.Fprintf(stderr, "pigeon %s: %s is not JSON\n", cmd, *manifest)
			return 2
		}
		b, err = a.do(ctx, http.MethodPut, path, map[string]any{"manifest": json.RawMessage(man), "module": wasm})
	}
	if err != nil {
		return fail(stderr, cmd, err)
	}
	printJSON(stdout, b)
	return 0
}
