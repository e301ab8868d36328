package node

import (
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

// reqState is the per-request scratch space of the HTTP front ends,
// pooled so that the hot path allocates nothing after warm-up.
type reqState struct {
	n *Node
	// check and batch are decoded with api.DecodeCheckView and
	// DecodeChecksView: their strings are views of the request body (or of
	// unesc) and die with the request. Copy any that must be kept.
	check   api.CheckRequest
	batch   api.ChecksRequest
	unesc   []byte // the decoders' scratch for escaped strings
	acquire api.AcquireRequest
	release api.ReleaseRequest
	b       engine.Batch // the request's items, for the engine
	matches []rules.Match
	results []api.CheckResult
	reqOf   []int32 // per check of a batch: its request in b, -1 if none
	buf     []byte  // the response body
	scratch []byte  // header values
	ticks   uint32  // checks served with this state, for startTimer
	// lease, lops, lres and lout are a lease request's (Node.lease):
	// its decoded body, the engine's ops and results, the answers.
	lease api.LeaseRequest
	lops  []engine.LeaseOp
	lres  []engine.LeaseResult
	lout  []api.LeaseResult
}

func (n *Node) getState() *reqState { return n.states.Get().(*reqState) }

func (n *Node) putState(st *reqState) {
	st.b.Reset()
	clear(st.matches)
	st.matches = st.matches[:0]
	clear(st.results)
	st.results = st.results[:0]
	// A lease request's strings and results are not kept past it.
	clear(st.lops)
	clear(st.lres)
	clear(st.lease.Ops)
	st.lops, st.lres, st.lease.Ops = st.lops[:0], st.lres[:0], st.lease.Ops[:0]
	n.states.Put(st)
}
