package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"pigeon"
	"pigeon/policy"
)

// loadCatalog loads a policy directory and refuses one with lint errors.
// It returns the lint warnings too (unknown fields among them: a field the
// broker ignores), for the caller to show. A policy file that is not a
// regular file (a named pipe, a link to /dev/zero) or is larger than
// policy.MaxFileSize is refused by policy.LoadDir itself, without waiting
// on it.
func loadCatalog(dir string) (*pigeon.Catalog, []policy.Problem, error) {
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
	problems, err := policy.LintDir(dir)
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

// checkPolicyFiles refuses a policy directory, its subjects/ or schemas/,
// or a file in them that anyone on the machine may write. What is neither
// a regular file nor a directory (a named pipe, a link to /dev/zero, whose
// mode may well be 0666) is left to policy.LoadDir, which refuses it as
// not a regular file if it is a file the loader reads and ignores it if
// not.
func checkPolicyFiles(dir string) error {
	paths := []string{dir}
	for _, sub := range []string{"subjects", "schemas"} {
		d := filepath.Join(dir, sub)
		paths = append(paths, d)
		entries, _ := os.ReadDir(d) // a missing directory is LoadDir's to report
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
				continue
			}
			paths = append(paths, p)
		}
	}
	for _, p := range paths {
		if err := checkNotWorldWritable(p); err != nil {
			return err
		}
	}
	return nil
}
