package client_test

import (
	"testing"

	"github.com/sluicehq/sluice/node/client"
)

func FuzzParseMembers(f *testing.F) {
	for _, s := range []string{
		`{"self":"node-a","ready":true,"vnodes":8192,"members":[{"name":"node-a","http_addr":"127.0.0.1:8080","gossip_addr":"127.0.0.1:7946","state":"alive"}]}`,
		`{"members":[{"name":"a","state":"dead"},{"name":"b","http_addr":"[::1]:80"}]}`,
		`{"members":[{"name":"a"},{"name":"a"}]}`,
		`{"vnodes":-3,"members":null}`,
		`{"members":[{"name":"\u00e9","http_addr":":"}]}`,
		`[]`, `{`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := client.ParseMembers(body)
		if err != nil {
			return
		}
		if r.Vnodes < 0 || len(r.Members) == 0 {
			t.Fatalf("accepted %+v", r)
		}
		seen := map[string]bool{}
		for _, m := range r.Members {
			if m.Name == "" || seen[m.Name] {
				t.Fatalf("accepted an empty or repeated name in %+v", r)
			}
			seen[m.Name] = true
		}
	})
}
