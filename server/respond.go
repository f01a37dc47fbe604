package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"pigeon"
	"pigeon/internal/wire"
)

// writeJSON writes body (a value, or raw bytes) with status. Every body
// ends with a newline, so that a terminal prompt after curl starts on a
// line of its own; JSON readers ignore it. A publish result is written
// without reflection (wire.AppendResult), as json.Marshal would write it.
func writeJSON(w http.ResponseWriter, status int, body any) {
	switch v := body.(type) {
	case []byte:
		writeBody(w, status, v, true)
	case *pigeon.Result:
		buf := bodyBuffers.Get().(*[]byte)
		b := append(wire.AppendResult((*buf)[:0], v), '\n')
		writeBody(w, status, b, false)
		*buf = b[:0]
		putBodyBuffer(buf)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			writeError(w, pigeon.WrapError(pigeon.CodeInternal, err, "encode response"))
			return
		}
		writeBody(w, status, append(b, '\n'), false)
	}
}

// Header values of every JSON answer, shared: net/http reads them and never
// changes them. No answer is stored by a cache, the browser's included: it
// may hold messages, audit records, a grant's token.
var (
	headerJSON    = []string{"application/json"}
	headerNoSniff = []string{"nosniff"}
	headerNoStore = []string{"no-store"}
)

// writeBody writes b with status as a JSON answer; newline adds the final
// newline.
func writeBody(w http.ResponseWriter, status int, b []byte, newline bool) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	h["X-Content-Type-Options"] = headerNoSniff
	h["Cache-Control"] = headerNoStore
	w.WriteHeader(status)
	_, _ = w.Write(b)
	if newline {
		_, _ = w.Write(newlineBytes)
	}
}

var newlineBytes = []byte{'\n'}

// WriteError writes err as the server writes its own refusals: the body
// {"error":{"code","message","details"}} and a trailing newline, with the
// status of its code (the table of docs/http.md). A mounted handler
// answers with it to refuse in the same form as the API routes.
func WriteError(w http.ResponseWriter, err error) { wire.WriteHTTPError(w, err) }

// writeError is WriteError as the server writes its own refusals: with
// the message the client may see (wire.Public).
func writeError(w http.ResponseWriter, err error) { wire.WriteHTTPError(w, wire.Public(err)) }

// logStoreDamage logs err, the failure of a request r, when it is a
// store's damage, whose cause wire.Public keeps from the client.
func (s *Server) logStoreDamage(r *http.Request, err error) {
	if pigeon.ErrorCode(err) == pigeon.CodeStoreCorrupt {
		s.opts.Logger.ErrorContext(r.Context(), "store damage met by a request",
			"method", r.Method, "route", r.Pattern, "error", err.Error())
	}
}

// quoteCut is s quoted, cut to at most n bytes (wire.CutText) first.
func quoteCut(s string, n int) string { return strconv.Quote(wire.CutText(s, n)) }

// readBody reads the request body within limit and checks it with
// pigeon.CheckJSON: text that is not JSON, nests too deeply, repeats a
// member name (DUPLICATE_KEY) or is not UTF-8 (INVALID_UTF8) is refused
// before any route decodes it. An empty body is nil.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if err := plainBody(r); err != nil {
		return nil, err
	}
	if r.ContentLength > limit {
		return nil, pigeon.NewError(pigeon.CodePayloadTooLarge, "the body exceeds %d bytes", limit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(bareWriter(w), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, pigeon.NewError(pigeon.CodePayloadTooLarge, "the body exceeds %d bytes", limit)
		}
		return nil, pigeon.WrapError(pigeon.CodeBadRequest, err, "the body could not be read")
	}
	b = trimJSONSpace(b)
	if len(b) == 0 {
		return nil, nil
	}
	if err := pigeon.CheckJSON(b); err != nil {
		return nil, err
	}
	return b, nil
}

// trimJSONSpace is b without the white space JSON allows around a value
// (space, tab, CR, LF). Other white space (\v, \f, U+0085, U+00A0, U+3000:
// what bytes.TrimSpace also trims) stays, and the body is refused as not
// JSON, as every other JSON reader (a proxy, a firewall, a receiver)
// refuses it.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// plainBody refuses (BAD_REQUEST) a body marked with a content coding
// other than identity. The server decodes none: a body is read as the
// bytes sent. Taking a body marked gzip as plain JSON would let a proxy or
// firewall that reads it as the header says (a gzip stream it cannot
// decode, and lets through) judge other bytes than the broker acts on;
// and never inflating a body means no decompression bomb.
func plainBody(r *http.Request) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return pigeon.NewError(pigeon.CodeBadRequest,
					"the body has a Content-Encoding (%s): the server decodes none; send the body uncompressed", quoteCut(c, 32))
			}
		}
	}
	return nil
}

// decodeBody decodes a JSON object body into v; an empty body leaves v
// unchanged unless required.
func decodeBody(b []byte, v any, required bool) error {
	if len(b) == 0 {
		if required {
			return pigeon.NewError(pigeon.CodeBadRequest, "a JSON body is required")
		}
		return nil
	}
	if b[0] != '{' {
		return pigeon.NewError(pigeon.CodeBadRequest, "the body must be a JSON object")
	}
	if err := pigeon.CheckNames(b, v); err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return pigeon.NewError(pigeon.CodeBadRequest, "field %q must be %s", te.Field, te.Type.String())
		}
		return pigeon.NewError(pigeon.CodeBadRequest, "the body is not a valid request")
	}
	return nil
}

// subjectView is a subject as the reference broker lists it.
type subjectView struct {
	Name                string      `json:"name"`
	Mode                pigeon.Mode `json:"mode"`
	Intents             []string    `json:"intents"`
	Classification      string      `json:"classification"`
	Regions             []string    `json:"regions"`
	IdempotencyRequired bool        `json:"idempotencyRequired"`
	ReplayAllowed       bool        `json:"replayAllowed"`
}

func viewSubject(p pigeon.SubjectPolicy) subjectView {
	v := subjectView{Name: p.Name, Mode: p.Mode, Intents: p.Intents, Classification: p.Data.Classification,
		Regions: p.RegionPolicy.AllowedRegions, IdempotencyRequired: p.Delivery.Idempotency.Required, ReplayAllowed: p.Replay.Allowed}
	if v.Mode == "" {
		v.Mode = pigeon.ModePubSub
	}
	if v.Intents == nil {
		v.Intents = []string{}
	}
	if v.Regions == nil {
		v.Regions = []string{}
	}
	if v.Classification == "" {
		v.Classification = pigeon.DefaultClassification
	}
	return v
}

// messagesBody is {"messages":[…]}, never null.
func messagesBody(msgs []*pigeon.Message) any {
	if msgs == nil {
		msgs = []*pigeon.Message{}
	}
	return struct {
		Messages []*pigeon.Message `json:"messages"`
	}{msgs}
}

// publishStatus is the status of a publish answer: 202 accepted, 200
// duplicate.
func publishStatus(res *pigeon.Result) int {
	if res.Status == pigeon.StatusDuplicate {
		return http.StatusOK
	}
	return http.StatusAccepted
}
