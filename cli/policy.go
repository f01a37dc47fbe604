package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"pigeon"
	"pigeon/policy"
)

// loadCatalog loads a policy directory and refuses one with lint errors.
// It returns the lint warnings too (unknown fields among them: a field the
// broker ignores), for the caller to show.
func loadCatalog(dir string) (*pigeon.Catalog, []policy.Problem, error) {
	if err := checkPolicyFileKinds(dir); err != nil {
		return nil, nil, loadError(err)
	}
	if err := checkPolicyFiles(dir); err != nil {
		return nil, nil, loadError(err)
	}
	c, err := policy.LoadDir(dir)
	if err != nil {
		return nil, nil, loadError(err)
	}
	problems, err := policy.LintDir(dir)
	if err != nil {
		return nil, nil, loadError(err)
	}
	var warnings, errs []policy.Problem
	for _, p := range problems {
		if p.IsError() {
			errs = append(errs, p)
		} else {
			warnings = append(warnings, p)
		}
	}
	if len(errs) > 0 {
		// Typed as the broker types a catalog it refuses (docs/policy.md,
		// "Linting"), so that a caller can tell a bad policy by its code.
		e := pigeon.NewError(pigeon.CodePolicyInvalid, "policy %s (run `pigeon policy lint %s` for every problem)", errs[0], dir)
		e.Details = map[string]any{"file": errs[0].File, "subject": errs[0].Subject, "field": errs[0].Field, "problems": errs}
		return nil, nil, e
	}
	return c, warnings, nil
}

func policyLintCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: pigeon policy lint DIR")
		return 2
	}
	dir := args[0]
	err := checkPolicyFileKinds(dir)
	var problems []policy.Problem
	if err == nil {
		problems, err = policy.LintDir(dir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pigeon policy lint: %s\n", printable(loadError(err).Error()))
		return 1
	}
	errs := 0
	for _, p := range problems {
		fmt.Fprintln(stdout, printable(p.String()))
		if p.IsError() {
			errs++
		}
	}
	if errs > 0 {
		fmt.Fprintf(stdout, "%s: %d errors, %d warnings\n", dir, errs, len(problems)-errs)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok (%d warnings)\n", dir, len(problems))
	return 0
}

// loadError reports a catalog that does not load as POLICY_INVALID, as the
// broker does.
func loadError(err error) error {
	return pigeon.WrapError(pigeon.CodePolicyInvalid, err, "%v", err)
}

// checkPolicyFileKinds refuses a policy file (one the loader reads: a
// .json, .yaml or .yml of subjects/ or schemas/) that is not a regular
// file, links followed: the loader would wait on a named pipe for a writer
// that never comes, and read a device such as /dev/zero until memory ran
// out. A directory handed over by someone else may hold either.
func checkPolicyFileKinds(dir string) error {
	for _, sub := range []string{"subjects", "schemas"} {
		d := filepath.Join(dir, sub)
		entries, _ := os.ReadDir(d) // a missing directory is LoadDir's to report
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".json", ".yaml", ".yml":
			default:
				continue
			}
			p := filepath.Join(d, e.Name())
			if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
				return fmt.Errorf("%s: not a regular file (mode %s)", p, fi.Mode())
			}
		}
	}
	return nil
}

// checkPolicyFiles refuses a policy directory, its subjects/ or schemas/,
// or a file in them that anyone on the machine may write.
func checkPolicyFiles(dir string) error {
	paths := []string{dir}
	for _, sub := range []string{"subjects", "schemas"} {
		d := filepath.Join(dir, sub)
		paths = append(paths, d)
		entries, _ := os.ReadDir(d) // a missing directory is LoadDir's to report
		for _, e := range entries {
			paths = append(paths, filepath.Join(d, e.Name()))
		}
	}
	for _, p := range paths {
		if err := checkNotWorldWritable(p); err != nil {
			return err
		}
	}
	return nil
}
