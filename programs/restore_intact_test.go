package programs_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
)

// A stored program whose record no deploy writes is refused at start,
// STORE_CORRUPT, audited and listed with its error: one whose module is
// not the one its digest names (the store changed or damaged) would run
// code other than the code deployed and audited under that digest; one
// naming another program than its key would run one program's record
// under another's name. Before, both were bound as they were.
func TestRestoreRefusesARecordNoDeployWrites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(rec map[string]any)
	}{
		{"a module that is not its digest's", func(rec map[string]any) {
			raw, err := json.Marshal(modTrap)
			if err != nil {
				panic(err)
			}
			var mod any
			if err := json.Unmarshal(raw, &mod); err != nil {
				panic(err)
			}
			rec["module"] = mod
		}},
		{"another program's name", func(rec map[string]any) { rec["name"] = "other" }},
		{"no digest", func(rec map[string]any) { delete(rec, "sha256") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := restartedWithRecord(t, tc.change)
			in, err := f.mg.Get(context.Background(), "ok")
			require.NoError(t, err)
			require.False(t, in.Bound, "bound from a record no deploy writes")
			require.Contains(t, in.Error, "STORE_CORRUPT")
			refused := f.audited(t, pigeon.EventProgramRefused)
			require.Len(t, refused, 1)
			require.Equal(t, string(pigeon.CodeStoreCorrupt), refused[0].Code)
		})
	}
}
