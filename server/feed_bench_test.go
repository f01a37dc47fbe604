package server_test

import (
	"testing"

	"pigeon"
	"pigeon/server"
)

// BenchmarkFeedAudited is what the console's feed costs one decision.
func BenchmarkFeedAudited(b *testing.B) {
	f := server.NewFeed(0)
	rec := pigeon.AuditRecord{Type: string(pigeon.EventPublishAccepted), Outcome: "allow", Subject: "payments.authorize", Principal: "p", MessageID: "m"}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f.Audited(rec)
		}
	})
}
