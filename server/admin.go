package server

import (
	"errors"
	"net/http"

	"pigeon"
)

// RoleAdmin is the role that manages accounts, roles and grants.
const RoleAdmin = pigeon.RoleAdmin

// adminRoutes serves the account, role, grant and key API, and the purge
// of a removed subject's messages. Path segments
// that hold a principal id are percent-encoded (spiffe%3A%2F%2F…).
//
// This table is where admin operations are authorized: the Engine methods
// behind it trust their caller, as they trust an embedding application.
// A caller refused here for want of the role is audited (access.denied).
func (s *Server) adminRoutes() {
	s.route("/v1/accounts", map[string]endpoint{
		http.MethodGet:  {admin, listAccounts},
		http.MethodPost: {admin, createAccount},
	})
	s.route("/v1/accounts/{id}", map[string]endpoint{
		http.MethodGet:    {admin, getAccount},
		http.MethodDelete: {admin, deleteAccount},
	})
	s.route("/v1/accounts/{id}/roles/{role}", map[string]endpoint{
		http.MethodPut:    {admin, addAccountRole},
		http.MethodDelete: {admin, removeAccountRole},
	})
	s.route("/v1/accounts/{id}/keys", map[string]endpoint{
		http.MethodGet: {member, getKeys},
		http.MethodPut: {self, putKeys},
	})
	s.route("/v1/roles", map[string]endpoint{http.MethodGet: {admin, listRoles}})
	s.route("/v1/roles/{name}", map[string]endpoint{
		http.MethodGet:    {admin, getRole},
		http.MethodPut:    {admin, putRole},
		http.MethodDelete: {admin, deleteRole},
	})
	s.route("/v1/grants", map[string]endpoint{http.MethodPost: {admin, issueGrant}})
	s.route("/v1/grants/{jti}", map[string]endpoint{http.MethodDelete: {admin, revokeGrant}})
	s.route("/v1/subjects/{name}/messages", map[string]endpoint{http.MethodDelete: {admin, purgeSubject}})
}

// purgeSubject removes the retained messages of a subject no longer in
// the catalog (Engine.PurgeSubject, which checks the role again and
// audits its own refusals as purge.denied).
func purgeSubject(rq *request) (int, any, error) {
	n, err := rq.s.e.PurgeSubject(rq.ctx, rq.p, rq.r.PathValue("name"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int{"purged": n}, nil
}

type accountBody struct {
	Account pigeon.Account `json:"account"`
}

// listAccounts answers GET /v1/accounts: one page of the accounts by id
// (pigeon.Engine.ListAccountsPage), at most ?max= (default and cap
// maxRecords) after the id ?after= names, and fewer when they would take
// the answer past its byte budget (namedPage: maxPageBytes); "next", when
// more follow, is the ?after= of the next page. A directory of a million
// accounts is never read whole for one request. The page is a read of the
// server's read pool, as a page of the audit log is (reservePage).
func listAccounts(rq *request) (int, any, error) {
	after, n, err := rq.namePage()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reservePage(); err != nil {
		return 0, nil, err
	}
	as, next, err := rq.s.e.ListAccountsPage(rq.ctx, after, n)
	if err != nil {
		return 0, nil, rq.afterRefused(err, "an account id")
	}
	body, err := namedPage("accounts", as, next, func(a *pigeon.Account) string { return a.ID })
	rq.keepPage(len(as), body)
	return http.StatusOK, body, err
}

func createAccount(rq *request) (int, any, error) {
	var in struct {
		ID         string            `json:"id"`
		Attributes map[string]string `json:"attributes"`
		Roles      []string          `json:"roles"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	a, err := rq.s.e.CreateAccount(rq.ctx, pigeon.Account{ID: in.ID, Attributes: in.Attributes, Roles: in.Roles})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, accountBody{a}, nil
}

func getAccount(rq *request) (int, any, error) {
	a, err := rq.s.e.GetAccount(rq.ctx, rq.r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, accountBody{a}, nil
}

func deleteAccount(rq *request) (int, any, error) {
	if err := rq.s.e.DeleteAccount(rq.ctx, rq.r.PathValue("id")); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]bool{"ok": true}, nil
}

func addAccountRole(rq *request) (int, any, error) {
	a, err := rq.s.e.AddAccountRole(rq.ctx, rq.r.PathValue("id"), rq.r.PathValue("role"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, accountBody{a}, nil
}

func removeAccountRole(rq *request) (int, any, error) {
	a, err := rq.s.e.RemoveAccountRole(rq.ctx, rq.r.PathValue("id"), rq.r.PathValue("role"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, accountBody{a}, nil
}

// getKeys answers the keys an account publishes, to any authenticated
// principal: senders seal for them and receivers verify with them. An id
// that names no account is answered as an account that publishes no key
// (200, no keys), not 404: otherwise any principal could find out which
// ids have accounts by asking, where only the accounts that publish keys
// make themselves known.
func getKeys(rq *request) (int, any, error) {
	keys, err := rq.s.e.AccountKeys(rq.ctx, rq.r.PathValue("id"))
	if err != nil && pigeon.ErrorCode(err) != pigeon.CodeNotFound {
		return 0, nil, err
	}
	if keys == nil {
		keys = []pigeon.PublicKey{}
	}
	return http.StatusOK, map[string]any{"keys": keys}, nil
}

// putKeys replaces the keys an account publishes, as the caller
// (Engine.PutAccountKeysAs): the account itself publishes what it likes;
// an admin acting on another account, and any grant token, may only take
// keys away or narrow their windows, judged under the lock that makes the
// change, so a list read before the account removed a key cannot put it
// back. A key put under an account is what senders seal for and what
// verifies as the account: were an admin free to list one of its own, it
// (or whoever holds an admin token) would read every payload sealed for
// the account from then on and sign as it, though no private key of the
// account ever left its program. A refusal of who asks (403 FORBIDDEN) or
// of a key another account owns (409 CONFLICT) is audited as
// access.denied, coalesced per principal and code like every refusal of
// who asks: an account looping on another's key writes no record per try.
func putKeys(rq *request) (int, any, error) {
	var in struct {
		Keys []pigeon.PublicKey `json:"keys"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	a, err := rq.s.e.PutAccountKeysAs(rq.ctx, rq.p, rq.r.PathValue("id"), in.Keys)
	if err != nil {
		var pe *pigeon.Error
		if errors.As(err, &pe) && (pe.Code == pigeon.CodeForbidden || pe.Code == pigeon.CodeConflict) {
			return 0, nil, rq.s.denied(rq.r, rq.p, pe)
		}
		return 0, nil, err
	}
	if !rq.p.HasRole(RoleAdmin) {
		// The account's attributes are the operator's record of it
		// (status, risk, tenant), which deny rules and conditions read;
		// GET /v1/accounts/{id} keeps them to admins, and publishing keys
		// does not show them to the account either. (Its roles it sees
		// in its contracts.)
		a.Attributes = nil
	}
	return http.StatusOK, accountBody{a}, nil
}

type roleBody struct {
	Role pigeon.Role `json:"role"`
}

// listRoles answers GET /v1/roles: one page of the roles by name
// (pigeon.Engine.ListRolesPage), paged as listAccounts pages the accounts.
func listRoles(rq *request) (int, any, error) {
	after, n, err := rq.namePage()
	if err != nil {
		return 0, nil, err
	}
	if err := rq.reservePage(); err != nil {
		return 0, nil, err
	}
	rs, next, err := rq.s.e.ListRolesPage(rq.ctx, after, n)
	if err != nil {
		return 0, nil, rq.afterRefused(err, "a role name")
	}
	body, err := namedPage("roles", rs, next, func(r *pigeon.Role) string { return r.Name })
	rq.keepPage(len(rs), body)
	return http.StatusOK, body, err
}

func getRole(rq *request) (int, any, error) {
	r, err := rq.s.e.GetRole(rq.ctx, rq.r.PathValue("name"))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, roleBody{r}, nil
}

func putRole(rq *request) (int, any, error) {
	var in struct {
		Permissions []pigeon.Permission `json:"permissions"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	r, err := rq.s.e.PutRole(rq.ctx, pigeon.Role{Name: rq.r.PathValue("name"), Permissions: in.Permissions})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, roleBody{r}, nil
}

func deleteRole(rq *request) (int, any, error) {
	if err := rq.s.e.DeleteRole(rq.ctx, rq.r.PathValue("name")); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]bool{"ok": true}, nil
}

func issueGrant(rq *request) (int, any, error) {
	var in struct {
		Account string   `json:"account"`
		Roles   []string `json:"roles"`
		TTLMs   int64    `json:"ttlMs"`
	}
	if err := rq.body(&in, true); err != nil {
		return 0, nil, err
	}
	ttl, err := pigeon.TTLFromMillis(in.TTLMs)
	if err != nil {
		return 0, nil, err
	}
	g, err := rq.s.e.IssueGrant(rq.ctx, in.Account, in.Roles, ttl)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, g, nil
}

func revokeGrant(rq *request) (int, any, error) {
	if err := rq.s.e.RevokeGrant(rq.ctx, rq.r.PathValue("jti")); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]bool{"ok": true}, nil
}
