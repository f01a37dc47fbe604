package pigeon

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// A synchronous handler's Delivery holds a deep copy of the message,
// whatever the size of its data (in the Delivery's allocation or, past a
// few kilobytes, on its own): equal field for field, its data and its
// signature its own memory, its data, when in the Delivery's allocation,
// capped at its length so an append by the handler copies, and empty data
// nil (as Message.Clone makes it).
func TestHandedDeliveryIsADeepCopy(t *testing.T) {
	for _, n := range []int{0, 1, 2, 127, 128, 129, 320, 321, 576, 577, 1088, 1089, 2240, 2241, 9000} {
		for _, signed := range []bool{false, true} {
			t.Run(strconv.Itoa(n)+"/signed="+strconv.FormatBool(signed), func(t *testing.T) {
				m := &Message{SpecVersion: SpecVersion, ID: "msg_1", Type: "t", Source: "s", Subject: "orders",
					Time: "2026-12-01T12:00:00.000Z", Intent: "i", Classification: "internal", Region: "uk",
					Sequence: 7, ContractID: "ctr_1", SubjectID: "orders", AcceptedAt: "2026-12-01T12:00:00.001Z", Hops: 2}
				switch {
				case n == 1:
					m.Data = json.RawMessage("7")
				case n > 1:
					m.Data = json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
				}
				if signed {
					m.Signature = &Signature{KID: "k1", Alg: "ed25519", Sig: "c2ln", V: SignatureV2}
				}
				want := m.Clone()

				d := handed(m)
				c := d.Message
				require.NotNil(t, c)
				require.Equal(t, want, c, "equal field for field")
				require.Nil(t, c.pre)
				if n == 0 {
					require.Nil(t, c.Data)
				} else {
					require.Len(t, c.Data, n)
					if n <= 2240 { // in the Delivery's allocation
						require.Equal(t, n, cap(c.Data), "capped at its length")
					}
					c.Data[0] = '!'
					require.Equal(t, want.Data, m.Data, "the data is the copy's own")
					_ = append(c.Data[:1], '?')
					require.Equal(t, byte('!'), c.Data[0])
				}
				if signed {
					require.NotSame(t, m.Signature, c.Signature)
					c.Signature.Sig = "forged"
					require.Equal(t, "c2ln", m.Signature.Sig, "the signature is the copy's own")
				}
				c.ID = "msg_forged"
				require.Equal(t, "msg_1", m.ID)
			})
		}
	}
}

// A delivery record's digest is that of its ids, one per line, for a
// batch that fits the record's own room and for larger ones listed in
// pooled room, whatever the batch listed there before (longer ids, more
// of them).
func TestBatchRecordDigestWhateverTheRoomHeld(t *testing.T) {
	batch := func(n int, id func(int) string) ([]logged, []string) {
		es, ids := make([]logged, n), make([]string, n)
		for i := range es {
			ids[i] = id(i)
			es[i] = logged{seq: uint64(i + 1), id: ids[i]}
		}
		return es, ids
	}
	long := func(i int) string { return "msg_" + strings.Repeat("z", 60) + strconv.Itoa(i) }
	short := func(i int) string { return "m" + strconv.Itoa(i) }
	for _, tc := range []struct {
		name string
		n    int
		id   func(int) string
	}{
		{"one", 1, short},
		{"within the record's room", 20, short},
		{"large, long ids", 300, long},
		{"large, short ids, after long ones", 200, short},
		{"just past the record's room", 513, func(int) string { return "" }},
		{"past the pooled bound", 1024, func(i int) string { return long(i) + long(i) }},
		{"small again", 3, long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, ids := batch(tc.n, tc.id)
			r := batchRecord(EventDeliveryAcked, OutcomeAllow, store.AuditRecord{Subject: "orders"}, es)
			require.Equal(t, DeliveryDigest(ids), r.Digest)
			require.Equal(t, tc.n, r.Count)
		})
	}
}
