package rules

import (
	"strings"

	"github.com/sluicehq/sluice/lease"
)

// Algorithm describes an algorithm to a rule's author, from lease's
// algorithm table: what the admin API's GET /v1/rules answers in its
// "algorithms" (the dashboard's rule editor offers them), and what
// sluice rules lint -h lists offline.
type Algorithm struct {
	// Name is the rule file's algorithm: "token_bucket".
	Name string `json:"name"`
	// Leased is whether checks are decided from tokens a node holds
	// (false: every check is a Store call; max_holders and scope: global
	// are for leased algorithms).
	Leased bool `json:"leased"`
	// Slots is whether a rule of it takes slots (/v1/acquire and
	// /v1/release) rather than checks, its limit counting in flight and
	// its period how long an unreleased slot is held.
	Slots bool `json:"slots"`
	// Fields are the fields of a rule that only some algorithms take,
	// which a rule of this one may set (burst, min_interval, max_holders,
	// scope: global).
	Fields []string `json:"fields"`
}

// Algorithms describes every algorithm, in the order of lease's table.
func Algorithms() []Algorithm {
	var out []Algorithm
	for _, a := range lease.Algorithms() {
		d := Algorithm{Name: a.String(), Leased: a.Leased(), Slots: a.Acquired(), Fields: []string{}}
		if a.HasBurst() {
			d.Fields = append(d.Fields, "burst")
		}
		if a.HasMinInterval() {
			d.Fields = append(d.Fields, "min_interval")
		}
		if a.Leased() {
			d.Fields = append(d.Fields, "max_holders", "scope")
		}
		out = append(out, d)
	}
	return out
}

// leasedNames lists the leased algorithms: "token_bucket, gcra, ...".
func leasedNames() string {
	var names []string
	for _, a := range algorithmsWith(lease.Algorithm.Leased) {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// algorithmsWith is the algorithms that have trait has, in the table's
// order.
func algorithmsWith(has func(lease.Algorithm) bool) []lease.Algorithm {
	var as []lease.Algorithm
	for _, a := range lease.Algorithms() {
		if has(a) {
			as = append(as, a)
		}
	}
	return as
}
