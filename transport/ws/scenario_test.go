package ws_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// scenario fails the test unless id is a scenario of the clients' shared
// list (clients/conformance/scenarios.json) listed for the Go client. A
// test that runs one names it so, by its id in quotes: the coverage check
// of clients/conformance finds it there.
func scenario(t *testing.T, id string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "clients", "conformance", "scenarios.json"))
	require.NoError(t, err)
	var f struct {
		Scenarios []struct {
			ID      string   `json:"id"`
			Clients []string `json:"clients"`
		} `json:"scenarios"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	for _, s := range f.Scenarios {
		if s.ID == id {
			require.True(t, slices.Contains(s.Clients, "go"), "scenario %s is not listed for go", id)
			return
		}
	}
	t.Fatalf("scenario %s is not in scenarios.json", id)
}
