package server

import (
	"encoding/json"
	"net/http"

	"pigeon"
	"pigeon/programs"
)

// RolePrograms is the role that deploys, lists and removes programs
// (docs/programs.md) beside RoleAdmin. A principal holding it but not
// RoleAdmin may deploy only programs that run as its own account.
const RolePrograms = "programs"

// DefaultMaxProgramBody bounds a program deploy's body (the module is
// base64 in it): a 32 MiB module and its manifest.
const DefaultMaxProgramBody = 48 << 20

// programRoutes serves /v1/programs when Options.Programs is set.
func (s *Server) programRoutes() {
	if s.opts.Programs == nil {
		return
	}
	s.route("/v1/programs", map[string]endpoint{http.MethodGet: {operator, listPrograms}})
	s.route("/v1/programs/{name}", map[string]endpoint{
		http.MethodGet:    {operator, getProgram},
		http.MethodPut:    {operator, deployProgram},
		http.MethodDelete: {operator, removeProgram},
	})
	s.route("/v1/programs/{name}/rollback", map[string]endpoint{http.MethodPost: {operator, rollbackProgram}})
}

// deployBody is the body of PUT /v1/programs/{name}: the manifest and
// the module, base64 in JSON.
type deployBody struct {
	Manifest json.RawMessage `json:"manifest"`
	Module   []byte          `json:"module"`
}

func deployProgram(rq *request) (int, any, error) {
	b, err := readBody(rq.w, rq.r, rq.s.opts.MaxProgramBody)
	if err != nil {
		return 0, nil, err
	}
	var in deployBody
	if err := decodeBody(b, &in, true); err != nil {
		return 0, nil, err
	}
	man, err := programs.ParseManifest(in.Manifest)
	if err != nil {
		return 0, nil, err
	}
	name := rq.r.PathValue("name")
	var pre []programs.Precondition
	if !rq.p.HasRole(RoleAdmin) {
		if err := rq.mayRunAs(man.Account, "deploy"); err != nil {
			return 0, nil, err
		}
		// A deploy under a name in use replaces the program that runs
		// there: for a program of another account, a removal this
		// principal may not make (removeProgram), and a takeover of its
		// name and history. Checked under the program's lock, with the
		// deploy: a deploy of another account under the same name may
		// come first.
		pre = append(pre, rq.ownProgram("replace"))
	}
	programChangeHook(name)
	info, err := rq.s.opts.Programs.Deploy(rq.ctx, rq.p, name, man, in.Module, pre...)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if info.Version == 1 {
		status = http.StatusCreated
	}
	return status, map[string]any{"program": rq.shown(info)}, nil
}

// mayRunAs returns the refusal (403 FORBIDDEN, audited) of a caller
// without RoleAdmin that would deploy (or roll back to) a program running
// as account, or nil when it may: only as its own account, and not by a
// grant token. A program runs under a contract negotiated with every role
// its account holds, so a grant, which hands out some of the account's
// roles and not the account (it may not publish the account's keys
// either), would otherwise run code of its choosing with the roles it was
// not given.
func (rq *request) mayRunAs(account, what string) error {
	switch {
	case account != rq.p.ID:
		return rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden, "only an admin may %s a program that runs as another account", what))
	case rq.p.Method == pigeon.AuthGrant:
		return rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden,
			"a program runs with every role of its account: only the account itself (not a grant token of it) or an admin may %s one", what))
	}
	return nil
}

// getProgram shows a program; to a principal without RoleAdmin, only one
// that runs as its own account: another account's (its manifest's env, its
// contract, its history) is PROGRAM_NOT_FOUND, as a name none holds.
func getProgram(rq *request) (int, any, error) {
	name := rq.r.PathValue("name")
	info, err := rq.s.opts.Programs.Get(rq.ctx, name)
	if err == nil && !rq.mayRead(info) {
		err = pigeon.NewError(pigeon.CodeProgramNotFound, "no program %s", name)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"program": rq.shown(info)}, nil
}

// listPrograms lists one page of the programs by name
// (programs.Manager.ListPage), paged as listAccounts pages the accounts;
// to a principal without RoleAdmin, only those that run as its own
// account: the others take no place in its pages, and no "next" it is
// answered names one. The page is a read of the server's read pool
// (reservePage).
func listPrograms(rq *request) (int, any, error) {
	after, n, err := rq.namePage()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reservePage(); err != nil {
		return 0, nil, err
	}
	page, next, err := rq.s.opts.Programs.ListPage(rq.ctx, after, n, rq.mayRead)
	if err != nil {
		return 0, nil, rq.afterRefused(err, "a program name")
	}
	for i := range page {
		page[i] = rq.shown(page[i])
	}
	body, err := namedPage("programs", page, next, func(in *programs.Info) string { return in.Name })
	rq.keepPage(len(page), body)
	return http.StatusOK, body, err
}

// mayRead reports whether the caller may see program info: an admin any,
// another principal those that run as its own account, as it may change
// only those.
func (rq *request) mayRead(info programs.Info) bool {
	return rq.p.HasRole(RoleAdmin) || info.Manifest.Account == rq.p.ID
}

// shown is what the caller sees of info, a program it may read: an admin
// all of it; another principal only the earlier versions that ran as its
// own account. An admin may move a program to another account, and the
// versions from before the move are the previous account's: their
// manifests (its env, its routes) and who deployed them are not the new
// account's to read. A version whose manifest is not kept is not shown
// either, as whose it was cannot be told. info is not changed: its
// History is the Manager's.
func (rq *request) shown(info programs.Info) programs.Info {
	if rq.p.HasRole(RoleAdmin) {
		return info
	}
	var own []programs.Revision
	for _, r := range info.History {
		if r.Manifest != nil && r.Manifest.Account == rq.p.ID {
			own = append(own, r)
		}
	}
	info.History = own
	return info
}

// ownProgram is the precondition of a change by a principal without
// RoleAdmin to the program that runs under a name: none runs there, or it
// runs as the principal's own account; otherwise 403 FORBIDDEN, audited.
func (rq *request) ownProgram(what string) programs.Precondition {
	return func(cur *programs.Info) error {
		if cur != nil && cur.Manifest.Account != rq.p.ID {
			return rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden, "only an admin may %s a program that runs as another account", what))
		}
		return nil
	}
}

// programChangeHook runs after a request's own checks and before the
// manager changes the program (tests set it to change the program there).
var programChangeHook = func(name string) {}

func removeProgram(rq *request) (int, any, error) {
	name := rq.r.PathValue("name")
	var pre []programs.Precondition
	if !rq.p.HasRole(RoleAdmin) {
		pre = append(pre, rq.ownProgram("remove"))
	}
	programChangeHook(name)
	if err := rq.s.opts.Programs.Remove(rq.ctx, rq.p, name, pre...); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]bool{"ok": true}, nil
}

// maxRollbackBody bounds the body of a rollback ({"version": N}).
const maxRollbackBody = 4 << 10

// rollbackBody is the body of POST /v1/programs/{name}/rollback: the
// version to deploy again (omitted: the one before the current).
type rollbackBody struct {
	Version int `json:"version"`
}

// rollbackProgram deploys an earlier version again. A principal without
// RoleAdmin may roll back only a program that runs, and would run, as its
// own account.
func rollbackProgram(rq *request) (int, any, error) {
	b, err := readBody(rq.w, rq.r, maxRollbackBody)
	if err != nil {
		return 0, nil, err
	}
	var in rollbackBody
	if err := decodeBody(b, &in, false); err != nil {
		return 0, nil, err
	}
	name := rq.r.PathValue("name")
	var pre []programs.Precondition
	if !rq.p.HasRole(RoleAdmin) {
		// Checked under the program's lock, with the rollback: the
		// program that runs and the version it goes back to are the
		// ones checked, whatever another request deploys meanwhile.
		// Whose program it is comes first: the version named is looked
		// up only in the caller's own, so its answers (the one running,
		// none, pruned) never tell the versions of another account's.
		pre = append(pre, func(cur *programs.Info) error {
			if cur == nil {
				return pigeon.NewError(pigeon.CodeProgramNotFound, "no program %s", name)
			}
			if err := rq.ownProgram("roll back")(cur); err != nil {
				return err
			}
			rev, err := cur.RollbackTarget(in.Version)
			if err != nil {
				return err
			}
			if rev.Manifest.Account != rq.p.ID {
				// A version that ran as another account is not shown to
				// this principal (shown): refused as a version none holds,
				// so the answer does not tell that it ran as another
				// account; the audit records the refusal as it is.
				_ = rq.mayRunAs(rev.Manifest.Account, "roll back")
				return pigeon.NewError(pigeon.CodeProgramNotFound, "program %s has no version %d", name, rev.Version)
			}
			return rq.mayRunAs(rev.Manifest.Account, "roll back")
		})
	}
	programChangeHook(name)
	info, err := rq.s.opts.Programs.Rollback(rq.ctx, rq.p, name, in.Version, pre...)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"program": rq.shown(info)}, nil
}
