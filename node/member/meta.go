package member

import (
	"errors"
	"fmt"
)

// ErrMeta means a member's node meta could not be decoded.
var ErrMeta = errors.New("invalid node meta")

// Node meta layout, version 1:
//
//	byte 0     version (1)
//	byte 1     flags: bit 0 = leaving (set just before a graceful leave)
//	byte 2     n, length of the HTTP address
//	bytes 3..  the HTTP address, n bytes
//
// Later versions may only append fields after these and define new flag
// bits, so a reader of version v decodes what it knows from any meta of
// version ≥ v. The whole meta stays far below memberlist.MetaMaxSize (512
// bytes).
const (
	metaVersion  = 1
	metaLeaving  = 1 << 0
	metaHeader   = 3
	maxHTTPAddr  = 255
	metaMaxBytes = metaHeader + maxHTTPAddr
)

// meta is the decoded node meta.
type meta struct {
	httpAddr string
	leaving  bool
}

// encodeMeta encodes m; m.httpAddr must be at most maxHTTPAddr bytes
// (Config validation checks it).
func encodeMeta(m meta) []byte {
	var flags byte
	if m.leaving {
		flags |= metaLeaving
	}
	b := make([]byte, 0, metaHeader+len(m.httpAddr))
	b = append(b, metaVersion, flags, byte(len(m.httpAddr)))
	return append(b, m.httpAddr...)
}

// decodeMeta decodes a node meta. Empty meta (a node that carries none)
// decodes to the zero meta.
func decodeMeta(b []byte) (meta, error) {
	if len(b) == 0 {
		return meta{}, nil
	}
	if b[0] < metaVersion {
		return meta{}, fmt.Errorf("%w: version %d", ErrMeta, b[0])
	}
	if len(b) < metaHeader {
		return meta{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMeta, len(b), metaHeader)
	}
	n := int(b[2])
	if len(b) < metaHeader+n {
		return meta{}, fmt.Errorf("%w: HTTP address of %d bytes, only %d present", ErrMeta, n, len(b)-metaHeader)
	}
	return meta{httpAddr: string(b[metaHeader : metaHeader+n]), leaving: b[1]&metaLeaving != 0}, nil
}

// delegate is the Cluster seen as a memberlist.Delegate: the node meta
// here, user messages in broadcast.go.
type delegate Cluster

func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.meta.Load()
	if len(b) > limit {
		return nil // cannot happen: meta ≤ metaMaxBytes < memberlist.MetaMaxSize
	}
	return b
}

func (d *delegate) LocalState(bool) []byte                 { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

func (c *Cluster) setMeta(m meta) {
	b := encodeMeta(m)
	c.meta.Store(&b)
}
