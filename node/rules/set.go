package rules

import (
	"io"
	"os"
	"reflect"
	"slices"

	"gopkg.in/yaml.v3"
)

// Set is a validated, immutable set of rules with their matching indexes.
// It is safe for concurrent use. The zero Set and a nil *Set hold no rules.
type Set struct {
	rules  []*Rule
	byName map[string]*Rule
	// auth holds the rules with key sources, in file order.
	auth []*Rule
	// byDesc maps a rule's first descriptor name to the indexes (in rules)
	// of the rules reachable by descriptors that begin with it.
	byDesc map[string][]int
}

// NewSet validates specs and builds a Set. Rule names must be unique.
func NewSet(specs []Spec) (*Set, error) {
	if len(specs) > MaxRules {
		return nil, &Error{Index: -1, Field: "rules", Msg: "more than 10000 rules"}
	}
	s := &Set{rules: make([]*Rule, 0, len(specs)), byName: make(map[string]*Rule, len(specs)), byDesc: map[string][]int{}}
	for i, spec := range specs {
		r, e := compile(spec, i, 0, nil)
		if e != nil {
			return nil, e
		}
		if err := s.add(r, i, 0); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Set) add(r *Rule, idx, line int) *Error {
	if _, dup := s.byName[r.Name]; dup {
		return &Error{Rule: r.Name, Index: idx, Field: "name", Line: line, Msg: "duplicate rule name"}
	}
	s.byName[r.Name] = r
	r.pos = len(s.rules)
	if len(r.Sources) > 0 {
		s.auth = append(s.auth, r)
	}
	if len(r.Descriptors) > 0 {
		s.byDesc[r.Descriptors[0]] = append(s.byDesc[r.Descriptors[0]], len(s.rules))
	}
	s.rules = append(s.rules, r)
	return nil
}

// Load reads and parses a rule file (at most MaxFileBytes).
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Get returns the rule named name, or nil.
func (s *Set) Get(name string) *Rule {
	if s == nil {
		return nil
	}
	return s.byName[name]
}

// Rules returns the rules in file order. The slice must not be modified.
func (s *Set) Rules() []*Rule {
	if s == nil {
		return nil
	}
	return s.rules
}

// Len returns the number of rules.
func (s *Set) Len() int { return len(s.Rules()) }

// Specs returns the rules' specs in order (a new slice).
func (s *Set) Specs() []Spec {
	specs := make([]Spec, 0, s.Len())
	for _, r := range s.Rules() {
		specs = append(specs, r.Spec)
	}
	return specs
}

// With returns a new Set holding s's rules with spec added, or replacing
// the rule of the same name in place (the admin API's PUT).
func (s *Set) With(spec Spec) (*Set, error) {
	specs := s.Specs()
	i := slices.IndexFunc(specs, func(x Spec) bool { return x.Name == spec.Name })
	if i >= 0 {
		specs[i] = spec
	} else {
		specs = append(specs, spec)
	}
	return NewSet(specs)
}

// Without returns a new Set holding s's rules but the one named name, and
// whether that rule existed (the admin API's DELETE).
func (s *Set) Without(name string) (*Set, bool) {
	specs := s.Specs()
	i := slices.IndexFunc(specs, func(x Spec) bool { return x.Name == name })
	if i < 0 {
		return s, false
	}
	ns, err := NewSet(slices.Delete(specs, i, i+1))
	if err != nil { // cannot happen: the remaining specs were valid together
		return s, false
	}
	return ns, true
}

// Marshal writes the set as a rule file that Parse reads back to an equal
// Set.
func (s *Set) Marshal() ([]byte, error) {
	return yaml.Marshal(fileSpec{Rules: s.Specs()})
}

type fileSpec struct {
	Rules []Spec `yaml:"rules"`
}

// Equal reports whether s and other hold the same rules in the same order
// with the same meaning (specs that differ only in spelling, such as period
// 60s and 1m, are equal).
func (s *Set) Equal(other *Set) bool {
	a, b := s.Rules(), other.Rules()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// Equal reports whether r and o have the same meaning (Spec is ignored).
func (r *Rule) Equal(o *Rule) bool {
	if r == nil || o == nil {
		return r == o
	}
	x, y := *r, *o
	x.Spec, y.Spec = Spec{}, Spec{}
	x.pos, y.pos = 0, 0
	return reflect.DeepEqual(x, y)
}

// Diff lists the rule names added in next, removed from prev, and whose
// meaning changed, each in the order of the set it comes from. A reload uses
// it to log what changed and to drop state of removed or changed rules.
func Diff(prev, next *Set) (added, removed, changed []string) {
	for _, r := range next.Rules() {
		if o := prev.Get(r.Name); o == nil {
			added = append(added, r.Name)
		} else if !o.Equal(r) {
			changed = append(changed, r.Name)
		}
	}
	for _, r := range prev.Rules() {
		if next.Get(r.Name) == nil {
			removed = append(removed, r.Name)
		}
	}
	return added, removed, changed
}
