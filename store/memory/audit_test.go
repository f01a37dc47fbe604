package memory

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"pigeon/store"
)

// brokerAudit returns n records chained the way the broker chains them: Seq
// from 1, ID "aud_" and the Seq, Time in UTC, PrevHash the previous Hash
// (Genesis first), values from small sets, a new message id each.
func brokerAudit(n int) []store.AuditRecord {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := make([]store.AuditRecord, n)
	prev := store.Genesis
	for i := range recs {
		seq := uint64(i + 1)
		r := store.AuditRecord{
			Seq: seq, ID: "aud_" + strconv.FormatUint(seq, 10), Type: "publish.accepted",
			Time: t0.Add(time.Duration(i) * time.Millisecond), Outcome: "allow",
			Subject: "payments.authorize", Principal: "svc-checkout", ContractID: "ctr_" + strconv.Itoa(i/1000),
			PolicyID: "payments-v3", SchemaID: "payment.authorization.v1",
			MessageID: fmt.Sprintf("msg_%020d", i), PrevHash: prev,
		}
		switch i % 7 {
		case 3:
			r.Type, r.Outcome, r.Code, r.Gate = "publish.denied", "deny", "SCHEMA_INVALID", "schema"
		case 5:
			r.Type, r.Gate, r.Ref = "publish.duplicate", "duplicate", "msg_dup_"+strconv.Itoa(i)
		}
		r.Hash = r.ComputeHash()
		prev = r.Hash
		recs[i] = r
	}
	return recs
}

// utc is recs as the store gives them back: Time in UTC, with no monotonic
// reading.
func utc(recs ...store.AuditRecord) []store.AuditRecord {
	out := make([]store.AuditRecord, len(recs))
	for i, r := range recs {
		r.Time = r.Time.UTC()
		out[i] = r
	}
	return out
}

// requireAudit compares record by record, so that a failure names the
// first bad record rather than diffing thousands.
func requireAudit(t *testing.T, want, got []store.AuditRecord, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		require.Equal(t, want[i], got[i], "%s: record %d", what, i)
	}
}

func TestAuditRoundTrip(t *testing.T) {
	hexA := strings.Repeat("0123456789abcdef", 4)
	hexB := strings.Repeat("fedcba9876543210", 4)
	edit := func(n int, f func(i int, r *store.AuditRecord)) []store.AuditRecord {
		recs := brokerAudit(n)
		for i := range recs {
			f(i, &recs[i])
		}
		return recs
	}
	cases := []struct {
		name string
		recs []store.AuditRecord
	}{
		{"broker pattern", brokerAudit(3*auditChunkLen + 5)},
		{"every string empty", edit(10, func(i int, r *store.AuditRecord) {
			*r = store.AuditRecord{Seq: r.Seq}
		})},
		{"upper-case and other non-hex hashes", edit(12, func(i int, r *store.AuditRecord) {
			r.Hash = []string{
				strings.ToUpper(hexA), hexA[:63], hexA + "0", hexA[:63] + "g", hexA[:63] + "A",
				strings.Repeat("ab", 64), "", "x", hexA[:63] + "\x00", strings.Repeat("é", 32),
			}[i%10]
			if i > 0 && i%3 != 0 {
				r.PrevHash = strings.ToUpper(hexB)
			}
		})},
		{"PrevHash not the previous Hash", edit(20, func(i int, r *store.AuditRecord) {
			switch i % 5 {
			case 0:
				r.PrevHash = store.Genesis
			case 1:
				r.PrevHash = hexB
			case 2:
				r.PrevHash = ""
			case 3:
				r.PrevHash = r.Hash // its own, not the previous one
			}
		})},
		{"PrevHash the previous Hash, which is long or odd", edit(10, func(i int, r *store.AuditRecord) {
			r.Hash = []string{strings.Repeat("h", 65), strings.Repeat("H", 64), "", strings.Repeat("z", 1000)}[i%4]
			if i > 0 {
				r.PrevHash = []string{strings.Repeat("h", 65), strings.Repeat("H", 64), "", strings.Repeat("z", 1000)}[(i-1)%4]
			}
		})},
		{"first PrevHash not Genesis", edit(3, func(i int, r *store.AuditRecord) {
			if i == 0 {
				r.PrevHash = hexA
			}
		})},
		{"ID not aud_ and the Seq", edit(12, func(i int, r *store.AuditRecord) {
			seq := strconv.FormatUint(r.Seq, 10)
			r.ID = []string{
				"aud_0" + seq, "aud_+" + seq, "AUD_" + seq, "aud_" + strconv.FormatUint(r.Seq+1, 10),
				"aud_", "aud", "", "aud_" + seq + " ", "x" + seq, "aud-" + seq, "aud_" + seq + "0",
				"aud_" + seq, // the one that matches, between the others
			}[i]
		})},
		{"odd times", edit(9, func(i int, r *store.AuditRecord) {
			r.Time = []time.Time{
				{}, time.Now(), time.Date(2025, 1, 1, 0, 0, 0, 5, time.FixedZone("X", -7*3600)),
				time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(1500, 6, 1, 0, 0, 0, 999_999_999, time.UTC),
				time.Unix(-1, 0), time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
				time.Now().In(time.FixedZone("Y", 3*3600+1800)), {},
			}[i]
		})},
		{"many distinct interned values", edit(2*auditChunkLen+3, func(i int, r *store.AuditRecord) {
			v := func(f string, k int) string { return f + strconv.Itoa(k) }
			// Every field changes on every record, values come back
			// later but not next, and one field's value is another's.
			r.Type, r.Outcome, r.Code = v("t", i), v("o", i%97), v("c", i%3)
			r.Gate, r.Subject, r.Principal = v("g", i%2), v("s", i*7%1001), v("t", i+1)
			r.ContractID, r.PolicyID, r.SchemaID = v("c", i%5), "", v("x", i%4)
			if i%2 == 0 {
				r.PolicyID, r.SchemaID = r.Subject, ""
			}
		})},
		{"bytes of every kind, and long strings", edit(6, func(i int, r *store.AuditRecord) {
			r.MessageID = strings.Repeat("m", 200*i)
			r.Ref = string([]byte{0, 0xff, byte(i), 0x80})
			r.Subject = "ü\x00" + strconv.Itoa(i%2)
			r.ID = strings.Repeat("\xff", i)
		})},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			s := New(nil)
			// Batches of every size from 1 up.
			for at, k := 0, 1; at < len(c.recs); at, k = at+k, k+1 {
				require.NoError(t, s.AppendAudit(ctx, c.recs[at:min(at+k, len(c.recs))]...))
			}
			want := utc(c.recs...)
			got, err := s.ReadAudit(ctx, 0, 0)
			require.NoError(t, err)
			requireAudit(t, want, got, "all")
			for i := range want {
				one, err := s.ReadAudit(ctx, uint64(i+1), 1)
				require.NoError(t, err)
				require.Equal(t, want[i:i+1], one)
			}
			head, cp, err := s.AuditHead(ctx)
			require.NoError(t, err)
			require.Equal(t, want[len(want)-1], head)
			require.Equal(t, store.Checkpoint{}, cp)
		})
	}
}

func TestAuditReadWindows(t *testing.T) {
	ctx := t.Context()
	s := New(nil)
	const total = 3*auditChunkLen + 10
	recs := brokerAudit(total)
	require.NoError(t, s.AppendAudit(ctx, recs...))
	want := utc(recs...)
	for _, from := range []int{0, 1, 2, auditChunkLen - 1, auditChunkLen, auditChunkLen + 1, 2*auditChunkLen + 1, total - 1, total} {
		for _, limit := range []int{-1, 0, 1, 2, auditChunkLen - 1, auditChunkLen + 3, 2*auditChunkLen + 1, 10 * total} {
			got, err := s.ReadAudit(ctx, uint64(from), limit)
			require.NoError(t, err)
			i0 := max(from, 1) - 1
			n := total - i0
			if limit > 0 {
				n = min(n, limit)
			}
			requireAudit(t, want[i0:i0+n], got, fmt.Sprintf("from %d limit %d", from, limit))
		}
	}
	for _, from := range []uint64{total + 1, total + 2, 1 << 63} {
		got, err := s.ReadAudit(ctx, from, 0)
		require.NoError(t, err)
		require.Empty(t, got, "from %d", from)
	}
}

// TestAuditCompact checks that the broker's records take the cheap paths:
// every special case recognised, few distinct strings, and per record
// only the message id and ref and the raw hash in the arena.
func TestAuditCompact(t *testing.T) {
	ctx := t.Context()
	s := New(nil)
	recs := brokerAudit(2*auditChunkLen + 1)
	require.NoError(t, s.AppendAudit(ctx, recs...))
	l := &s.audit
	require.Len(t, l.chunks, 3)
	require.Equal(t, withSlack(l.chunks[1].used()), cap(l.chunks[2].data), "a new chunk's arena is sized from the last full one")

	distinct, shapes := map[string]bool{}, map[[auditInterned]string]bool{}
	for i := range recs {
		r := &recs[i]
		shape := [auditInterned]string{r.Type, r.Outcome, r.Code, r.Gate, r.Subject, r.Principal, r.ContractID, r.PolicyID, r.SchemaID}
		shapes[shape] = true
		for _, v := range shape {
			if v != "" {
				distinct[v] = true
			}
		}
		c, j := l.at(i)
		require.Equal(t, uint8(auditSeqID|auditPrevSame|auditHashHex), c.hdrs[j].flags, "record %d", i)
		p := c.bytes(j)
		require.Equal(t, r.MessageID, string(p.msg))
		require.Equal(t, r.Ref, string(p.ref))
		start := 0
		if j > 0 {
			start = c.hdrs[j-1].end
		}
		require.Equal(t, 2+len(r.MessageID)+len(r.Ref)+32, c.hdrs[j].end-start, "record %d", i)
	}
	require.Len(t, l.strs, len(distinct)+1, "each distinct value once, and \"\"")
	require.Len(t, l.ids, len(distinct))
	require.Len(t, l.shapes, len(shapes), "each distinct combination once")
	require.Len(t, l.shapeIDs, len(shapes))
}

// TestRecordsKeepNoPointers checks that what the store keeps per message,
// per idempotency entry and per audit record gives the garbage collector
// nothing to scan, and how many bytes each takes.
func TestRecordsKeepNoPointers(t *testing.T) {
	var pointers func(reflect.Type) bool
	pointers = func(t reflect.Type) bool {
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				if pointers(t.Field(i).Type) {
					return true
				}
			}
			return false
		case reflect.Array:
			return pointers(t.Elem())
		case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
			return false
		}
		return true
	}
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		size int
	}{
		{"message header", reflect.TypeFor[msgHeader](), 40},
		{"expiry item", reflect.TypeFor[expiry](), 32},
		{"audit header", reflect.TypeFor[auditHeader](), 32},
		{"audit shape", reflect.TypeFor[auditShape](), 36},
		{"index slot value", reflect.TypeFor[packedLoc](), 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.False(t, pointers(tc.typ))
			require.Equal(t, tc.size, int(tc.typ.Size()))
		})
	}
}

func TestAuditInternedValuesAreCopies(t *testing.T) {
	ctx := t.Context()
	s := New(nil)
	big := strings.Repeat("x", 1<<16) + "payments.authorize"
	r := brokerAudit(1)[0]
	r.Subject = big[1<<16:] // a caller's string inside a larger one
	require.NoError(t, s.AppendAudit(ctx, r))
	got, _, err := s.AuditHead(ctx)
	require.NoError(t, err)
	require.Equal(t, "payments.authorize", got.Subject)
	require.NotSame(t, unsafe.StringData(r.Subject), unsafe.StringData(got.Subject), "the table keeps its own copy")
}

func TestDecimalLen(t *testing.T) {
	for _, x := range []uint64{0, 1, 9, 10, 99, 100, 999_999, 1_000_000, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		require.Equal(t, len(strconv.FormatUint(x, 10)), decimalLen(x), "%d", x)
	}
}
