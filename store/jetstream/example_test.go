package jetstream_test

import (
	"context"
	"log"

	"pigeon"
	"pigeon/store/jetstream"
)

// A node of a cluster: the store on the NATS servers, the Cluster seam on
// the same connection, and an engine that uses both. Every node of the
// cluster runs the same code with its own Node name.
func Example() {
	ctx := context.Background()
	st, err := jetstream.Connect(ctx, "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224",
		&jetstream.Options{Replicas: 3, Node: "p1"})
	if err != nil {
		log.Fatal(err) // names the URLs when the cluster is unreachable
	}
	defer st.Close(ctx)
	cl, err := jetstream.NewCluster(ctx, st)
	if err != nil {
		log.Fatal(err)
	}
	e, err := pigeon.New(ctx, &pigeon.Options{Store: st, Cluster: cl})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Shutdown(ctx)
}
