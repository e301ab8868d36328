// Command caddy is Caddy's standard distribution with the Sluice handler
// (http.handlers.sluice, the sluice directive) built in.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/sluicehq/sluice/contrib/caddy"
)

func main() {
	caddycmd.Main()
}
