package rls

import (
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TransportLean's header blocks: decoding them (HPACK, with bounds) and
// checking them as RFC 9113 8.1-8.3 and gRPC say.

// headerState is what the reader keeps of the header block being decoded.
type headerState struct {
	size        int  // decoded size, as RFC 9113 counts it
	trailers    bool // the block ends a stream's request (no pseudo-headers)
	sawRegular  bool
	malformed   bool
	tooLarge    bool
	method      string
	scheme      string
	path        string
	contentType string
	// contentLength is the content-length header's, -1 without one.
	contentLength int64
	pseudo        uint8 // the pseudo-headers seen, a bit each
}

// onHeaderBlock decodes a fragment of the header block of c.hdrID.
func (c *leanConn) onHeaderBlock(frag []byte, end bool) error {
	c.hdrBytes += len(frag)
	c.hdrFrames++
	if c.hdrBytes > 2*leanMaxHeaderList || c.hdrFrames > leanMaxHeaderFrames {
		return connError{http2.ErrCodeEnhanceYourCalm, "header block too large"}
	}
	if _, err := c.dec.Write(frag); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return connError{http2.ErrCodeCompression, err.Error()}
	}
	return c.onHeaders()
}

// Pseudo-headers, a bit each in headerState.pseudo.
const (
	pseudoMethod = 1 << iota
	pseudoScheme
	pseudoPath
	pseudoAuthority
)

// onField takes a decoded header field (hpack.Decoder's emit function).
func (c *leanConn) onField(f hpack.HeaderField) {
	h := &c.hs
	h.size += int(f.Size())
	if h.size > leanMaxHeaderList {
		h.tooLarge = true
	}
	if h.malformed || h.tooLarge {
		return // decoded all the same: the table must follow the peer's
	}
	if f.IsPseudo() {
		var bit uint8
		switch f.Name {
		case ":method":
			bit, h.method = pseudoMethod, f.Value
		case ":scheme":
			bit, h.scheme = pseudoScheme, f.Value
		case ":path":
			bit, h.path = pseudoPath, f.Value
		case ":authority":
			bit = pseudoAuthority
		}
		if bit == 0 || h.trailers || h.sawRegular || h.pseudo&bit != 0 || !httpguts.ValidHeaderFieldValue(f.Value) {
			h.malformed = true
		}
		h.pseudo |= bit
		return
	}
	h.sawRegular = true
	if !validFieldName(f.Name) || !httpguts.ValidHeaderFieldValue(f.Value) {
		h.malformed = true
		return
	}
	switch f.Name {
	case "content-type":
		h.contentType = f.Value
	case "te":
		h.malformed = f.Value != "trailers"
	case "content-length":
		n, err := strconv.ParseInt(f.Value, 10, 64)
		if err != nil || n < 0 || (h.contentLength >= 0 && n != h.contentLength) {
			h.malformed = true
		}
		h.contentLength = n
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		h.malformed = true // connection-specific (RFC 9113 8.2.2)
	}
}

// validFieldName reports whether name is a lower-case token.
func validFieldName(name string) bool {
	for i := 0; i < len(name); i++ {
		if b := name[i]; 'A' <= b && b <= 'Z' {
			return false
		}
	}
	return httpguts.ValidHeaderFieldName(name)
}

// grpcContentType reports whether ct is application/grpc, with the proto
// subtype or none, and parameters or none.
func grpcContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	if !ok {
		return false
	}
	rest = strings.TrimPrefix(rest, "+proto")
	return rest == "" || rest[0] == ';'
}
