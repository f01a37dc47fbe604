package server

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"pigeon"
)

// queryParams names the query parameters each route takes, by method and
// pattern; a route not listed takes none. A request whose query string
// holds another parameter, a parameter twice, or a malformed pair is
// refused BAD_REQUEST before its route runs: a mistyped ?form= or a
// second ?from= appended by a proxy would otherwise be read as something
// the caller did not ask for (the first page of the log, say) without a
// word.
var queryParams = map[string][]string{
	"GET /v1/audit":               {"from", "max"},
	"GET /v1/audit/receipts/{id}": {"after", "max"},
	"GET /v1/quarantine":          {"since", "after", "max"},
	"GET /v1/accounts":            {"after", "max"},
	"GET /v1/roles":               {"after", "max"},
	"GET /v1/programs":            {"after", "max"},
}

// parseQuery reads r's query string strictly: every parameter must be one
// of takes, given once.
func parseQuery(r *http.Request, takes []string) (url.Values, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, pigeon.NewError(pigeon.CodeBadRequest, "the query string is malformed: %s", queryFault(err))
	}
	for name, vs := range q {
		switch {
		case !slices.Contains(takes, name) && len(takes) == 0:
			return nil, pigeon.NewError(pigeon.CodeBadRequest, "query parameter %s is not taken here: this route takes none", quoteCut(name, 64))
		case !slices.Contains(takes, name):
			return nil, pigeon.NewError(pigeon.CodeBadRequest, "query parameter %s is not taken here; this route takes %s",
				quoteCut(name, 64), strings.Join(takes, ", "))
		case len(vs) > 1:
			return nil, pigeon.NewError(pigeon.CodeBadRequest, "query parameter %s is given %d times: give it once", name, len(vs))
		}
	}
	return q, nil
}

// queryFault is what is wrong with a query string url.ParseQuery refused,
// without echoing the caller's text at length.
func queryFault(err error) string {
	switch {
	case strings.Contains(err.Error(), "semicolon"):
		return "it separates parameters with ';'; use '&'"
	case strings.Contains(err.Error(), "escape"):
		return "it holds an invalid %-escape"
	}
	return "it cannot be read as name=value pairs"
}

// queryInt reads an optional non-negative integer query parameter.
func (rq *request) queryInt(name string) (uint64, error) {
	v := rq.query.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 63)
	if err != nil {
		return 0, pigeon.NewError(pigeon.CodeBadRequest, "query parameter %s must be a non-negative integer", name)
	}
	return n, nil
}

// queryTime reads an optional RFC 3339 query parameter.
func (rq *request) queryTime(name string) (time.Time, error) {
	v := rq.query.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, pigeon.NewError(pigeon.CodeBadRequest, "query parameter %s must be an RFC 3339 time", name)
	}
	return t, nil
}
