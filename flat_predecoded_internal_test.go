package pigeon

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A message read from the network (the HTTP server's one-pass envelope
// decoder, the WebSocket server's frame decoder) carries its data decoded
// in the flat form, in pooled memory the admission takes and gives back
// (internal/predecoded). These tests hold that path to the tree way, as
// TestFlatDataJudgedAsTree holds the in-process one, and hold a decoded
// value that is not used (its message's Data changed, a second publish of
// the message or of a copy of it) to a decode of its own.

// predecodedEnvelope is the envelope of a message of subj carrying data,
// as a client sends it over HTTP.
func predecodedEnvelope(subj, key, data string) []byte {
	b := `{"type":"t","subject":` + strconv.Quote(subj) + `,"intent":"test","idempotencyKey":` + strconv.Quote(key)
	if data != "" {
		b += `,"data":` + data
	}
	return []byte(b + "}")
}

// predecodedMessage is the message the HTTP server hands the engine for
// the envelope b, and reports whether its data came decoded.
func predecodedMessage(b []byte) (*Message, bool) {
	m := decodeEnvelopeData(b, true)
	return m, m != nil && m.pre != nil
}

// checkPredecoded holds the flat engine's judgement of data sent over
// the network, on every subject, to the tree engine's of data published
// in process; and so for the ways its decoded value goes unused.
func (p *flatPair) checkPredecoded(t *testing.T, data string) {
	ctx := context.Background()
	for _, subj := range flatSubjects {
		key := "k-" + strconv.FormatInt(p.n.Add(1), 10)
		env := predecodedEnvelope(subj, key, data)
		if _, ok := predecodedMessage(env); !ok {
			continue // not read in one pass, or data the engine refuses: decoded by the engine
		}
		ta, tv := judgeAll(t, p.tree, p.treeSess, &Message{Type: "t", Subject: subj, Intent: "test", IdempotencyKey: key, Data: json.RawMessage(data)})
		want := func(name string, a *Admission, v []Verdict) {
			t.Helper()
			require.Equal(t, tv, v, "%s %q %s: the gates' verdicts", subj, data, name)
			require.Equal(t, ta.idemKey, a.idemKey, "%s %q %s: idempotency key", subj, data, name)
			require.Empty(t, a.dataErr, "%s %q %s: data refusal", subj, data, name)
			require.Equal(t, ta.dataExact, a.dataExact, "%s %q %s: exact", subj, data, name)
			require.Equal(t, ta.dataNames, a.dataNames, "%s %q %s: top-level names", subj, data, name)
			require.Equal(t, string(ta.Message.Data), string(a.Message.Data), "%s %q %s: the judged text", subj, data, name)
			require.Equal(t, string(redactData(ta.tree(), ta.subj.redact)), string(redactData(a.tree(), a.subj.redact)),
				"%s %q %s: the quarantined copy's data", subj, data, name)
		}

		// Taken as it came: the flat form, no tree built.
		m, _ := predecodedMessage(env)
		fa, fv := judgeAll(t, p.flat, p.flatSess, m)
		require.Nil(t, m.pre, "%s %q: the decoded data is taken", subj, data)
		require.True(t, fa.lazy, "%s %q: the gates built no tree", subj, data)
		require.NotNil(t, fa.arena, "%s %q: the admission holds the decoded data's memory", subj, data)
		want("predecoded", fa, fv)
		fa.free()

		// Data changed after decoding: the engine decodes it itself and
		// gives the decoded value's memory back at once.
		m, _ = predecodedMessage(env)
		pre := m.pre
		m.Data = append(json.RawMessage(nil), m.Data...)
		fa, fv = judgeAll(t, p.flat, p.flatSess, m)
		require.Nil(t, m.pre)
		require.Nil(t, pre.Arena, "%s %q: the unused value's memory is given back", subj, data)
		want("changed", fa, fv)
		fa.free()

		// A copy of a message whose decoded data was taken, published
		// after the first's memory was given back and used again,
		// decodes its data itself; and a second publish of it too.
		m, _ = predecodedMessage(env)
		c := *m
		fa, _ = judgeAll(t, p.flat, p.flatSess, m)
		fa.free()
		p.reuseArenas(t)
		ca, cv := judgeAll(t, p.flat, p.flatSess, &c)
		want("copy", ca, cv)
		ca.free()
		sa, sv := judgeAll(t, p.flat, p.flatSess, m)
		want("again", sa, sv)
		sa.free()
		ta.free()

		// And its publish is answered as the tree way's.
		m, _ = predecodedMessage(env)
		fres, ferr := p.flatSess.Publish(ctx, m)
		// The publisher's text, as the envelope carries it: without the spacing around it.
		tres, terr := p.treeSess.Publish(ctx, &Message{Type: "t", Subject: subj, Intent: "test", IdempotencyKey: key, Data: valueText(json.RawMessage(data))})
		require.Equal(t, publishAnswer(t, p.tree, tres, terr), publishAnswer(t, p.flat, fres, ferr), "%s %q: the publish's answer", subj, data)
	}
}

// reuseArenas decodes other data in the memory given back, so that a
// value read from it after would not be the one decoded there.
func (p *flatPair) reuseArenas(t *testing.T) {
	for range 4 {
		m, ok := predecodedMessage(predecodedEnvelope("flat.none", "other", `{"zz":[{"x":"y"}],"k":"other","n":1.5}`))
		require.True(t, ok)
		a, _ := judgeAll(t, p.flat, p.flatSess, m)
		defer a.free()
	}
}

// TestPredecodedFlatDataJudgedAsTree: on every seed, data sent over the
// network and decoded by the transport in the flat form is judged,
// answered and quarantined as the tree way, and so is data whose decoded
// value goes unused.
func TestPredecodedFlatDataJudgedAsTree(t *testing.T) {
	p := newFlatPair(t)
	n := 0
	for _, data := range flatSeeds {
		if _, ok := predecodedMessage(predecodedEnvelope("flat.none", "k", data)); ok {
			n++
		}
		p.checkPredecoded(t, data)
	}
	require.Greater(t, n, len(flatSeeds)/2, "most seeds come decoded")
}

func FuzzPredecodedFlatDataJudgedAsTree(f *testing.F) {
	for _, data := range flatSeeds {
		f.Add(data)
	}
	p := newFlatPair(f)
	f.Fuzz(func(t *testing.T, data string) { p.checkPredecoded(t, data) })
}
