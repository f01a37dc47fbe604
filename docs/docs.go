// Package docs embeds the machine-readable API description that the server
// serves at /openapi.yaml and renders at /docs.
package docs

import _ "embed"

//go:embed openapi.yaml
var openapi []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API (openapi.yaml).
// The caller must not modify it.
func OpenAPI() []byte { return openapi }
