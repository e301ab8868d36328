package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// TestReadyzHidesReloadError: /readyz is public, so its body shows states
// and counts only: a failed reload's error, which names the rule file and
// rules, is shown to admin callers alone.
func TestReadyzHidesReloadError(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close() })
	n := New(Config{AdminToken: "s3cret-admin-token"}, mgr)
	n.SetRules(mustParse(t, testRules))
	n.SetRulesError(errors.New(`/etc/sluice/private-rules.yaml: rule "billing-internal": limit: must be > 0`))
	get := func(auth string) string {
		ctx := newCtx("GET", "/readyz", "", "203.0.113.9")
		if auth != "" {
			ctx.Request.Header.Set("Authorization", auth)
		}
		n.handle(ctx)
		if ctx.Response.StatusCode() != 200 {
			t.Fatalf("readyz: %d %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
		return string(ctx.Response.Body())
	}
	public := get("")
	for _, secret := range []string{"/etc/sluice", "private-rules", "billing-internal"} {
		if strings.Contains(public, secret) {
			t.Errorf("public /readyz shows %q: %s", secret, public)
		}
	}
	if !strings.Contains(public, `"last_reload_error"`) || !strings.Contains(public, `"rules":8`) {
		t.Errorf("public /readyz %s, want the rule count and that the reload failed", public)
	}
	if admin := get("Bearer s3cret-admin-token"); !strings.Contains(admin, "billing-internal") {
		t.Errorf("admin /readyz %s, want the reload error", admin)
	}
}
