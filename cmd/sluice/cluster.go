package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/node/client"
)

func (c *cli) members(args []string) error {
	fs := newFlags("members")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("members: unexpected %q", pos[0])
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	var m client.MembersResponse
	err = c.ask(a, "GET", "/v1/members", func(cx context.Context) (err error) {
		m, err = a.Members(cx)
		return err
	})
	if err != nil {
		return err
	}
	if *o == "json" {
		return c.json(m)
	}
	rows := make([][]string, 0, len(m.Members))
	for _, mb := range m.Members {
		name := mb.Name
		if name == m.Self {
			name += " (self)"
		}
		state := mb.State
		if state == "alive" && mb.Answering != nil && !*mb.Answering {
			state = "alive, not answering" // cut off from the asked node, at least one way
		}
		rows = append(rows, []string{name, state, dash(mb.HTTPAddr), dash(mb.GossipAddr)})
	}
	c.table("NAME\tSTATE\tHTTP\tGOSSIP", rows)
	if q := m.Quorum; q != nil && q.Minority {
		fmt.Fprintf(c.out, "%s sees %d of the %d members it last knew (missing: %s): the minority of a partition, not ready\n",
			m.Self, q.Seen, q.Known, strings.Join(q.Missing, ", "))
	}
	return nil
}

func (c *cli) hotkeys(args []string) error {
	fs := newFlags("hotkeys")
	o := c.outputFlag(fs, "table", "json")
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("hotkeys: unexpected %q", pos[0])
	}
	a, err := c.client()
	if err != nil {
		return err
	}
	var h client.HotKeys
	err = c.ask(a, "GET", "/v1/hotkeys", func(cx context.Context) (err error) {
		h, err = a.HotKeys(cx)
		return err
	})
	if err != nil {
		return err
	}
	if *o == "json" {
		return c.json(h)
	}
	fmt.Fprintf(c.out, "node %s: %.0f checks/s\n", h.Self, h.NodeRate)
	if len(h.Top) == 0 && len(h.Splits) == 0 {
		// As the dashboard does: say why a node alone never has any.
		var m client.MembersResponse
		err := c.ask(a, "GET", "/v1/members", func(cx context.Context) (err error) {
			m, err = a.Members(cx)
			return err
		})
		if err == nil && len(m.Members) <= 1 {
			fmt.Fprintln(c.out, "no hot keys: they are tracked in a cluster, and this node runs alone")
		} else {
			fmt.Fprintln(c.out, "no hot keys")
		}
		return nil
	}
	sort.SliceStable(h.Top, func(i, j int) bool { return h.Top[i].Rate > h.Top[j].Rate })
	rows := make([][]string, 0, len(h.Top)+len(h.Splits))
	for _, k := range h.Top {
		split := "-"
		if k.Split {
			split = strings.Join(k.Holders, ",")
		}
		rows = append(rows, []string{k.Key, strconv.FormatFloat(k.Rate, 'f', 0, 64), strconv.FormatUint(k.Count, 10), split})
	}
	c.table("KEY\tRATE/S\tCOUNT\tSPLIT OVER", rows)
	if len(h.Splits) > 0 {
		fmt.Fprintln(c.out)
		rows = rows[:0]
		for _, s := range h.Splits {
			rows = append(rows, []string{s.Key, s.Owner, strconv.FormatUint(s.Epoch, 10), strings.Join(s.Holders, ",")})
		}
		c.table("SPLIT KEY\tOWNER\tEPOCH\tHOLDERS", rows)
	}
	return nil
}
