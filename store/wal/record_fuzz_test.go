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
