package node

import (
	"encoding/json"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/shard"
)

// membersBody is the body of GET /v1/members (node/client.MembersResponse
// reads it):
//
//	{"self":"node-a","ready":true,"vnodes":8192,"members":[{"name":"node-a","http_addr":"127.0.0.1:8080","gossip_addr":"127.0.0.1:7946","state":"alive","answering":true}],"ring":["node-a"]}
//
// Members are the live ones sorted by name, then those remembered as dead
// or left, sorted by name. A single node lists itself alone. Ring is the
// members this node routes keys to now, sorted: membership's view reaches
// the ring through its change callback, a moment later, so right after a
// join or a death the two may differ (wait for the ring to route).
type membersBody struct {
	Self    string       `json:"self"`
	Ready   bool         `json:"ready"`
	Vnodes  int          `json:"vnodes"`
	Members []memberBody `json:"members"`
	Ring    []string     `json:"ring"`
	// Quorum is what this member sees of the members it last knew
	// (absent on a single node).
	Quorum *member.Quorum `json:"quorum,omitempty"`
}

type memberBody struct {
	Name       string `json:"name"`
	HTTPAddr   string `json:"http_addr"`
	GossipAddr string `json:"gossip_addr"`
	State      string `json:"state"`
	// Answering: an alive member answered this node's pings lately (false
	// while alive: cut off from this node, at least one way).
	Answering bool `json:"answering"`
}

// singleName is a single node's name in /v1/members when Config.Name is
// empty.
const singleName = "local"

// members answers GET /v1/members.
func (n *Node) members(ctx *fasthttp.RequestCtx) {
	body := membersBody{Vnodes: shard.DefaultVnodes, Ready: true}
	var view []member.Member
	if c := n.cl; c == nil {
		body.Self = n.cfg.Name
		if body.Self == "" {
			body.Self = singleName
		}
	} else {
		body.Self, body.Vnodes = c.self, c.vnodes
		body.Ready = false
		if b := c.membership.Load(); b != nil {
			body.Ready = b.m.Ready()
			view = b.m.View()
		}
	}
	body.Members = make([]memberBody, 0, max(len(view), 1))
	for _, m := range view {
		state := m.State
		if state == "" {
			state = member.StateAlive
		}
		body.Members = append(body.Members, memberBody{Name: m.Name, HTTPAddr: m.HTTPAddr, GossipAddr: m.GossipAddr, State: state,
			Answering: m.Answering || (state == member.StateAlive && !n.cl.tellsReach())})
	}
	if len(body.Members) == 0 { // a single node, or membership not started yet
		body.Members = append(body.Members, memberBody{Name: body.Self, State: member.StateAlive, Answering: true})
	}
	if q, ok := n.cl.quorum(); ok {
		body.Quorum = &q
	}
	if body.Ring = n.Ring().Members(); body.Ring == nil {
		body.Ring = []string{body.Self}
	}
	b, _ := json.Marshal(body)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(b)
}
