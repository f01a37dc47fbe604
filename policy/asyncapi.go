package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// AsyncAPIVersion is the AsyncAPI version AsyncAPI writes.
const AsyncAPIVersion = "3.0.0"

// AsyncAPIInfo is the info object of an exported document.
type AsyncAPIInfo struct {
	Title       string
	Version     string
	Description string
}

// AsyncAPI exports c as an AsyncAPI 3 document (JSON) for tools that read
// one: every subject is a channel whose address is its name, with one
// message whose payload is the subject's JSON schema (an empty object
// schema when it names none) and whose headers are the envelope fields
// policy judges. Each subject has a send operation (publish) and a receive
// operation (deliveries). What is Pigeon's own (mode, intents,
// classification, regions, idempotency, quarantine, forbidden and
// tokenized field names, policy version) travels as x-pigeon-*
// extensions. Principals and rules are not exported.
func AsyncAPI(c *Catalog, info AsyncAPIInfo) ([]byte, error) {
	if info.Title == "" {
		info.Title = "Pigeon catalog"
	}
	if info.Version == "" {
		info.Version = "1.0.0"
	}
	if info.Description == "" {
		info.Description = "Subjects of a Pigeon catalog: each channel is a subject, each message payload its data schema."
	}
	subjects := slices.Clone(c.Subjects)
	slices.SortFunc(subjects, func(a, b SubjectPolicy) int { return strings.Compare(a.Name, b.Name) })
	channels := map[string]any{}
	operations := map[string]any{}
	messages := map[string]any{}
	for _, p := range subjects {
		payload, err := payloadSchema(c, p)
		if err != nil {
			return nil, err
		}
		id := p.Name
		msg := map[string]any{
			"name":        id,
			"title":       p.Name + " message",
			"contentType": "application/json",
			"summary":     fmt.Sprintf("The data of a %s message (mode %s).", p.Name, p.Mode),
			"headers":     envelopeHeaders(p),
			"payload":     payload,
		}
		if p.Schema != nil {
			msg["x-pigeon-schema"] = p.Schema.Name
		}
		messages[id] = msg
		channels[id] = map[string]any{
			"address":     p.Name,
			"title":       p.Name,
			"description": fmt.Sprintf("Pigeon subject %s, policy version %s.", p.Name, p.Version),
			"messages":    map[string]any{id: map[string]any{"$ref": "#/components/messages/" + id}},
			"x-pigeon":    subjectExtension(p),
		}
		ref := []any{map[string]any{"$ref": "#/channels/" + id + "/messages/" + id}}
		channel := map[string]any{"$ref": "#/channels/" + id}
		operations["publish."+id] = map[string]any{"action": "send", "channel": channel, "messages": ref,
			"summary": "Publish to " + p.Name + " under a contract that grants publish."}
		operations["receive."+id] = map[string]any{"action": "receive", "channel": channel, "messages": ref,
			"summary": "Receive " + p.Name + " deliveries under a contract that grants receive or subscribe."}
	}
	doc := map[string]any{
		"asyncapi":           AsyncAPIVersion,
		"info":               map[string]any{"title": info.Title, "version": info.Version, "description": info.Description},
		"defaultContentType": "application/json",
		"channels":           channels,
		"operations":         operations,
		"components":         map[string]any{"messages": messages},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// payloadSchema is the subject's data schema, or an open object.
func payloadSchema(c *Catalog, p SubjectPolicy) (any, error) {
	if p.Schema == nil {
		return map[string]any{"type": "object"}, nil
	}
	raw, ok := c.Schemas[p.Schema.Name]
	if !ok {
		return nil, fmt.Errorf("subject %s: schema %q is not in the catalog", p.Name, p.Schema.Name)
	}
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("schema %s: %w", p.Schema.Name, err)
	}
	delete(s, "$schema") // the document's schema format is AsyncAPI's (JSON Schema draft 7)
	delete(s, "$id")
	return s, nil
}

// envelopeHeaders is the schema of the envelope fields policy reads.
func envelopeHeaders(p SubjectPolicy) map[string]any {
	str := func(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
	props := map[string]any{
		"type":           str("The event type."),
		"intent":         map[string]any{"type": "string", "enum": p.Intents, "description": "Why the message is sent; one of the subject's intents."},
		"classification": str("The data classification; must be allowed by the subject."),
		"region":         str("Where the data lives."),
		"idempotencyKey": str("The publisher's key; duplicates within the window are answered with the original."),
	}
	if len(p.Intents) == 0 {
		props["intent"] = str("Why the message is sent.")
	}
	required := []string{"type", "intent"}
	if p.Delivery.Idempotency.Required {
		required = append(required, "idempotencyKey")
	}
	return map[string]any{"type": "object", "properties": props, "required": required}
}

// subjectExtension is what Pigeon adds to a channel.
func subjectExtension(p SubjectPolicy) map[string]any {
	x := map[string]any{
		"mode":                string(p.Mode),
		"version":             p.Version,
		"intents":             nonNil(p.Intents),
		"classification":      p.Data.Classification,
		"regions":             nonNil(p.RegionPolicy.AllowedRegions),
		"homeRegion":          p.RegionPolicy.Home,
		"idempotencyRequired": p.Delivery.Idempotency.Required,
		"replayAllowed":       p.Replay.Allowed,
		"forbiddenFields":     nonNil(p.Data.ForbiddenFields),
		"tokenizedFields":     nonNil(p.Data.TokenizedFields),
		"quarantine": map[string]bool{"onSchemaViolation": p.Quarantine.OnSchemaViolation,
			"onPolicyViolation": p.Quarantine.OnPolicyViolation, "onHandlerFailure": p.Quarantine.OnHandlerFailure},
	}
	if p.Data.Encryption != "" {
		x["encryption"] = p.Data.Encryption
	}
	return x
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
