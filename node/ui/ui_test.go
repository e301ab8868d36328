package ui_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/ui"
)

func serve(a *ui.Assets, name, ifNoneMatch string) (*fasthttp.RequestCtx, bool) {
	ctx := &fasthttp.RequestCtx{}
	ctx.Request.Header.SetMethod("GET")
	if ifNoneMatch != "" {
		ctx.Request.Header.Set("If-None-Match", ifNoneMatch)
	}
	ok := a.Serve(ctx, name)
	return ctx, ok
}

func TestServe(t *testing.T) {
	a := ui.New()
	names := a.Names()
	slices.Sort(names)
	if want := []string{"app.js", "index.html", "style.css"}; !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	for _, c := range []struct{ name, ctype string }{
		{"", "text/html"}, {"index.html", "text/html"}, {"app.js", "javascript"}, {"style.css", "text/css"},
	} {
		ctx, ok := serve(a, c.name, "")
		h := &ctx.Response.Header
		if !ok || ctx.Response.StatusCode() != 200 || len(ctx.Response.Body()) == 0 ||
			!strings.Contains(string(h.ContentType()), c.ctype) {
			t.Errorf("%q: ok %v status %d type %q", c.name, ok, ctx.Response.StatusCode(), h.ContentType())
		}
		for _, k := range []string{"Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options", "ETag", "Cache-Control"} {
			if len(h.Peek(k)) == 0 {
				t.Errorf("%q: no %s", c.name, k)
			}
		}
		etag := string(h.Peek("ETag"))
		if ctx, _ := serve(a, c.name, etag); ctx.Response.StatusCode() != 304 || len(ctx.Response.Body()) != 0 {
			t.Errorf("%q with If-None-Match %s: %d, want 304 without a body", c.name, etag, ctx.Response.StatusCode())
		}
	}
	for _, name := range []string{"nope.js", "static/app.js", "../ui.go", "/app.js"} {
		if ctx, ok := serve(a, name, ""); ok || len(ctx.Response.Body()) != 0 {
			t.Errorf("%q: served, want not found", name)
		}
	}
}

// TestNoInlineCode: the Content-Security-Policy allows scripts and styles
// from files only, so the page must have no inline script, style
// attribute or event handler attribute (the browser would refuse them and
// log an error).
func TestNoInlineCode(t *testing.T) {
	ctx, _ := serve(ui.New(), "index.html", "")
	html := string(ctx.Response.Body())
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`),             // a script with content
		regexp.MustCompile(`<script(?:(?:\s(?:defer|type="[^"]*"))*)>`), // a script without src
		regexp.MustCompile(`\sstyle=`),
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`javascript:`),
	} {
		if m := re.FindString(html); m != "" {
			t.Errorf("index.html has inline code: %q", m)
		}
	}
	js, _ := serve(ui.New(), "app.js", "")
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "new Function", "setAttribute('style'", "localStorage.setItem", "document.cookie"} {
		if strings.Contains(string(js.Response.Body()), bad) {
			t.Errorf("app.js uses %s (the CSP or the token's storage forbids it)", bad)
		}
	}
}

// TestChildrenThroughHelpers: app.js replaces an element's children only
// through fill(), which leaves out null, undefined and false as el() does:
// replaceChildren itself prints them as text, and a conditional part
// (s.upstream ? … : null) printed "nullnull" on every node without
// -upstream. The browser tests read every card's rendered text for it
// (TestE2EDashboard*, noStrayWords).
func TestChildrenThroughHelpers(t *testing.T) {
	js, _ := serve(ui.New(), "app.js", "")
	src := string(js.Response.Body())
	def := regexp.MustCompile(`(?s)function fill\(box, \.\.\.kids\) \{\n\s*box\.replaceChildren\(\.\.\.kids\.flat\(\)\.filter\(\(k\) => k !== null && k !== undefined && k !== false\)\);\n\s*\}`)
	if !def.MatchString(src) {
		t.Fatal("app.js has no fill(box, ...kids) that leaves out null, undefined and false")
	}
	if n := strings.Count(src, ".replaceChildren("); n != 1 {
		for i, line := range strings.Split(src, "\n") {
			if strings.Contains(line, ".replaceChildren(") && !strings.Contains(line, "box.replaceChildren(...kids.flat()") {
				t.Errorf("app.js:%d calls replaceChildren directly (use fill): %s", i+1, strings.TrimSpace(line))
			}
		}
	}
}
