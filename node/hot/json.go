package hot

import (
	"math"
	"strconv"

	"github.com/sluicehq/sluice/node/api"
)

// AppendJSON appends the body of GET /v1/hotkeys to dst:
//
//	{"self":"n1","node_rate":1234.5,
//	 "top":[{"key":"r:k","count":9000,"err":0,"rate":3000.0,"split":true,"holders":["n1","n2"]}],
//	 "splits":[{"key":"r:k","holders":["n1","n2"],"epoch":1767225600000000000,"owner":"n1"}]}
//
// top lists the keys of this node's sketch, heaviest first, with their
// rates (checks/s this node served) and split state; splits lists the
// cluster's splits as this node knows them, ordered by key; owner is the
// member that announced the split (its first holder).
func (h *Hot) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"self":`...)
	dst = api.AppendString(dst, h.cfg.Self)
	dst = append(dst, `,"node_rate":`...)
	dst = appendFloat(dst, h.Stats().NodeRate)
	dst = append(dst, `,"top":[`...)
	for i, e := range h.sketch.Top(nil) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":`...)
		dst = api.AppendString(dst, e.Key)
		dst = append(dst, `,"count":`...)
		dst = strconv.AppendUint(dst, e.Count, 10)
		dst = append(dst, `,"err":`...)
		dst = strconv.AppendUint(dst, e.Err, 10)
		dst = append(dst, `,"rate":`...)
		dst = appendFloat(dst, e.Rate)
		p, split := h.table.Lookup(e.Key)
		dst = append(dst, `,"split":`...)
		dst = strconv.AppendBool(dst, split)
		dst = append(dst, `,"holders":`...)
		dst = appendHolders(dst, p.Holders)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"splits":[`...)
	for i, p := range h.table.Plans(nil) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"key":`...)
		dst = api.AppendString(dst, p.Key)
		dst = append(dst, `,"holders":`...)
		dst = appendHolders(dst, p.Holders)
		dst = append(dst, `,"epoch":`...)
		dst = strconv.AppendUint(dst, p.Epoch, 10)
		dst = append(dst, `,"owner":`...)
		dst = api.AppendString(dst, p.Holders[0]) // a split has holders
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

func appendHolders(dst []byte, holders []string) []byte {
	dst = append(dst, '[')
	for i, m := range holders {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = api.AppendString(dst, m)
	}
	return append(dst, ']')
}

// appendFloat appends f with one decimal; JSON has no NaN or infinities.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.AppendFloat(dst, f, 'f', 1, 64)
}
