package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	if c.timeout <= 0 {
		return nil, usagef("-timeout %v: want a positive duration", c.timeout)
	}
	a, err := client.NewAdmin(client.AdminConfig{Addr: addr, Token: token, Actor: actor(c.getenv), Timeout: c.timeout})
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

// noticeAfter is how long a request may go unanswered before sluice says
// what it is waiting for.
const noticeAfter = time.Second

// ask runs call, one request to the node (method and path name it, such
// as "GET /v1/members"), bounded by -timeout. When the node has not
// answered after noticeAfter, it says on stderr what it is waiting for: a
// node that accepts connections but never answers is otherwise silence.
func (c *cli) ask(a *client.Admin, method, path string, call func(context.Context) error) error {
	what := method + " " + a.Addr() + path
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-c.after(noticeAfter):
		fmt.Fprintf(c.errOut, "sluice: waiting for %s (up to -timeout %v)\n", what, c.timeout)
		err = <-done
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("no answer to %s within -timeout %v", what, c.timeout)
	}
	return tokenError(err)
}

// tokenError tells a node's refusal of the admin token (401, 403) apart:
// the node was reached, and the token (never shown) is what to change.
func tokenError(err error) error {
	var ae *client.AdminError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrTokenRefused) {
		return err
	}
	if ae.Status == http.StatusUnauthorized {
		return fmt.Errorf("the node wants a token (HTTP 401): set -token or SLUICE_ADMIN_TOKEN (the node's -admin-token)")
	}
	return fmt.Errorf("the node refused the token (HTTP %d): check -token or SLUICE_ADMIN_TOKEN (the node's -admin-token); the node says: %s",
		ae.Status, ae.Msg)
}
