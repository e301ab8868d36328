package api_test

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/node/api"
)

func Example() {
	// Server side: decode a check into a reused request, answer it.
	var req api.CheckRequest
	if err := api.DecodeCheck([]byte(`{"rule":"per-key","key":"user-42"}`), &req); err != nil {
		panic(err)
	}
	res := api.CheckResult{Allowed: true, Rule: req.Rule, Key: req.Key, Limit: 100, Remaining: 41, ResetMS: 600}
	fmt.Println(req.Hits, string(api.AppendCheckResult(nil, &res)))

	// A bad request names its field.
	err := api.DecodeCheck([]byte(`{"rule":"per-key","hits":-1}`), &req)
	var fe *api.FieldError
	if errors.As(err, &fe) {
		fmt.Println(string(api.AppendError(nil, fe.Msg, fe.Field)))
	}
	// Output:
	// 1 {"allowed":true,"rule":"per-key","key":"user-42","limit":100,"remaining":41,"reset_ms":600,"retry_after_ms":0}
	// {"error":"must be between 0 and 1099511627776","field":"hits"}
}

func ExampleDecodeChecks() {
	var batch api.ChecksRequest
	body := `{"checks":[{"rule":"per-key","key":"a","hits":2},{"rule":"per-key"}]}`
	if err := api.DecodeChecks([]byte(body), &batch); err != nil {
		panic(err)
	}
	results := make([]api.CheckResult, len(batch.Checks))
	for i, c := range batch.Checks {
		if c.Err != nil {
			results[i] = api.CheckResult{Error: c.Err.Msg, Field: c.Err.Field}
			continue
		}
		results[i] = api.CheckResult{Allowed: true, Rule: c.Rule, Key: c.Key, Limit: 10, Remaining: 10 - c.Hits}
	}
	fmt.Println(string(api.AppendResults(nil, results)))
	// Output:
	// {"results":[{"allowed":true,"rule":"per-key","key":"a","limit":10,"remaining":8,"reset_ms":0,"retry_after_ms":0},{"error":"required with rule","field":"checks[1].key"}]}
}
