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
	if !rq.p.HasRole(RoleAdmin) && man.Account != rq.p.ID {
		return 0, nil, rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden, "only an admin may deploy a program that runs as another account"))
	}
	info, err := rq.s.opts.Programs.Deploy(rq.ctx, rq.p, rq.r.PathValue("name"), man, in.Module)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if info.Version == 1 {
		status = http.StatusCreated
	}
	return status, map[string]any{"program": info}, nil
}

func getProgram(rq *request) (int, any, error) {
	info, err := rq.s.opts.Programs.Get(rq.ctx, rq.r.PathValue("name"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"program": info}, nil
}

func listPrograms(rq *request) (int, any, error) {
	return http.StatusOK, map[string]any{"programs": rq.s.opts.Programs.List(rq.ctx)}, nil
}

func removeProgram(rq *request) (int, any, error) {
	name := rq.r.PathValue("name")
	if !rq.p.HasRole(RoleAdmin) {
		info, err := rq.s.opts.Programs.Get(rq.ctx, name)
		if err != nil {
			return 0, nil, err
		}
		if info.Manifest.Account != rq.p.ID {
			return 0, nil, rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden, "only an admin may remove a program that runs as another account"))
		}
	}
	if err := rq.s.opts.Programs.Remove(rq.ctx, rq.p, name); err != nil {
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
	if !rq.p.HasRole(RoleAdmin) {
		info, err := rq.s.opts.Programs.Get(rq.ctx, name)
		if err != nil {
			return 0, nil, err
		}
		rev, err := info.RollbackTarget(in.Version)
		if err != nil {
			return 0, nil, err
		}
		if info.Manifest.Account != rq.p.ID || rev.Manifest.Account != rq.p.ID {
			return 0, nil, rq.s.denied(rq.r, rq.p, pigeon.NewError(pigeon.CodeForbidden, "only an admin may roll back a program that runs as another account"))
		}
		in.Version = rev.Version // the version checked, whatever is deployed meanwhile
	}
	info, err := rq.s.opts.Programs.Rollback(rq.ctx, rq.p, name, in.Version)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"program": info}, nil
}
