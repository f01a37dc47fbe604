package pigeon

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store/memory"
)

// The broker's own gates read a message's data in the flat form
// (jsontext.DecodeFlat) and Data, the tree an application's gate reads,
// is built only when something needs it. These tests hold the flat way to
// the tree way: two engines on one catalog, one with no gate of the
// application's (its data is decoded flat) and one with a gate that
// allows everything (its data is decoded as a tree, as before), must
// judge every message alike, gate by gate, and answer, quarantine and
// deliver it alike.

const flatWho = "spiffe://test/flat"

// flatSchemaFast is in the direct validator's subset: properties of each
// type, nested objects and arrays of objects, a pattern, bounds,
// uniqueItems, patternProperties and additionalProperties as a schema.
const flatSchemaFast = `{
  "type": "object",
  "required": ["merchantId", "amount"],
  "properties": {
    "merchantId": {"type": "string", "minLength": 1},
    "amount": {"type": "number", "minimum": 0, "maximum": 1000000},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "card": {"type": "object", "properties": {"pan": {"type": "string"}}},
    "items": {"type": "array", "uniqueItems": true, "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
    "meta": {"type": "object", "additionalProperties": {"type": "string"}},
    "order": {"type": "object", "properties": {"id": {"type": ["string", "integer"]}}}
  },
  "patternProperties": {"^x_": {"type": "string"}}
}`

// flatSchemaFull is outside that subset (oneOf): gojsonschema judges it.
const flatSchemaFull = `{
  "type": "object",
  "properties": {"kind": {"oneOf": [{"type": "string"}, {"type": "object", "required": ["a"]}]}},
  "required": ["order"]
}`

// flatCatalog has subjects whose gates read data every way: forbidden and
// tokenized paths through objects and arrays, a schema of each kind, an
// idempotency key read from data, quarantine on every refusal.
func flatCatalog() *Catalog {
	rules := map[Operation][]RuleSpec{
		OpPublish: {{Effect: "allow", Principals: []string{flatWho}}},
		OpReceive: {{Effect: "allow", Principals: []string{flatWho}}},
	}
	q := QuarantinePolicy{OnSchemaViolation: true, OnPolicyViolation: true}
	return &Catalog{
		Schemas: map[string][]byte{"flat.fast.v1": []byte(flatSchemaFast), "flat.full.v1": []byte(flatSchemaFull)},
		Subjects: []SubjectPolicy{
			{Name: "flat.fast", Version: "v1", Intents: []string{"test"}, Schema: &SchemaRef{Name: "flat.fast.v1"}, Quarantine: q, Policy: rules,
				Data: DataPolicy{ForbiddenFields: []string{"card.pan", "items.secret", "Deep.a.b"}, TokenizedFields: []string{"paymentToken", "meta", "items"}}},
			{Name: "flat.full", Version: "v1", Intents: []string{"test"}, Schema: &SchemaRef{Name: "flat.full.v1"}, Quarantine: q, Policy: rules,
				Delivery: DeliveryPolicy{Idempotency: IdempotencyPolicy{Required: true, Key: "data.order.id"}},
				Data:     DataPolicy{ForbiddenFields: []string{"secret"}, TokenizedFields: []string{"order"}}},
			{Name: "flat.none", Version: "v1", Intents: []string{"test"}, Quarantine: q, Policy: rules,
				Delivery: DeliveryPolicy{Idempotency: IdempotencyPolicy{Key: "data.k"}},
				Data:     DataPolicy{ForbiddenFields: []string{"x", "0.x"}, TokenizedFields: []string{"a.b.c", "list"}}},
		},
	}
}

var flatSubjects = []string{"flat.fast", "flat.full", "flat.none"}

// flatPair is the two engines, and a session of each.
type flatPair struct {
	flat, tree         *Engine
	flatSess, treeSess *localSession
	n                  atomic.Int64
}

func newFlatPair(t testing.TB) *flatPair {
	open := func(gates ...Gate) (*Engine, *localSession) {
		e, err := New(context.Background(), &Options{
			Authenticator:  NewStaticTokens(StaticToken{Token: "t", Principal: flatWho}),
			Catalog:        flatCatalog(),
			Store:          memory.New(nil),
			Gates:          gates,
			QuarantineRate: RateLimitPolicy{PerSecond: -1},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
		s, err := e.Connect(context.Background(), "t", flatSubjects)
		require.NoError(t, err)
		return e, s.(*localSession)
	}
	p := &flatPair{}
	p.flat, p.flatSess = open()
	p.tree, p.treeSess = open(GateFunc("allow", func(context.Context, *Admission) Verdict { return Allow() }))
	return p
}

// judgeAll prepares m as e's publish of s and runs every gate of e's own
// chain on it, past a refusal too, and returns the admission and each
// gate's verdict.
func judgeAll(t *testing.T, e *Engine, s *localSession, m *Message) (*Admission, []Verdict) {
	a := new(Admission)
	e.prepare(a, s.caller, m)
	var out []Verdict
	for _, g := range e.gates {
		if _, ok := g.(docReader); !ok {
			continue // the tree engine's gate that allows everything
		}
		out = append(out, g.Check(context.Background(), a))
	}
	return a, out
}

// check holds the two engines to the same judgement of data on every
// subject, gate by gate, and to the same answer to its publish.
func (p *flatPair) check(t *testing.T, data string) {
	for _, subj := range flatSubjects {
		key := "k-" + strconv.FormatInt(p.n.Add(1), 10)
		msg := func() *Message {
			return &Message{Type: "t", Subject: subj, Intent: "test", IdempotencyKey: key, Data: json.RawMessage(data)}
		}
		fa, fv := judgeAll(t, p.flat, p.flatSess, msg())
		ta, tv := judgeAll(t, p.tree, p.treeSess, msg())
		require.Equal(t, tv, fv, "%s %q: the gates' verdicts", subj, data)
		require.Equal(t, ta.idemKey, fa.idemKey, "%s %q: idempotency key", subj, data)
		require.Equal(t, ta.dataErr, fa.dataErr, "%s %q: data refusal", subj, data)
		require.False(t, ta.lazy, "%s: the tree engine decodes a tree", subj)
		if fa.dataErr == "" {
			require.Equal(t, data != "", fa.lazy, "%s %q: the flat engine's gates built no tree", subj, data)
			require.Equal(t, string(redactData(ta.tree(), ta.subj.redact)), string(redactData(fa.tree(), fa.subj.redact)),
				"%s %q: the quarantined copy's data", subj, data)
		}
		fa.free()
		ta.free()

		fres, ferr := p.flatSess.Publish(context.Background(), msg())
		tres, terr := p.treeSess.Publish(context.Background(), msg())
		require.Equal(t, publishAnswer(t, p.tree, tres, terr), publishAnswer(t, p.flat, fres, ferr), "%s %q: the publish's answer", subj, data)
	}
}

// publishAnswer is what a publish answered, but for ids and times: its
// status and data, or its refusal and the data of its quarantined copy.
func publishAnswer(t *testing.T, e *Engine, res *Result, err error) string {
	if err == nil {
		return res.Status + " " + string(res.Message.Data)
	}
	var pe *Error
	require.ErrorAs(t, err, &pe)
	d := pe.Decision
	if d == nil {
		return string(pe.Code) + " " + pe.Message
	}
	out := strings.Join([]string{string(d.Outcome), string(d.Code), d.Gate, d.Reason}, " | ")
	if d.QuarantineID != "" {
		rec, err := e.store.GetQuarantine(context.Background(), d.QuarantineID)
		require.NoError(t, err)
		var m Message
		require.NoError(t, unmarshalEnvelope(rec.Body, &m))
		out += " | " + string(m.Data)
	}
	return out
}

// flatSeeds are data documents for the subjects of flatCatalog: valid
// and refused, with card numbers at every depth, names differing in case
// only or beyond ASCII, objects of more than 16 members (a map in the
// flat form), inexact numbers, and data that is no object.
var flatSeeds = []string{
	`{"merchantId":"m-100","amount":42.5,"currency":"GBP","paymentToken":"tok_1","order":{"id":"o-1"},"k":"a"}`,
	`{"merchantId":"m-100","amount":42.5,"currency":"gbp","order":{"id":7}}`,
	`{"merchantId":"","amount":-1,"order":{"id":7.5}}`,
	`{"merchantId":"m","amount":1,"card":{"pan":"4111111111111111"},"order":{"id":"x"}}`,
	`{"merchantId":"m","amount":1,"Card":{"PAN":null},"order":{"id":"x"}}`,
	`{"merchantId":"m","amount":1,"paymentToken":"4111 1111 1111 1111","order":{}}`,
	`{"merchantId":"m","amount":1,"paymentToken":4111111111111111,"order":{"id":4111111111111111}}`,
	`{"merchantId":"m","amount":1,"meta":{"4111111111111111":"x"},"order":{"id":"o"}}`,
	`{"merchantId":"m","amount":1,"meta":{"a":{"b":"4111111111111111"}},"order":{"id":"o"}}`,
	`{"merchantId":"m","amount":1,"items":[{"sku":"a","qty":1},{"sku":"a","qty":1}],"order":{"id":"o"}}`,
	`{"merchantId":"m","amount":1,"items":[{"sku":"a","secret":1},{"sku":"b","qty":1.5}],"order":{"id":"o"}}`,
	`{"merchantId":"m","amount":1,"items":[{"sku":"4111111111111111"}],"x_note":"n","x_bad":1,"order":{"id":"o"}}`,
	`{"merchantId":"m","amount":1,"deep":{"A":{"B":1}},"Deep":{"a":{"b":null}},"order":{"id":"o"}}`,
	`{"kind":{"b":1},"order":{"id":"o"},"secret":"s","SECRET":null}`,
	`{"kind":"k","order":{"id":["o"]}}`,
	`{"a":{"b":{"c":"4111111111111111"}},"list":[["4111-1111-1111-1111"]],"x":null,"k":9007199254740993}`,
	`{"a":{"B":{"C":"4111111111111111"}},"list":[{"n":4111111111111111}],"X":false,"k":12}`,
	`{"\u212a":1,"ſecret":2,"paymentToken":"tok","merchantId":"m","amount":1e2,"order":{"id":"o"}}`,
	`{"m0":0,"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,"ma":10,"mb":11,"mc":12,"md":13,"me":14,"mf":15,"merchantId":"m","amount":1,"card":{"pan":"4111111111111111"},"order":{"id":"o"}}`,
	`{"m0":0,"m1":1,"m2":2,"m3":3,"m4":4,"m5":5,"m6":6,"m7":7,"m8":8,"m9":9,"ma":10,"mb":11,"mc":12,"md":13,"me":14,"mf":15,"merchantId":"m","amount":100.0000000000000001,"items":[{"sku":"a"}],"order":{"id":"o"}}`,
	`[{"x":"4111111111111111"},{"x":1}]`, `[]`, `{}`, `"4111111111111111"`, `12`, `null`, `true`,
	` {"merchantId":"m","amount":1,"order":{"id":"o"}} `, `{"a":1,"a":2}`, `{"a":`, `{"a":"\ud800"}`,
}

// TestFlatDataJudgedAsTree: on every seed, the flat way judges, answers
// and quarantines as the tree way.
func TestFlatDataJudgedAsTree(t *testing.T) {
	p := newFlatPair(t)
	for _, data := range flatSeeds {
		p.check(t, data)
	}
}

func FuzzFlatDataJudgedAsTree(f *testing.F) {
	for _, data := range flatSeeds {
		f.Add(data)
	}
	p := newFlatPair(f)
	f.Fuzz(func(t *testing.T, data string) { p.check(t, data) })
}

// TestFlatDataDelivered: a message whose data its gates read only in the
// flat form is stored and delivered with the text they judged, and a
// subscriber's selector and filter, which read the data decoded, see it
// as it was sent, after the memory the flat form took was used for the
// messages published after it.
func TestFlatDataDelivered(t *testing.T) {
	p := newFlatPair(t)
	ctx := context.Background()
	bySelector, byFilter := make(chan *Message, 64), make(chan *Message, 64)
	for _, sub := range []struct {
		got chan *Message
		opt SubscribeOption
	}{{bySelector, WithSelector("/color=blue")}, {byFilter, WithFilter(`message.data.tags.a == "blue"`)}} {
		_, err := p.flatSess.Subscribe(ctx, "flat.none", func(_ context.Context, d *Delivery) error {
			sub.got <- d.Message
			return nil
		}, sub.opt)
		require.NoError(t, err)
	}
	publish := func(data string) {
		_, err := p.flatSess.Publish(ctx, &Message{Type: "t", Subject: "flat.none", Intent: "test", Data: json.RawMessage(data)})
		require.NoError(t, err)
	}
	for i := range 20 {
		publish(`{"color":"red","n":` + strconv.Itoa(i) + `,"tags":{"a":"red"}}`)
		publish(` {"color":"blue","n":` + strconv.Itoa(i) + `,"tags":{"a":"blue"}} `)
	}
	for i := range 20 {
		for _, got := range []chan *Message{bySelector, byFilter} {
			var m *Message
			select {
			case m = <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("delivery %d never came", i)
			}
			require.Equal(t, `{"color":"blue","n":`+strconv.Itoa(i)+`,"tags":{"a":"blue"}}`, string(m.Data))
		}
	}
	sms, err := p.flat.store.Read(ctx, "flat.none", 1, 100)
	require.NoError(t, err)
	require.Len(t, sms, 40)
	for i, sm := range sms {
		var m Message
		require.NoError(t, unmarshalEnvelope(sm.Body, &m))
		color := []string{"red", "blue"}[i%2]
		require.Equal(t, `{"color":"`+color+`","n":`+strconv.Itoa(i/2)+`,"tags":{"a":"`+color+`"}}`, string(m.Data), "stored %d", i)
	}
}

// TestApplicationGatesSeeData: the broker's own gates come first in every
// chain, so that a chain whose last gate is the broker's holds none of
// the application's (ownChain); and a gate of the application's, after
// gates that read the data only in the flat form, is handed Data, the
// tree, whatever it follows.
func TestApplicationGatesSeeData(t *testing.T) {
	p := newFlatPair(t)
	for _, e := range []*Engine{p.flat, p.tree} {
		for _, chain := range [][]Gate{e.gates, e.replyGates} {
			own := true
			for _, g := range chain {
				_, ok := g.(docReader)
				require.False(t, ok && !own, "the broker's gate %s after one of the application's", g.Name())
				own = own && ok
			}
			require.Equal(t, own, ownChain(chain))
		}
	}
	require.True(t, ownChain(builtinGates(p.flat)))

	const data = `{"merchantId":"m","amount":1,"items":[{"sku":"a"}],"order":{"id":"o"}}`
	var seen any
	keep := GateFunc("keep", func(_ context.Context, a *Admission) Verdict { seen = a.Data; return Allow() })
	a := new(Admission)
	p.flat.prepare(a, p.flatSess.caller, &Message{Type: "t", Subject: "flat.fast", Intent: "test", Data: json.RawMessage(data)})
	require.True(t, a.lazy)
	_, v, ok := p.flat.judge(context.Background(), append(slices.Clone(p.flat.gates), keep), a)
	require.True(t, ok, "%v", v)
	var want any
	require.NoError(t, json.Unmarshal([]byte(data), &want))
	require.Equal(t, want, seen)
	a.free()
}
