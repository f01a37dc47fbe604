package wal

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// FuzzAcceptedRecord: a kind-4 record decodes to what was encoded, and
// decoding arbitrary bytes (checksum fixed up, so the decoder itself is
// reached) never panics.
func FuzzAcceptedRecord(f *testing.F) {
	f.Add("m1", "key", "publish.accepted", "svc", "ctr", "ref", []byte(`{"a":1}`), uint64(7), int64(0))
	f.Add("", "", "", "", "", "", []byte(nil), uint64(0), int64(-1))
	f.Fuzz(func(t *testing.T, id, key, typ, principal, contract, ref string, body []byte, floor uint64, ns int64) {
		when := time.Unix(0, ns).UTC()
		m := store.Message{Subject: "s", Seq: floor + 1, ID: id, Time: when, IdemKey: key, IdemExpires: when.Add(time.Hour), Body: body}
		r := store.AuditRecord{Type: typ, Outcome: "allow", Code: "OK", Principal: principal, ContractID: contract, Ref: ref, Time: when}
		p := appendAccepted(nil, &m, &r, floor)
		kind, ok := checkRecord(p)
		require.True(t, ok)
		require.Equal(t, kindAccepted, kind)
		h, err := decodeMessageHead(p)
		require.NoError(t, err)
		require.True(t, h.accepted)
		require.Equal(t, floor, h.floor)
		gm, gr, err := decodeAccepted(p, "s")
		require.NoError(t, err)
		require.Equal(t, m.ID, gm.ID)
		require.Equal(t, m.IdemKey, gm.IdemKey)
		require.True(t, m.Time.Equal(gm.Time))
		require.Equal(t, string(body), string(gm.Body))
		r.Subject, r.MessageID, r.Seqs = "s", id, strconv.FormatUint(m.Seq, 10)
		require.True(t, r.Time.Equal(gr.Time))
		gr.Time = r.Time
		require.Equal(t, r, gr)

		// The same bytes after the header, read as a record of either
		// message kind, must not panic.
		junk := append([]byte{0, 0, 0, 0, kindAccepted}, body...)
		_, _, _ = decodeAccepted(junk, "s")
		_, _ = decodeMessageHead(junk)
	})
}

// FuzzCheckpointFloors: a checkpoint with floors decodes to what was
// encoded; arbitrary bytes after the hash never panic.
func FuzzCheckpointFloors(f *testing.F) {
	f.Add(uint64(3), "abc", "orders", uint64(9), []byte{1, 2})
	f.Fuzz(func(t *testing.T, seq uint64, hash, subject string, floor uint64, junk []byte) {
		cp := store.Checkpoint{Seq: seq, Hash: hash}
		floors := map[string]uint64{subject: floor, subject + "x": floor / 2}
		gcp, gf, err := decodeCheckpointFloors(encodeCheckpointFloors(cp, floors))
		require.NoError(t, err)
		require.Equal(t, cp, gcp)
		require.Equal(t, floors, gf)
		gcp, gf, err = decodeCheckpointFloors(encodeCheckpoint(cp))
		require.NoError(t, err)
		require.Equal(t, cp, gcp)
		require.Nil(t, gf)
		p := append(encodeCheckpoint(cp), junk...)
		_, _, _ = decodeCheckpointFloors(p)
	})
}

// FuzzRecordDecoders: whatever bytes follow a record's header (a record
// whose checksum holds but whose fields do not: a bug in an older writer,
// or a disk that returns other bytes with a matching checksum), every
// decoder of every kind, and the appliers of the meta and quarantine
// logs, refuse them or decode them without panicking, and a kept record
// decodes only when the message record inside it passes its checksum.
func FuzzRecordDecoders(f *testing.F) {
	m := store.Message{Subject: "s", Seq: 3, ID: "m", Time: time.Unix(5, 0).UTC(), IdemKey: "k", IdemExpires: time.Unix(9, 0).UTC(), Body: []byte(`{}`)}
	for _, p := range [][]byte{
		appendMessage(nil, &m),
		appendKept(nil, &m),
		encodeAudit(&store.AuditRecord{Seq: 1, ID: "a", Type: "t", Seqs: "1-2", Count: 2, Digest: "d"}),
		encodeContract(&store.ContractRecord{ID: "c", Principal: "p", Body: []byte(`{}`)}),
	} {
		f.Add(p[4], p[recHeader:])
	}
	for _, k := range []byte{kindDone, kindAttempt, kindLowerAttempt, kindGroupState, kindGroupsPruned, kindFloor, kindContractGC, kindKVPut, kindKVDelete, kindKVSwap, kindQuarantine, kindQuarantineT, kindCheckpoint} {
		f.Add(k, []byte{1, 's', 1, 'g', 0xff, 0xff, 0xff, 0xff, 0x0f, 2})
	}
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		e := appendEnc(nil, kind)
		e.b = append(e.b, body...)
		p := e.finish()
		k, ok := checkRecord(p)
		require.True(t, ok)
		require.Equal(t, kind, k)

		_, _ = decodeMessageHead(p)
		_, _, _ = decodeAccepted(p, "s")
		_, _ = decodeAudit(p)
		_, _ = decodeQuarantine(p)
		_, _, _ = decodeCheckpointFloors(p)
		if km, err := decodeKept(p); err == nil {
			inner := newDec(p)
			inner.str()
			kind, ok := checkRecord(inner.b)
			require.True(t, ok && kind == kindMessage, "a kept record decodes only around a sound message record")
			require.NotNil(t, km.Body)
		}
		var ml metaLog
		ml.init()
		_, _ = ml.apply(1, p)
		q := quarantine{byID: map[string]qent{}}
		_, _ = q.apply(1, p)
	})
}

// FuzzKeptRecord: a kept record decodes to the message it was made of.
func FuzzKeptRecord(f *testing.F) {
	f.Add("orders", uint64(7), "m1", "key", int64(5), []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, subject string, seq uint64, id, key string, ns int64, body []byte) {
		when := time.Unix(0, ns).UTC()
		m := store.Message{Subject: subject, Seq: seq, ID: id, Time: when, IdemKey: key, IdemExpires: when.Add(time.Hour), Body: body}
		got, err := decodeKept(appendKept(nil, &m))
		require.NoError(t, err)
		require.Equal(t, subject, got.Subject)
		require.Equal(t, seq, got.Seq)
		require.Equal(t, id, got.ID)
		require.Equal(t, key, got.IdemKey)
		require.True(t, when.Equal(got.Time))
		require.True(t, m.IdemExpires.Equal(got.IdemExpires))
		require.Equal(t, string(body), string(got.Body))
	})
}
