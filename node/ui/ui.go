// Package ui owns the dashboard's static files (HTML, CSS and plain
// JavaScript in static/, no framework and no build step), embedded in the
// binary, and serves them under /ui/.
//
// The files hold no data: the page first asks the node without a token
// (a node with no admin token admits loopback callers, and the dashboard
// then opens at once); when refused, it asks for the admin token, keeps it
// in the tab's sessionStorage, and sends it as "Authorization: Bearer" to
// the admin endpoints it reads (/v1/rules, /v1/stats, /v1/members,
// /v1/hotkeys) and writes (/v1/rules/{name}). Every file is answered with
// a strict Content-Security-Policy (scripts, styles and connections from
// the node itself only; no inline script; no framing), an ETag, and
// "Cache-Control: no-cache" so that an upgraded node serves its new page.
//
// Assets are immutable after New and safe for concurrent use.
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"path"
	"strings"

	"github.com/valyala/fasthttp"
)

//go:embed static
var static embed.FS

// csp is the Content-Security-Policy of every file.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Assets are the dashboard's files by name ("index.html", "app.js", ...).
type Assets struct {
	files map[string]file
}

// New reads the embedded files once.
func New() *Assets {
	a := &Assets{files: map[string]file{}}
	// The embedded tree is fixed at build time: an error here is a build
	// that cannot happen, and leaves the dashboard empty (404s).
	_ = fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		a.files[strings.TrimPrefix(p, "static/")] = file{
			body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`,
		}
		return nil
	})
	return a
}

// Names returns the files' names, for tests.
func (a *Assets) Names() []string {
	out := make([]string, 0, len(a.files))
	for n := range a.files {
		out = append(out, n)
	}
	return out
}

// Serve answers the file name (relative to /ui/; "" is index.html) and
// reports whether it exists; when it does not, nothing is written.
func (a *Assets) Serve(ctx *fasthttp.RequestCtx, name string) bool {
	if name == "" {
		name = "index.html"
	}
	f, ok := a.files[name]
	if !ok {
		return false
	}
	h := &ctx.Response.Header
	h.Set(fasthttp.HeaderContentSecurityPolicy, csp)
	h.Set(fasthttp.HeaderXContentTypeOptions, "nosniff")
	h.Set(fasthttp.HeaderXFrameOptions, "DENY")
	h.Set(fasthttp.HeaderReferrerPolicy, "no-referrer")
	h.Set(fasthttp.HeaderCacheControl, "no-cache")
	h.Set(fasthttp.HeaderETag, f.etag)
	h.SetContentType(f.contentType)
	if string(ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)) == f.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return true
	}
	if !ctx.IsHead() {
		ctx.SetBody(f.body)
	}
	return true
}
