package rules

import "bytes"

// Request paths and query strings as fasthttp reads them (its URI.Path
// and Args.Peek, on Unix), written here so that this package, which the
// engine and the gRPC front end import, links no HTTP server. A test
// checks that both give what fasthttp gives.

// appendNormalPath appends to dst the normalized form of the request path
// src: a leading '/' added, %XX decoded ('+' kept), repeated slashes
// merged, "/./" removed and "/x/../" resolved (a trailing "/x/.." too).
func appendNormalPath(dst, src []byte) []byte {
	start := len(dst)
	if len(src) == 0 || src[0] != '/' {
		dst = append(dst, '/')
	}
	dst = appendUnescaped(dst, src, false)
	b := dst[start:]

	// Repeated slashes.
	for {
		n := bytes.Index(b, []byte("//"))
		if n < 0 {
			break
		}
		b = append(b[:n], b[n+1:]...)
	}
	if bytes.IndexByte(b, '.') < 0 {
		return dst[:start+len(b)]
	}
	// "/./" parts.
	for {
		n := bytes.Index(b, []byte("/./"))
		if n < 0 {
			break
		}
		b = append(b[:n], b[n+2:]...)
	}
	// "/x/../" parts.
	for {
		n := bytes.Index(b, []byte("/../"))
		if n < 0 {
			break
		}
		nn := max(bytes.LastIndexByte(b[:n], '/'), 0)
		b = append(b[:nn], b[n+3:]...)
	}
	// A trailing "/x/..".
	if n := bytes.LastIndex(b, []byte("/..")); n >= 0 && n+3 == len(b) {
		nn := bytes.LastIndexByte(b[:n], '/')
		if nn < 0 {
			return append(dst[:start], '/')
		}
		b = b[:nn+1]
	}
	return dst[:start+len(b)]
}

// queryArg appends to dst the value of the first argument named name in
// the query string q (without '?': "a=1&b=2"; names and values
// %XX-decoded, '+' as a space) and returns it as the tail of the result,
// nil when q has no such argument.
func queryArg(dst, q []byte, name string) (out, value []byte) {
	for len(q) > 0 {
		var kv []byte
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			kv, q = q[:i], q[i+1:]
		} else {
			kv, q = q, nil
		}
		k, v, _ := bytes.Cut(kv, []byte("="))
		start := len(dst)
		dst = appendUnescaped(dst, k, true)
		if string(dst[start:]) != name || len(kv) == 0 {
			dst = dst[:start]
			continue
		}
		dst = appendUnescaped(dst[:start], v, true)
		return dst, dst[start:]
	}
	return dst, nil
}

// appendUnescaped appends src to dst with %XX decoded (a '%' not
// followed by two hex digits is kept) and, if plus, '+' as a space.
func appendUnescaped(dst, src []byte, plus bool) []byte {
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '%':
			if i+3 > len(src) {
				return append(dst, src[i:]...)
			}
			x1, ok1 := unhex(src[i+1])
			x2, ok2 := unhex(src[i+2])
			if !ok1 || !ok2 {
				dst = append(dst, '%')
				continue
			}
			dst = append(dst, x1<<4|x2)
			i += 2
		case c == '+' && plus:
			dst = append(dst, ' ')
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
