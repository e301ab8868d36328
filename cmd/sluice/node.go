package main

import (
	"context"
	"os"
	"os/user"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// client returns the Admin of the node.
func (c *cli) client() (*client.Admin, error) {
	if c.admin != nil {
		return c.admin, nil
	}
	addr := c.addr
	if addr == "" {
		addr = c.getenv("SLUICE_ADDR")
	}
	if addr == "" {
		addr = defaultAddr
	}
	token := c.token
	if token == "" {
		token = c.getenv("SLUICE_ADMIN_TOKEN")
	}
	a, err := client.NewAdmin(client.AdminConfig{Addr: addr, Token: token, Actor: actor(c.getenv)})
	if err != nil {
		return nil, usagef("node address: %v", err)
	}
	c.admin = a
	return a, nil
}

// actor is user@host, for the node's change log.
func actor(getenv func(string) string) string {
	name := getenv("USER")
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "sluice-cli:" + name + "@" + host
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}
