package api

// This file keeps the first implementation of the decoders, built on
// github.com/valyala/fastjson, as an oracle: the fuzz tests check that the
// strict scanner (scan.go) accepts nothing the oracle and encoding/json
// refuse, and decodes what both accept to the same value.

import (
	"strconv"
	"testing"

	"github.com/valyala/fastjson"
)

// fjDecodeCheck (the former fastjson implementation, kept as a test oracle) decodes the body of POST /v1/check into dst, reusing dst's
// storage, and validates it. The error, if any, is a [*FieldError].
func fjDecodeCheck(data []byte, dst *CheckRequest) error {
	p, v, fe := parse(data)
	if fe != nil {
		return fe
	}
	defer parsers.Put(p)
	dst.Err = nil
	if fe := fjCheck(v, dst, -1, ""); fe != nil {
		return fe
	}
	return nil
}

// fjDecodeChecks (the former fastjson implementation, kept as a test oracle) decodes the body of POST /v1/checks into dst, reusing the
// capacity of dst.Checks. It fails only when the body as a whole is bad
// (not JSON, no "checks" array, more than MaxBatch checks); an invalid item
// sets that item's Err, whose Field names it ("checks[3].key"), and the
// other items are decoded normally.
func fjDecodeChecks(data []byte, dst *ChecksRequest) error {
	p, v, fe := parse(data)
	if fe != nil {
		return fe
	}
	defer parsers.Put(p)
	o, err := v.Object()
	if err != nil {
		return &FieldError{Msg: "body must be a JSON object"}
	}
	cv := o.Get("checks")
	if cv == nil || cv.Type() == fastjson.TypeNull {
		return &FieldError{Field: "checks", Msg: "required"}
	}
	items, err := cv.Array()
	if err != nil {
		return &FieldError{Field: "checks", Msg: "must be an array"}
	}
	if len(items) == 0 || len(items) > MaxBatch {
		return &FieldError{Field: "checks", Msg: "must hold 1 to 1000 checks"}
	}
	checks := dst.Checks
	if cap(checks) < len(items) {
		checks = append(checks[:cap(checks)], make([]CheckRequest, len(items)-cap(checks))...)
	}
	checks = checks[:len(items)]
	for i, item := range items {
		c := &checks[i]
		hint := ""
		if i > 0 {
			hint = checks[i-1].Rule // batches usually name one rule many times
		}
		c.Err = fjCheck(item, c, i, hint)
	}
	dst.Checks = checks
	return nil
}

// decodeCheck decodes one check; hint is a string that the rule name
// probably equals (the previous item's), shared instead of allocated.
func fjCheck(v *fastjson.Value, dst *CheckRequest, idx int, hint string) *FieldError {
	o, err := v.Object()
	if err != nil {
		return &FieldError{Field: fieldName(idx, ""), Msg: "must be a JSON object"}
	}
	rule, ruleSet, ok := stringField(o, "rule")
	if !ok {
		return &FieldError{Field: fieldName(idx, "rule"), Msg: "must be a string"}
	}
	key, keySet, ok := stringField(o, "key")
	if !ok {
		return &FieldError{Field: fieldName(idx, "key"), Msg: "must be a string"}
	}
	hits, hitsSet, msg := intField(o, "hits")
	if msg == "" && hitsSet {
		msg = hitsMsg(hits)
	}
	if msg != "" {
		return &FieldError{Field: fieldName(idx, "hits"), Msg: msg}
	}
	if !hitsSet {
		hits = 1
	}
	dst.Hits, dst.HitsSet = hits, hitsSet
	dst.Descriptors = dst.Descriptors[:0]
	if dv := field(o, "descriptors"); dv != nil {
		if fe := fjDescriptors(dv, dst, idx); fe != nil {
			return fe
		}
	}
	if ruleSet {
		if msg := nameMsg(rule); msg != "" {
			return &FieldError{Field: fieldName(idx, "rule"), Msg: msg}
		}
		if !keySet {
			return &FieldError{Field: fieldName(idx, "key"), Msg: "required with rule"}
		}
		if msg := keyMsg(key); msg != "" {
			return &FieldError{Field: fieldName(idx, "key"), Msg: msg}
		}
		if len(dst.Descriptors) > 0 {
			return &FieldError{Field: fieldName(idx, "descriptors"), Msg: "not allowed with rule"}
		}
		if string(rule) == hint {
			dst.Rule = hint
		} else {
			setString(&dst.Rule, rule)
		}
		setString(&dst.Key, key)
		return nil
	}
	if keySet {
		return &FieldError{Field: fieldName(idx, "key"), Msg: "only allowed with rule"}
	}
	if len(dst.Descriptors) == 0 {
		return &FieldError{Field: fieldName(idx, "rule"), Msg: "required (or descriptors)"}
	}
	dst.Rule, dst.Key = "", ""
	return nil
}

func fjDescriptors(v *fastjson.Value, dst *CheckRequest, idx int) *FieldError {
	o, err := v.Object()
	if err != nil {
		return &FieldError{Field: fieldName(idx, "descriptors"), Msg: "must be an object of name: value"}
	}
	if o.Len() > MaxDescriptors {
		return &FieldError{Field: fieldName(idx, "descriptors"), Msg: "more than 16 descriptors"}
	}
	var fe *FieldError
	ds := dst.Descriptors[:0]
	o.Visit(func(k []byte, v *fastjson.Value) {
		if fe != nil {
			return
		}
		if msg := nameMsg(k); msg != "" {
			fe = &FieldError{Field: fieldName(idx, "descriptors"), Msg: "name " + strconv.Quote(string(k)) + ": " + msg}
			return
		}
		for i := range ds {
			if ds[i].Name == string(k) {
				fe = &FieldError{Field: fieldName(idx, "descriptors."+string(k)), Msg: "duplicate descriptor"}
				return
			}
		}
		val, err := v.StringBytes()
		if err != nil {
			fe = &FieldError{Field: fieldName(idx, "descriptors."+string(k)), Msg: "must be a string"}
			return
		}
		if msg := keyMsg(val); msg != "" {
			fe = &FieldError{Field: fieldName(idx, "descriptors."+string(k)), Msg: msg}
			return
		}
		n := len(ds)
		if n < cap(ds) {
			ds = ds[:n+1]
		} else {
			ds = append(ds, Descriptor{})
		}
		setString(&ds[n].Name, k)
		setString(&ds[n].Value, val)
	})
	dst.Descriptors = ds
	if fe != nil {
		dst.Descriptors = ds[:0]
	}
	return fe
}

// The fastjson decoder's cost, to compare with the scanner in one run.
func BenchmarkDecodeCheckFastjson(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var req CheckRequest
		for pb.Next() {
			if err := fjDecodeCheck(benchCheck, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeChecks100Fastjson(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var req ChecksRequest
		for pb.Next() {
			if err := fjDecodeChecks(benchBatch, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// DecodeCheckResult decodes one answer (of POST /v1/check, GET /v1/check,
// /v1/acquire, or an error body {"error":"...","field":"..."}) into dst.
// Absent fields are zero. It checks types, not values.
func fjDecodeCheckResult(data []byte, dst *CheckResult) error {
	p, v, fe := parse(data)
	if fe != nil {
		return fe
	}
	defer parsers.Put(p)
	if fe := fjResult(v, dst, -1); fe != nil {
		return fe
	}
	return nil
}

// DecodeResults decodes a {"results":[...]} answer, reusing dst's capacity,
// and returns the results in order.
func fjDecodeResults(data []byte, dst []CheckResult) ([]CheckResult, error) {
	p, v, fe := parse(data)
	if fe != nil {
		return dst[:0], fe
	}
	defer parsers.Put(p)
	o, err := v.Object()
	if err != nil {
		return dst[:0], &FieldError{Msg: "body must be a JSON object"}
	}
	rv := field(o, "results")
	if rv == nil {
		if ev := field(o, "error"); ev != nil {
			var r CheckResult
			if fe := fjResult(v, &r, -1); fe != nil {
				return dst[:0], fe
			}
			return dst[:0], &FieldError{Field: r.Field, Msg: r.Error}
		}
		return dst[:0], &FieldError{Field: "results", Msg: "required"}
	}
	items, err := rv.Array()
	if err != nil {
		return dst[:0], &FieldError{Field: "results", Msg: "must be an array"}
	}
	if cap(dst) < len(items) {
		dst = append(dst[:cap(dst)], make([]CheckResult, len(items)-cap(dst))...)
	}
	dst = dst[:len(items)]
	for i, item := range items {
		if fe := fjResult(item, &dst[i], i); fe != nil {
			return dst[:0], fe
		}
	}
	return dst, nil
}

func fjResult(v *fastjson.Value, dst *CheckResult, idx int) *FieldError {
	o, err := v.Object()
	if err != nil {
		return &FieldError{Field: resultField(idx, ""), Msg: "must be a JSON object"}
	}
	bools := [...]struct {
		name string
		dst  *bool
	}{{"allowed", &dst.Allowed}, {"degraded", &dst.Degraded}}
	for _, b := range bools {
		*b.dst = false
		if bv := field(o, b.name); bv != nil {
			x, err := bv.Bool()
			if err != nil {
				return &FieldError{Field: resultField(idx, b.name), Msg: "must be a boolean"}
			}
			*b.dst = x
		}
	}
	ints := [...]struct {
		name string
		dst  *int64
	}{{"limit", &dst.Limit}, {"remaining", &dst.Remaining}, {"reset_ms", &dst.ResetMS}, {"retry_after_ms", &dst.RetryAfterMS}}
	for _, n := range ints {
		x, _, msg := intField(o, n.name)
		if msg != "" {
			return &FieldError{Field: resultField(idx, n.name), Msg: msg}
		}
		*n.dst = x
	}
	strs := [...]struct {
		name string
		dst  *string
	}{{"rule", &dst.Rule}, {"key", &dst.Key}, {"lease_id", &dst.LeaseID}, {"error", &dst.Error}, {"field", &dst.Field}}
	for _, s := range strs {
		b, _, ok := stringField(o, s.name)
		if !ok {
			return &FieldError{Field: resultField(idx, s.name), Msg: "must be a string"}
		}
		setString(s.dst, b)
	}
	return nil
}

// DecodeAcquire decodes the body of POST /v1/acquire into dst.
func fjDecodeAcquire(data []byte, dst *AcquireRequest) error {
	p, v, fe := parse(data)
	if fe != nil {
		return fe
	}
	defer parsers.Put(p)
	o, err := v.Object()
	if err != nil {
		return &FieldError{Msg: "body must be a JSON object"}
	}
	rule, key, fe := ruleAndKey(o)
	if fe != nil {
		return fe
	}
	hits, hitsSet, msg := intField(o, "hits")
	if msg == "" && hitsSet {
		msg = hitsMsg(hits)
	}
	if msg != "" {
		return &FieldError{Field: "hits", Msg: msg}
	}
	if !hitsSet {
		hits = 1
	}
	setString(&dst.Rule, rule)
	setString(&dst.Key, key)
	dst.Hits, dst.HitsSet = hits, hitsSet
	return nil
}

// fjDecodeRelease is the oracle of DecodeRelease: lease_id required, rule
// and key optional ("" = absent).
func fjDecodeRelease(data []byte, dst *ReleaseRequest) error {
	p, v, fe := parse(data)
	if fe != nil {
		return fe
	}
	defer parsers.Put(p)
	o, err := v.Object()
	if err != nil {
		return &FieldError{Msg: "body must be a JSON object"}
	}
	rule, _, ok := stringField(o, "rule")
	if !ok {
		return &FieldError{Field: "rule", Msg: "must be a string"}
	}
	if msg := nameMsg(rule); len(rule) > 0 && msg != "" {
		return &FieldError{Field: "rule", Msg: msg}
	}
	key, _, ok := stringField(o, "key")
	if !ok {
		return &FieldError{Field: "key", Msg: "must be a string"}
	}
	if msg := keyMsg(key); len(key) > 0 && msg != "" {
		return &FieldError{Field: "key", Msg: msg}
	}
	id, _, ok := stringField(o, "lease_id")
	if !ok {
		return &FieldError{Field: "lease_id", Msg: "must be a string"}
	}
	if msg := leaseIDMsg(id); msg != "" {
		return &FieldError{Field: "lease_id", Msg: msg}
	}
	setString(&dst.Rule, rule)
	setString(&dst.Key, key)
	setString(&dst.LeaseID, id)
	return nil
}

func ruleAndKey(o *fastjson.Object) (rule, key []byte, fe *FieldError) {
	rule, _, ok := stringField(o, "rule")
	if !ok {
		return nil, nil, &FieldError{Field: "rule", Msg: "must be a string"}
	}
	if msg := nameMsg(rule); msg != "" {
		return nil, nil, &FieldError{Field: "rule", Msg: msg}
	}
	key, _, ok = stringField(o, "key")
	if !ok {
		return nil, nil, &FieldError{Field: "key", Msg: "must be a string"}
	}
	if msg := keyMsg(key); msg != "" {
		return nil, nil, &FieldError{Field: "key", Msg: msg}
	}
	return rule, key, nil
}

// parsers is the package's only state: a pool of reusable JSON parsers.
var parsers fastjson.ParserPool

// parse checks the body size and parses data with a pooled parser. The
// caller must put p back once it is done with v.
func parse(data []byte) (*fastjson.Parser, *fastjson.Value, *FieldError) {
	if len(data) > MaxBodyBytes {
		return nil, nil, &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	p := parsers.Get()
	v, err := p.ParseBytes(data)
	if err != nil {
		parsers.Put(p)
		return nil, nil, &FieldError{Msg: "invalid JSON: " + err.Error()}
	}
	return p, v, nil
}

// field returns the value of name in o, or nil when absent or null.
func field(o *fastjson.Object, name string) *fastjson.Value {
	v := o.Get(name)
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil
	}
	return v
}

// stringField returns the bytes of string field name (nil, true when
// absent); ok is false when the field is not a string.
func stringField(o *fastjson.Object, name string) (b []byte, present, ok bool) {
	v := field(o, name)
	if v == nil {
		return nil, false, true
	}
	b, err := v.StringBytes()
	if err != nil {
		return nil, true, false
	}
	return b, true, true
}

// intField returns the integer value of field name; msg is "" on success.
func intField(o *fastjson.Object, name string) (n int64, present bool, msg string) {
	v := field(o, name)
	if v == nil {
		return 0, false, ""
	}
	n, err := v.Int64() // strict digits; fastjson allocates only on error
	if err != nil {
		return 0, true, "must be an integer"
	}
	return n, true, ""
}
