// Package bench is Sluice's load generator: workloads (open-loop constant
// arrival rate and closed-loop maximum throughput; keys uniform, Zipf or one
// hot key), drivers (HTTP single checks, pipelined checks, /v1/checks
// batches, forward-auth, a raw HTTP driver for any other limiter, the
// in-process lease.Manager, and a gateway deciding in process with
// node/client's Limiter), and the measurements the standard suite reports:
// throughput, latency percentiles from a log-linear histogram, accuracy
// (over- and under-admission per key against what the rule allows), Redis
// commands per decision and CPU seconds of every process involved. Reports
// are a Markdown table, hand-written SVG charts and one JSON file per run.
//
// # Coordinated omission
//
// An open-loop run schedules request i at start + i/rate, fixed before the
// run begins, and measures each latency from that intended send time, not
// from when a worker got round to sending it. A server that stalls therefore
// shows its stall in every request scheduled during it, as a user would see
// it. Closed-loop runs measure from the actual send time and report the
// maximum throughput, never latency under a given load.
//
// # The standard suite
//
// RunSuite (sluice-bench suite, make bench) builds nothing itself; given a
// sluiced binary it writes a rule file (token_bucket "bench", 100/s, burst
// 100, and "bench-big", a limit no workload reaches), then:
//
//  1. starts a node on the in-memory store and records its answer to each
//     request shape; starts the ceiling (sluice-bench ceiling: a bare
//     fasthttp server replaying those answers, its own process);
//  2. for single, pipelined, batch-of-100 and forward-auth checks, runs a
//     closed loop on the node and then on the ceiling (single and batch:
//     node, ceiling, ceiling, node), Zipf(1.0) over 10,000 keys;
//  3. runs batches of 100 on "bench-big" (every check from leased tokens);
//     then a gateway (client.Limiter in the suite's process, leasing from
//     the node with its client token) on "bench-big" and on "bench", Zipf
//     over 10,000 keys, charging the node's CPU to the gateway's decisions;
//  4. sweeps open-loop single checks at 10%–150% of the closed-loop peak;
//  5. starts redis-server (free loopback port, no persistence) and a node
//     on it, and measures single checks, batches over 1M Zipf keys and one
//     hot key with INFO commandstats before and after (skipped with a note
//     while sluiced refuses -redis);
//  6. drives lease.Manager in process on the MemoryStore.
//
// Each run lasts SuiteConfig.Phase (8s) plus at most a few seconds of
// grace; every process started is stopped (and gets SIGKILL if the suite
// dies). Every key of a run carries a fresh prefix, so buckets start full
// and the accuracy bound holds. The report goes to
// bench/results/<UTC date>/: report.md, run.json and the charts.
//
// # A gateway against the plain client
//
// RunCompare (sluice-bench gateway) starts a node on the memory store and
// one on Redis (each with a fresh redis-server), and runs Compare against
// each: a node/client Limiter against node/client's Client.Check on the
// same node, every phase with keys of its own: first touches (keys each
// side never saw, one after another, alternately, each timed), a cold Zipf
// stream (a fresh Limiter, then the Client, on the same draws), the
// warm-up of a fresh Limiter over fewer keys (100ms windows, warm once at
// most 1% of a window's checks wait for a lease call) and its leased
// phases (one key; every key). The node's CPU is charged to each phase.
//
// # Concurrency
//
// The pure parts (Histogram, Schedule, KeySampler, Accuracy, Chart) are not
// safe for concurrent use unless their comment says so; the Runner gives
// every worker goroutine its own Histogram and Session and merges them once
// the workers have stopped. A Driver is safe for concurrent use; a Session is
// owned by one worker. Tally is safe for concurrent use (atomic counters).
package bench
