//go:build netns

package main

// The load client of the partition table: the test binary run again
// inside the client's namespace (TestNetnsClient, selected by
// SLUICE_NETNS_CLIENT, the path of its configuration). It waits until
// every node routes by the three members, prints "LOAD-START <unix ns>",
// sends the paced load (or the spray) while polling every node's /readyz
// and /v1/stats, and writes every answer and observation to a JSON file
// for the controller (netns_test.go) to check.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/pace"
)

// nsConfig is the client's configuration.
type nsConfig struct {
	Nodes []string // http://ip:port of n1, n2, n3
	Rules []string
	// Prefix starts every key (a row's own keys).
	Prefix string
	// Paced load: one hot key at HotRate/s and ColdKeys keys at 1/s, for
	// each rule, offered evenly to the nodes, for Length.
	HotRate, ColdKeys int
	Length            time.Duration
	// Spray, when set: SprayWorkers closed-loop workers send SprayChecks
	// checks of SprayKeys keys of Rules[0], round robin over the nodes.
	Spray                    bool
	SprayWorkers, SprayKeys  int
	SprayChecks              int64
	Token                    string // the admin token (/v1/stats)
	Out                      string
	ReadyEvery, StatsEvery   time.Duration
	WaitMembers, MaxDuration time.Duration
}

// nsRec is one check's answer.
type nsRec struct {
	T int64 `json:"t"` // sent, unix ns
	D int64 `json:"d"` // µs until answered; -1: no answer
	N int   `json:"n"` // node
	R int   `json:"r"` // rule
	K int   `json:"k"` // key: -1 the hot key
	S int   `json:"s"` // status
	A bool  `json:"a"` // allowed
	G bool  `json:"g"` // degraded
}

// nsObs is one /readyz (S) or /v1/stats (Partial, Missing) observation.
type nsObs struct {
	T       int64    `json:"t"`
	N       int      `json:"n"`
	S       int      `json:"s"`
	Why     string   `json:"why,omitempty"`
	Stats   bool     `json:"stats,omitempty"`
	Partial bool     `json:"partial,omitempty"`
	Missing []string `json:"missing,omitempty"`
}

type nsResult struct {
	Start int64   `json:"start"`
	Recs  []nsRec `json:"recs"`
	Obs   []nsObs `json:"obs"`
}

func TestNetnsClient(t *testing.T) {
	path := os.Getenv("SLUICE_NETNS_CLIENT")
	if path == "" {
		t.Skip("the load client of TestNetns, run by it in its namespace")
	}
	var cfg nsConfig
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	waitMembers(t, hc, &cfg)

	var res nsResult
	var mu sync.Mutex
	stop := make(chan struct{})
	var pollers sync.WaitGroup
	poll := func(every time.Duration, f func(n int) nsObs) {
		for n := range cfg.Nodes {
			pollers.Add(1)
			go func() {
				defer pollers.Done()
				tk := time.NewTicker(every)
				defer tk.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tk.C:
					}
					o := f(n)
					mu.Lock()
					res.Obs = append(res.Obs, o)
					mu.Unlock()
				}
			}()
		}
	}
	poll(cfg.ReadyEvery, func(n int) nsObs { return readyObs(hc, cfg.Nodes[n], n) })
	poll(cfg.StatsEvery, func(n int) nsObs { return statsObs(hc, cfg.Nodes[n], n, cfg.Token) })

	res.Start = time.Now().UnixNano()
	fmt.Printf("LOAD-START %d\n", res.Start)
	var seq atomic.Int64
	record := func(r nsRec) {
		mu.Lock()
		res.Recs = append(res.Recs, r)
		mu.Unlock()
	}
	if cfg.Spray {
		load := pace.Start(pace.Config{Workers: cfg.SprayWorkers, MaxRounds: cfg.SprayChecks, Max: cfg.MaxDuration}, func(w, i int) {
			s := seq.Add(1)
			k := int(s % int64(cfg.SprayKeys))
			record(check(hc, &cfg, int(s%int64(len(cfg.Nodes))), 0, k))
		})
		<-load.Done()
	} else {
		per := cfg.HotRate + cfg.ColdKeys // checks per second of one rule
		rate := float64(per * len(cfg.Rules))
		load := pace.Start(pace.Config{Workers: 48, Rate: rate, Max: cfg.Length}, func(w, i int) {
			s := seq.Add(1) - 1
			r := int(s % int64(len(cfg.Rules)))
			slot := s / int64(len(cfg.Rules))
			k := -1
			if j := int(slot % int64(per)); j >= cfg.HotRate {
				k = j - cfg.HotRate
			}
			record(check(hc, &cfg, int(slot%int64(len(cfg.Nodes))), r, k))
		})
		<-load.Done()
	}
	time.Sleep(cfg.ReadyEvery * 3) // a last observation of each node after the load (real processes)
	close(stop)
	pollers.Wait()
	out, err := json.Marshal(&res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Out, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// keyName is key k of a row (-1: the hot key).
func keyName(prefix string, k int) string {
	if k < 0 {
		return prefix + "hot"
	}
	return prefix + "c" + strconv.Itoa(k)
}

func check(hc *http.Client, cfg *nsConfig, n, r, k int) nsRec {
	rec := nsRec{T: time.Now().UnixNano(), D: -1, N: n, R: r, K: k}
	body := `{"rule":"` + cfg.Rules[r] + `","key":"` + keyName(cfg.Prefix, k) + `"}`
	res, err := hc.Post(cfg.Nodes[n]+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return rec
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return rec
	}
	rec.D = time.Since(time.Unix(0, rec.T)).Microseconds()
	rec.S = res.StatusCode
	var d struct{ Allowed, Degraded bool }
	_ = json.Unmarshal(b, &d)
	rec.A, rec.G = d.Allowed, d.Degraded
	return rec
}

func readyObs(hc *http.Client, base string, n int) nsObs {
	o := nsObs{T: time.Now().UnixNano(), N: n}
	res, err := hc.Get(base + "/readyz")
	if err != nil {
		o.Why = err.Error()
		return o
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	o.S = res.StatusCode
	var body struct{ Reason string }
	_ = json.Unmarshal(b, &body)
	o.Why = body.Reason
	return o
}

func statsObs(hc *http.Client, base string, n int, token string) nsObs {
	o := nsObs{T: time.Now().UnixNano(), N: n, Stats: true}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := hc.Do(req)
	if err != nil {
		o.Why = err.Error()
		return o
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	o.S = res.StatusCode
	var body struct {
		Partial bool
		Nodes   []struct {
			Name string
			OK   bool
		}
	}
	_ = json.Unmarshal(b, &body)
	o.Partial = body.Partial
	for _, nd := range body.Nodes {
		if !nd.OK {
			o.Missing = append(o.Missing, nd.Name)
		}
	}
	return o
}

// waitMembers waits until every node lists the three members alive and
// routes by all three.
func waitMembers(t *testing.T, hc *http.Client, cfg *nsConfig) {
	deadline := time.Now().Add(cfg.WaitMembers)
	for {
		ok := true
		for _, base := range cfg.Nodes {
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/members", nil)
			req.Header.Set("Authorization", "Bearer "+cfg.Token)
			res, err := hc.Do(req)
			if err != nil {
				ok = false
				break
			}
			var body struct{ Ring []string }
			_ = json.NewDecoder(res.Body).Decode(&body)
			res.Body.Close()
			if len(body.Ring) != len(cfg.Nodes) {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nodes do not all route by %d members after %s", len(cfg.Nodes), cfg.WaitMembers)
		}
		time.Sleep(100 * time.Millisecond) // polling real processes over the network
	}
}
