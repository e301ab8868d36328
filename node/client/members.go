package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
)

// Member is one member of the cluster as GET /v1/members reports it.
type Member struct {
	Name       string `json:"name"`
	HTTPAddr   string `json:"http_addr"`
	GossipAddr string `json:"gossip_addr"`
	// State is "alive", "dead" or "left" (nodes may add "suspect").
	// Members that are dead or left own no keys.
	State string `json:"state"`
	// Answering is whether an alive member answers the asked node's
	// pings (false: cut off from it, at least one way); nil from nodes
	// that do not report it.
	Answering *bool `json:"answering,omitempty"`
}

// Quorum is what the asked node sees of the members it last knew: it is
// the minority of a partition (not ready) when it sees fewer than a
// majority of them.
type Quorum struct {
	Seen     int      `json:"seen"`
	Known    int      `json:"known"`
	Missing  []string `json:"missing,omitempty"`
	Minority bool     `json:"minority"`
}

// live reports whether m is on the ring: every state but dead and left,
// so that a state added later (suspect) keeps its keys, as on the nodes.
func (m *Member) live() bool { return m.State != "dead" && m.State != "left" }

// MembersResponse is the body of GET /v1/members:
//
//	{"self":"node-a","ready":true,"vnodes":8192,"members":[{"name":"node-a","http_addr":"127.0.0.1:8080","gossip_addr":"127.0.0.1:7946","state":"alive"}]}
type MembersResponse struct {
	Self    string   `json:"self"`
	Ready   bool     `json:"ready"`
	Vnodes  int      `json:"vnodes"`
	Members []Member `json:"members"`
	// Ring is the members the node routes keys to now (sorted); it follows
	// Members a moment after a change. Empty from nodes that do not
	// report it.
	Ring []string `json:"ring"`
	// Quorum is nil on a single node and from nodes that do not report it.
	Quorum *Quorum `json:"quorum,omitempty"`
}

// maxMembersBody bounds a /v1/members body: thousands of members fit.
const maxMembersBody = 4 << 20

// ParseMembers decodes and validates a /v1/members body. Errors name the
// field at fault ("members[2].name"). Unknown fields are ignored.
func ParseMembers(body []byte) (MembersResponse, error) {
	var r MembersResponse
	if len(body) > maxMembersBody {
		return r, fmt.Errorf("cannot parse the member list: larger than %d bytes", maxMembersBody)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		return MembersResponse{}, fmt.Errorf("cannot parse the member list: %w", err)
	}
	if dec.More() {
		return MembersResponse{}, fmt.Errorf("cannot parse the member list: data after the JSON object")
	}
	bad := func(field, msg string) (MembersResponse, error) {
		return MembersResponse{}, fmt.Errorf("cannot parse the member list: %s: %s", field, msg)
	}
	if r.Vnodes < 0 {
		return bad("vnodes", "must not be negative")
	}
	if len(r.Members) == 0 {
		return bad("members", "required (a node lists at least itself)")
	}
	seen := make(map[string]struct{}, len(r.Members))
	for i := range r.Members {
		m := &r.Members[i]
		f := "members[" + strconv.Itoa(i) + "]"
		if m.Name == "" {
			return bad(f+".name", "required")
		}
		if _, dup := seen[m.Name]; dup {
			return bad(f+".name", strconv.Quote(m.Name)+" given twice")
		}
		seen[m.Name] = struct{}{}
		if m.HTTPAddr != "" {
			if _, port, err := net.SplitHostPort(m.HTTPAddr); err != nil || port == "" {
				return bad(f+".http_addr", strconv.Quote(m.HTTPAddr)+" is not host:port")
			}
		}
	}
	return r, nil
}
