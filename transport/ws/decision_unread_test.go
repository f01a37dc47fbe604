package ws_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon"
	"pigeon/transport/ws"
)

// A lone publish whose answer the client cannot read fails with the
// decoder's code and says that the message may have been accepted, as a
// batch slot whose result cannot be read says it: the broker judged and
// maybe stored it, so that it is not taken for refused and published
// again without an idempotency key. An answer that reads as an error
// frame says no such thing: the broker refused.
func TestLonePublishAnswerUnread(t *testing.T) {
	decision := func(id string) string {
		return `{"op":"decision","re":"` + id + `","status":"accepted","message":{"specversion":"1.0","id":"msg_x","type":"chat","source":"p","subject":"chat.messages","time":"2026-01-01T00:00:00Z","sequence":5}}`
	}
	rows := []struct {
		name     string
		answer   func(id string) string
		code     pigeon.Code
		accepted bool
	}{
		{name: "sequence a string", answer: func(id string) string { return strings.Replace(decision(id), `"sequence":5`, `"sequence":"5"`, 1) },
			code: pigeon.CodeEnvelopeInvalid, accepted: true},
		{name: "sequence beyond 2^64-1", answer: func(id string) string {
			return strings.Replace(decision(id), `"sequence":5`, `"sequence":18446744073709551616`, 1)
		}, code: pigeon.CodeEnvelopeInvalid, accepted: true},
		{name: "message a number", answer: func(id string) string {
			return `{"op":"decision","re":"` + id + `","status":"accepted","message":7}`
		}, code: pigeon.CodeEnvelopeInvalid, accepted: true},
		{name: "a name twice", answer: func(id string) string {
			return strings.Replace(decision(id), `"sequence":5`, `"sequence":5,"sequence":6`, 1)
		}, code: pigeon.CodeDuplicateKey, accepted: true},
		{name: "an error whose code is a number", answer: func(id string) string {
			return `{"op":"error","re":"` + id + `","error":{"code":7,"message":"m"}}`
		}, code: pigeon.CodeBadRequest},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			s, res, err := publishAnsweredWith(t, row.answer)
			require.Nil(t, res)
			require.Equal(t, row.code, pigeon.ErrorCode(err), "%v", err)
			if row.accepted {
				require.ErrorContains(t, err, "the server's answer for this message could not be read")
				require.ErrorContains(t, err, "the message may have been accepted")
			} else {
				require.NotContains(t, err.Error(), "may have been accepted")
			}
			_, err = s.Receive(context.Background(), "chat.messages", 1)
			require.NoError(t, err, "the connection stays up")
		})
	}
}

// A publish answered with no message, or with a frame of another op or
// another number of results, fails INTERNAL and says, as an unread answer
// does, that the message may have been accepted.
func TestPublishAnswerOfAnotherShape(t *testing.T) {
	for _, row := range []struct {
		name   string
		answer func(id string) string
	}{
		{name: "a decision without its message", answer: func(id string) string { return `{"op":"decision","re":"` + id + `","status":"accepted"}` }},
		{name: "an answer of another op", answer: func(id string) string { return `{"op":"ok","re":"` + id + `"}` }},
		{name: "decisions of another number", answer: func(id string) string { return `{"op":"decisions","re":"` + id + `","results":[]}` }},
	} {
		t.Run(row.name, func(t *testing.T) {
			_, res, err := publishAnsweredWith(t, row.answer)
			require.Nil(t, res)
			require.Equal(t, pigeon.CodeInternal, pigeon.ErrorCode(err), "%v", err)
			require.ErrorContains(t, err, "may have been accepted")
		})
	}
}

// publishAnsweredWith publishes one message to a scripted server that
// answers the publish with answer (given the frame's id) and a receive
// with no messages, and returns the session (closed at the test's end)
// and the publish's outcome.
func publishAnsweredWith(t *testing.T, answer func(id string) string) (*ws.Session, *pigeon.Result, error) {
	t.Helper()
	srv := newScriptedServer(t, func(f *ws.Frame) []string {
		switch f.Op {
		case ws.OpPublish:
			return []string{answer(f.ID)}
		case ws.OpReceive:
			return []string{`{"op":"messages","re":"` + f.ID + `","messages":[]}`}
		}
		return []string{okFrame(f)}
	})
	ctx := context.Background()
	s, err := ws.Dial(ctx, srv.url, "token", []string{"chat.messages"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	res, err := s.Publish(ctx, &pigeon.Message{Type: "chat", Subject: "chat.messages", Intent: "chat", Data: json.RawMessage(`{"n":1}`)})
	return s, res, err
}
