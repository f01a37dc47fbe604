package programs_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/programs"
	"pigeon/store/memory"
)

// TestRestoreSkipsAStoredProgramWithAnInvalidName: a program is stored
// under its name, and a deploy takes only a valid one (ValidName); a
// store changed to hold a program under another key (upper case, a
// space, a control character, too long) was restored under it: bound,
// shown and listed, and a page of ListPage named it as next, the after
// the following page refuses (INVALID_ARGUMENT), so that no program after
// it could be listed. It is skipped at start, as the directory skips a
// stored role whose name is not a valid id: not bound, not shown, not
// listed, with a logged warning naming the key and a program.refused
// record naming it quoted; the record stays in the store for its
// operator. The
// programs stored under valid names are restored and bound as before.
func TestRestoreSkipsAStoredProgramWithAnInvalidName(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	_, err := f.mg.Deploy(ctx, admin, "ok", manifest(group("ok")), modOK)
	require.NoError(t, err)
	raw, err := f.st.Get(ctx, "programs", "ok")
	require.NoError(t, err)
	require.NoError(t, f.mg.Remove(ctx, admin, "ok"))

	invalid := []string{"Bad Name", "UPPER", "a\nb", "-dash", strings.Repeat("a", 64)}
	kv := memory.New(nil)
	t.Cleanup(func() { _ = kv.Close(ctx) })
	for _, name := range append([]string{"ok"}, invalid...) {
		require.NoError(t, kv.Put(ctx, "programs", name, raw))
	}
	mg, logs := loggedManager(t, f, programs.Options{KV: kv})

	in, err := mg.Get(ctx, "ok")
	require.NoError(t, err)
	require.True(t, in.Bound, "a program under a valid name is restored: %s", in.Error)
	var listed []string
	after := ""
	for range 10 {
		page, next, err := mg.ListPage(ctx, after, 1, nil)
		require.NoError(t, err, "after %q: a page's next is always an after the next page takes", after)
		for _, p := range page {
			listed = append(listed, p.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	require.Equal(t, []string{"ok"}, listed)
	var names []string
	for _, p := range mg.List(ctx) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"ok"}, names)

	refused := f.audited(t, pigeon.EventProgramRefused)
	require.Len(t, refused, len(invalid))
	for _, name := range invalid {
		_, err := mg.Get(ctx, name)
		require.Equal(t, pigeon.CodeProgramNotFound, pigeon.ErrorCode(err), "%q", name)
		ref := "program:" + strconv.Quote(name)
		require.True(t, slices.ContainsFunc(refused, func(r pigeon.AuditRecord) bool {
			return r.Ref == ref && r.Code == string(pigeon.CodeProgramInvalid)
		}), "%q: audited program.refused", name)
		key, err := json.Marshal(name)
		require.NoError(t, err)
		require.Contains(t, logs.String(), string(key), "%q: the warning names the key", name)
		stored, err := kv.Get(ctx, "programs", name)
		require.NoError(t, err, "%q: the record stays in the store", name)
		require.Equal(t, raw, stored)
	}
	require.Equal(t, len(invalid), strings.Count(logs.String(), `"level":"WARN"`))
}
