package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// ExampleAdmin raises a rule's limit on a running node, only if nobody
// changed the rules since they were read (If-Match).
func ExampleAdmin() {
	a, err := client.NewAdmin(client.AdminConfig{Addr: "http://localhost:8080", Token: "s3cret", Actor: "deploy-bot"})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rs, err := a.Rules(ctx)
	if err != nil {
		log.Fatal(err)
	}
	ch, err := a.PutRule(ctx, "per-key", []byte(`{"algorithm":"token_bucket","limit":500,"period":"1m","key":"header:X-API-Key"}`),
		client.WriteOptions{IfMatch: rs.Version})
	if err != nil {
		log.Fatal(err) // an *AdminError: 400 names the field, 412 means the rules changed meanwhile
	}
	fmt.Printf("version %d -> %d, changed %v\n", ch.PreviousVersion, ch.Version, ch.Changed)
}
