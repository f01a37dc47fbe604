package server

import (
	"embed"
	"html/template"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"pigeon"
	"pigeon/docs"
)

// consoleFiles are the console's static assets, in the binary: the page
// needs no network beyond this server.
//
//go:embed console/index.html console/app.js console/app.css
var consoleFiles embed.FS

// securityHeaders are set on every console and docs page: no framing
// (frame-ancestors, and X-Frame-Options for browsers that know only it),
// no script, style or plugin but the server's own, no DOM sink that takes
// a string as HTML or script (Trusted Types: the page writes text only),
// no referrer.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; require-trusted-types-for 'script'; trusted-types 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func serveConsolePage(w http.ResponseWriter, _ *http.Request) {
	b, _ := consoleFiles.ReadFile("console/index.html")
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// consoleTypes are the assets' content types, fixed rather than read from
// the system's table (mime.TypeByExtension), which on some systems names
// .js text/plain: under nosniff the browser would then refuse the script.
var consoleTypes = map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

func serveConsoleAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := consoleFiles.ReadFile("console/" + name)
	if err != nil || name == "index.html" {
		writeError(w, pigeon.NewError(pigeon.CodeNotFound, "no such console asset"))
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", consoleTypes[path.Ext(name)])
	_, _ = w.Write(b)
}

// docsPage is the API page rendered once from openapi.yaml.
var docsPage = sync.OnceValues(func() ([]byte, error) {
	var d apiDoc
	if err := yaml.Unmarshal(docs.OpenAPI(), &d); err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := docsTemplate.Execute(&b, d.view()); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
})

func serveDocsPage(w http.ResponseWriter, _ *http.Request) {
	b, err := docsPage()
	if err != nil {
		writeError(w, pigeon.WrapError(pigeon.CodeInternal, err, "render the API page"))
		return
	}
	securityHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// apiDoc is the part of an OpenAPI document the API page shows.
type apiDoc struct {
	Info struct {
		Title       string `yaml:"title"`
		Version     string `yaml:"version"`
		Description string `yaml:"description"`
	} `yaml:"info"`
	Paths      map[string]map[string]yaml.Node `yaml:"paths"`
	Components struct {
		Schemas struct {
			Code struct {
				Description string   `yaml:"description"`
				Enum        []string `yaml:"enum"`
			} `yaml:"Code"`
		} `yaml:"schemas"`
	} `yaml:"components"`
}

type apiOperation struct {
	Method, Path, Summary, Description string
	Public                             bool
	Responses                          []string
}

type apiView struct {
	Title, Version, Description string
	Operations                  []apiOperation
	Codes                       []string
	CodesDescription            string
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func (d apiDoc) view() apiView {
	v := apiView{Title: d.Info.Title, Version: d.Info.Version, Description: d.Info.Description,
		Codes: d.Components.Schemas.Code.Enum, CodesDescription: d.Components.Schemas.Code.Description}
	for p, item := range d.Paths {
		for m, node := range item {
			if !slices.Contains(httpMethods, m) {
				continue
			}
			var op struct {
				Summary     string                 `yaml:"summary"`
				Description string                 `yaml:"description"`
				Security    *[]any                 `yaml:"security"`
				Responses   map[string]interface{} `yaml:"responses"`
			}
			_ = node.Decode(&op)
			codes := make([]string, 0, len(op.Responses))
			for c := range op.Responses {
				codes = append(codes, c)
			}
			slices.Sort(codes)
			v.Operations = append(v.Operations, apiOperation{Method: strings.ToUpper(m), Path: p, Summary: op.Summary,
				Description: op.Description, Public: op.Security != nil && len(*op.Security) == 0, Responses: codes})
		}
	}
	slices.SortFunc(v.Operations, func(a, b apiOperation) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	return v
}

var docsTemplate = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<link rel="stylesheet" href="/console/app.css">
</head>
<body>
<header class="bar"><h1>{{.Title}} <span class="muted">{{.Version}}</span></h1><a href="/">Console</a> <a href="/openapi.yaml">openapi.yaml</a></header>
<main>
<section class="card"><p>{{.Description}}</p></section>
{{range .Operations}}
<section class="card" id="{{.Method}}-{{.Path}}" aria-label="{{.Method}} {{.Path}}">
<h2><code>{{.Method}} {{.Path}}</code>{{if .Public}} <span class="muted">no credential</span>{{end}}</h2>
<p>{{.Summary}}</p>{{if .Description}}<p class="muted">{{.Description}}</p>{{end}}
<p class="muted">Responses: {{range $i, $c := .Responses}}{{if $i}}, {{end}}{{$c}}{{end}}</p>
</section>
{{end}}
<section class="card" id="codes" aria-labelledby="codes-h">
<h2 id="codes-h">Error codes</h2>
<p class="muted">{{.CodesDescription}} An error body is <code>{"error":{"code":"…","message":"…","details":{…}}}</code>.</p>
<p>{{range $i, $c := .Codes}}{{if $i}}, {{end}}<code>{{$c}}</code>{{end}}</p>
</section>
</main>
</body>
</html>
`))
