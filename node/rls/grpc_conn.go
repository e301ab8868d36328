package rls

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials"
)

// TransportGRPC's connections: the guard as grpc-go's
// TransportCredentials (TLS, if any, then a guardConn), and guardConn,
// which follows the frames the client sends.

func (g *grpcGuard) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn := raw
	var info credentials.AuthInfo = insecureInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	if g.tls != nil {
		var err error
		if conn, info, err = g.tls.ServerHandshake(raw); err != nil {
			g.s.log.Debug("rls: TLS handshake", "remote", raw.RemoteAddr().String(), "err", err)
			return nil, nil, err
		}
	}
	gc := &guardConn{Conn: conn, raw: raw, g: g, preface: len(http2.ClientPreface), window: defaultWindow}
	gc.mu.open = map[uint32]openRequest{}
	gc.touch()
	g.mu.Lock()
	closed := g.mu.closed
	if !closed {
		g.mu.conns[gc] = struct{}{}
	}
	g.mu.Unlock()
	if closed {
		conn.Close()
		return nil, nil, errors.New("rls: the server is closed")
	}
	return gc, guardInfo{AuthInfo: info, conn: gc}, nil
}

func (g *grpcGuard) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("rls: the server's credentials do not dial")
}

func (g *grpcGuard) Info() credentials.ProtocolInfo {
	if g.tls != nil {
		return g.tls.Info()
	}
	return credentials.ProtocolInfo{SecurityProtocol: "insecure"}
}

func (g *grpcGuard) Clone() credentials.TransportCredentials { return g }

func (g *grpcGuard) OverrideServerName(string) error { return nil }

// guardInfo is a connection's AuthInfo: its TLS state (if any), and its
// guardConn, which the tap finds in the stream's peer.
type guardInfo struct {
	credentials.AuthInfo
	conn *guardConn
}

type insecureInfo struct{ credentials.CommonAuthInfo }

func (insecureInfo) AuthType() string { return "insecure" }

// Why a guardConn ends a connection.
var (
	errSettingsFlood = errors.New("rls: too many SETTINGS parameters")
	errPendingFull   = errors.New("rls: the server's budget of unfinished requests is spent")
)

// guardConn is a TransportGRPC connection (after TLS): its reads pass
// through scan, on grpc-go's reader goroutine.
type guardConn struct {
	net.Conn
	raw        net.Conn // the TCP connection, under TLS
	g          *grpcGuard
	calls      atomic.Int32 // calls in flight
	lastActive atomic.Int64 // when a request last arrived whole or a call ended (Unix ns)

	// The scan's.
	preface  int // bytes of the client preface still to pass
	hdr      [9]byte
	nhdr     int  // bytes of hdr read
	left     int  // bytes of the current frame's payload still to pass
	params   bool // the payload is SETTINGS parameters
	param    [6]byte
	nparam   int    // bytes of param read
	window   uint32 // the client's SETTINGS_INITIAL_WINDOW_SIZE
	settings int    // SETTINGS parameters since a request arrived whole
	raises   int    // of which raises of SETTINGS_INITIAL_WINDOW_SIZE

	mu struct { // the scan's, and the guard's timer's, which expires requests
		sync.Mutex
		open    map[uint32]openRequest // requests begun, not ended (END_STREAM, RST_STREAM)
		order   []uint32               // their streams, in the order they began (some ended)
		charged pending
		closed  bool
	}
}

// openRequest is an unfinished request as the scan sees it.
type openRequest struct {
	start  time.Time
	charge int64
}

func (c *guardConn) touch() { c.lastActive.Store(time.Now().UnixNano()) }

// idle reports whether the connection has had no call in flight and no
// request received whole for d (> 0).
func (c *guardConn) idle(d time.Duration) bool {
	return d > 0 && c.calls.Load() == 0 && time.Since(time.Unix(0, c.lastActive.Load())) >= d
}

func (c *guardConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if serr := c.scan(b[:n]); serr != nil {
			c.g.s.log.Debug("rls: connection closed", "remote", c.RemoteAddr().String(), "err", serr)
			c.abort()
			return 0, serr
		}
	}
	return n, err
}

// abort closes the TCP connection at once (a TLS close_notify is a
// write, which a peer that does not read would hold up): grpc-go then
// closes the connection.
func (c *guardConn) abort() {
	c.raw.Close()
}

// Close closes the connection and takes back its charges.
func (c *guardConn) Close() error {
	c.mu.Lock()
	if !c.mu.closed {
		c.mu.closed = true
		c.mu.charged.release(c.g.s.budget, c.mu.charged.held)
		clear(c.mu.open)
		c.mu.order = nil
	}
	c.mu.Unlock()
	c.g.mu.Lock()
	delete(c.g.mu.conns, c)
	c.g.mu.Unlock()
	return c.Conn.Close()
}

// scan follows the frames in b (what grpc-go is about to read): the
// SETTINGS parameters, and the requests that have begun and not ended
// with their charges.
func (c *guardConn) scan(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > 0 {
		if c.preface > 0 {
			k := min(c.preface, len(b))
			c.preface -= k
			b = b[k:]
			continue
		}
		if c.left > 0 {
			k := min(c.left, len(b))
			if c.params {
				if err := c.paramsLocked(b[:k]); err != nil {
					return err
				}
			}
			c.left -= k
			b = b[k:]
			continue
		}
		var full bool
		if b, full = gather(c.hdr[:], &c.nhdr, b); !full {
			return nil
		}
		if err := c.frameLocked(); err != nil {
			return err
		}
	}
	return nil
}

// frameLocked acts on the frame header in hdr.
func (c *guardConn) frameLocked() error {
	h := c.hdr
	c.left = int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	c.params = false
	typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
	id := uint32(h[5]&0x7f)<<24 | uint32(h[6])<<16 | uint32(h[7])<<8 | uint32(h[8])
	end := flags.Has(http2.FlagDataEndStream) // HEADERS' END_STREAM too
	switch typ {
	case http2.FrameSettings:
		if !flags.Has(http2.FlagSettingsAck) {
			c.settings += max(c.left/6, 1)
			if c.settings > maxSettings {
				return errSettingsFlood
			}
			c.params, c.nparam = true, 0
			return nil
		}
	case http2.FrameHeaders:
		if _, ok := c.mu.open[id]; end || ok {
			c.endLocked(id, end)
			return nil
		}
		if !c.chargeLocked(id, grpcStreamCost) {
			return errPendingFull
		}
		c.mu.order = append(c.mu.order, id)
	case http2.FrameData:
		if _, ok := c.mu.open[id]; ok && !end && !c.chargeLocked(id, int64(c.left)) {
			return errPendingFull
		}
		if end {
			c.endLocked(id, true)
		}
	case http2.FrameRSTStream:
		c.endLocked(id, false)
	}
	return nil
}

// paramsLocked follows the bytes of SETTINGS parameters in b: the raises
// of SETTINGS_INITIAL_WINDOW_SIZE.
func (c *guardConn) paramsLocked(b []byte) error {
	for len(b) > 0 {
		var full bool
		if b, full = gather(c.param[:], &c.nparam, b); !full {
			return nil
		}
		p := c.param
		if http2.SettingID(p[0])<<8|http2.SettingID(p[1]) == http2.SettingInitialWindowSize {
			v := uint32(p[2])<<24 | uint32(p[3])<<16 | uint32(p[4])<<8 | uint32(p[5])
			if v > c.window {
				if c.raises++; c.raises > maxWindowRaises {
					return errSettingsFlood
				}
			}
			c.window = v
		}
	}
	return nil
}

// gather copies the start of b to buf past its first *n bytes, and
// returns the rest of b and whether buf is full (*n is then back to 0).
func gather(buf []byte, n *int, b []byte) ([]byte, bool) {
	k := copy(buf[*n:], b)
	*n += k
	if *n < len(buf) {
		return b[k:], false
	}
	*n = 0
	return b[k:], true
}

// chargeLocked charges the request on stream id n more bytes (beginning
// it if it had not); false: the budget cannot take them.
func (c *guardConn) chargeLocked(id uint32, n int64) bool {
	if c.mu.closed || !c.mu.charged.charge(c.g.s.budget, n) {
		return false
	}
	r, ok := c.mu.open[id]
	if !ok {
		r.start = c.g.s.cfg.Now()
	}
	r.charge += n
	c.mu.open[id] = r
	return true
}

// endLocked ends the request on stream id, if it is open: received whole
// (a request: the count of SETTINGS starts over) or reset.
func (c *guardConn) endLocked(id uint32, whole bool) {
	if whole {
		c.settings, c.raises = 0, 0
	}
	if r, ok := c.mu.open[id]; ok {
		delete(c.mu.open, id)
		c.mu.charged.release(c.g.s.budget, r.charge)
	}
	// The order's ended requests leave its front as they come to it.
	for len(c.mu.order) > 0 {
		if _, ok := c.mu.open[c.mu.order[0]]; ok {
			break
		}
		c.mu.order = c.mu.order[1:]
	}
}

// expire takes back the charges of the requests begun before then, which
// grpc-go has reset at their deadline (or never served).
func (c *guardConn) expire(before time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.mu.order) > 0 {
		id := c.mu.order[0]
		r, ok := c.mu.open[id]
		if ok && r.start.After(before) {
			return
		}
		c.mu.order = c.mu.order[1:]
		if ok {
			delete(c.mu.open, id)
			c.mu.charged.release(c.g.s.budget, r.charge)
		}
	}
}
