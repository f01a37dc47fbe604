package programs_test

import (
	"context"
	"fmt"

	"pigeon"
	"pigeon/programs"
)

// Deploy a program (modOK: a hand-written module that acknowledges every
// message) on a work queue, as the account svc-prog.
func ExampleManager_Deploy() {
	ctx := context.Background()
	e, err := pigeon.New(ctx, &pigeon.Options{Catalog: testCatalog()})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown(ctx)
	if _, err := e.CreateAccount(ctx, pigeon.Account{ID: "svc-prog"}); err != nil {
		panic(err)
	}
	mg, err := programs.New(ctx, e, nil) // programs kept in memory
	if err != nil {
		panic(err)
	}
	defer mg.Close(ctx)
	man, err := programs.ParseManifest([]byte(`{"route":{"subject":"orders.in","maxInFlight":4},"account":"svc-prog"}`))
	if err != nil {
		panic(err)
	}
	by := &pigeon.Principal{ID: "ops", Roles: []string{pigeon.RoleAdmin}}
	info, err := mg.Deploy(ctx, by, "ack-all", man, modOK)
	fmt.Println(info.Name, info.Version, info.Bound, err)
	_, err = mg.Deploy(ctx, by, "broken", man, []byte("not wasm"))
	fmt.Println(pigeon.ErrorCode(err))
	// Output:
	// ack-all 1 true <nil>
	// PROGRAM_INVALID
}
