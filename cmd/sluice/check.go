package main

import (
	"context"
	"strconv"

	"github.com/sluicehq/sluice/node/api"
)

func (c *cli) check(args []string) error {
	fs := newFlags("check")
	hits := fs.Int64("hits", 1, "hits to charge (0 peeks)")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("check: want RULE KEY")
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	var r api.CheckResult
	err = c.ask(a, "POST", "/v1/check", func(cx context.Context) (err error) {
		r, err = a.Check(cx, pos[0], pos[1], *hits)
		return err
	})
	if err != nil {
		return err
	}
	if *o == "json" {
		err = c.json(map[string]any{"allowed": r.Allowed, "rule": r.Rule, "key": r.Key, "limit": r.Limit,
			"remaining": r.Remaining, "reset_ms": r.ResetMS, "retry_after_ms": r.RetryAfterMS, "degraded": r.Degraded})
	} else {
		decision := "allowed"
		if !r.Allowed {
			decision = "denied"
		}
		if r.Degraded {
			decision += " (degraded)"
		}
		c.table("DECISION\tRULE\tKEY\tLIMIT\tREMAINING\tRESET\tRETRY-AFTER", [][]string{{decision, r.Rule, r.Key,
			strconv.FormatInt(r.Limit, 10), strconv.FormatInt(r.Remaining, 10), ms(r.ResetMS), ms(r.RetryAfterMS)}})
	}
	if err != nil {
		return err
	}
	if !r.Allowed {
		return errDenied
	}
	return nil
}
