package pigeon_test

import (
	"strconv"
	"testing"

	"pigeon"
)

// BenchmarkReceiptFinderForgedLog: ReceiptFinder's two passes over a
// forged log of n acceptances of one id on a subject followed by n batch
// records of that subject listing none of them (what whoever writes a
// data directory can give pigeon audit receipts). records/op is the log's
// length; the time per record should stay about flat as n grows.
func BenchmarkReceiptFinderForgedLog(b *testing.B) {
	for _, n := range []int{1000, 4000, 16000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			log := make([]pigeon.AuditRecord, 0, 2*n)
			for i := 1; i <= n; i++ {
				log = append(log, pigeon.AuditRecord{Seq: uint64(len(log) + 1), Type: string(pigeon.EventPublishAccepted), Subject: "s", MessageID: "X", Seqs: strconv.Itoa(i)})
			}
			past := strconv.Itoa(n+1) + "-" + strconv.Itoa(n+256)
			for range n {
				log = append(log, pigeon.AuditRecord{Seq: uint64(len(log) + 1), Type: string(pigeon.EventDeliveryDispatched), Subject: "s", Seqs: past, Count: 256, Principal: "bob"})
			}
			b.ReportAllocs()
			for b.Loop() {
				f := pigeon.NewReceiptFinder("X")
				for _, pass := range []func(*pigeon.AuditRecord){f.Accepted, f.Next} {
					for i := range log {
						pass(&log[i])
					}
				}
				if len(f.Receipts) != 0 {
					b.Fatal(f.Receipts)
				}
			}
			b.ReportMetric(float64(len(log)), "records/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(log)), "ns/record")
		})
	}
}
