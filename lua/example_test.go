package lua_test

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
)

func ExampleParseURL() {
	for _, s := range []string{
		"127.0.0.1:6379",
		"10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000",
		"sentinel://mymaster@10.0.0.1:26379,10.0.0.2:26379",
		"redis://app:s3cret@redis.internal:6379/2",
	} {
		c, err := lua.ParseURL(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("addrs=%v master=%q user=%q db=%d\n", c.Addrs, c.SentinelMaster, c.Username, c.DB)
	}
	_, err := lua.ParseURL("redis://h:6379/x")
	fmt.Println(err)
	// Output:
	// addrs=[127.0.0.1:6379] master="" user="" db=0
	// addrs=[10.0.0.1:7000 10.0.0.2:7000 10.0.0.3:7000] master="" user="" db=0
	// addrs=[10.0.0.1:26379 10.0.0.2:26379] master="mymaster" user="" db=0
	// addrs=[redis.internal:6379] master="" user="app" db=2
	// redis URL redis://h:6379/x: db: "x" is not a database number
}

// A node wires the Redis store under its lease Manager (this is what
// cmd/sluiced does with SLUICE_REDIS).
func ExampleNewStore() {
	cfg, err := lua.ParseURL(os.Getenv("SLUICE_REDIS"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := lua.NewStore(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	m := lease.NewManager(store, lease.DefaultConfig())
	defer m.Close()

	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute}
	d, err := m.Take("user-42", p, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.Allowed, d.Remaining)
}
