package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRedisCredentialsNotEchoed runs sluiced with Redis URLs that carry a
// password (in the user part, in ?password= or ?sentinel_password=, with one
// or several addresses), unreachable or malformed: the node refuses to start
// and its output names -redis but never shows the password.
func TestRedisCredentialsNotEchoed(t *testing.T) {
	const pw = "SuperSecretRedisPw"
	for _, u := range []string{
		"redis://default:" + pw + "@127.0.0.1:1",       // nothing listens on port 1
		"redis://default:" + pw + "@127.0.0.1:99999",   // bad port
		"redis://default:" + pw + "@127.0.0.1:1?x=1",   // unknown option
		"redis://127.0.0.1:1?password=" + pw,           // password as an option
		"redis://127.0.0.1:1?x=" + pw,                  // unknown option's value
		"redis://u:" + pw + "@127.0.0.1:1,127.0.0.1:2", // Cluster seeds
		"redis://u:" + pw + "@127.0.0.1:1,127.0.0.1:2/3",
		"sentinel://m@127.0.0.1:1?password=" + pw + "&sentinel_password=" + pw,
		"sentinel://m:" + pw + "@127.0.0.1:1",
		"rediss://u:" + pw + "@127.0.0.1:1",
		"u:" + pw + "@127.0.0.1:1",
		"redis://u:" + pw + "%zz@127.0.0.1:1",
		"redis://127.0.0.1:1?password=" + pw + "%zz",
	} {
		for _, via := range []string{"flag", "env"} {
			var out bytes.Buffer
			args := []string{"-listen", "127.0.0.1:0", "-log-level", "debug"}
			var e map[string]string
			if via == "flag" {
				args = append(args, "-redis", u)
			} else {
				e = map[string]string{"SLUICE_REDIS": u}
			}
			code := run(args, env(e), &out)
			if code != 1 || !strings.Contains(out.String(), "Redis") && !strings.Contains(out.String(), "redis") {
				t.Errorf("%s %q: exit %d, output %q; want 1 naming Redis", via, u, code, out.String())
			}
			if strings.Contains(out.String(), pw) {
				t.Errorf("%s %q: the output shows the password: %s", via, u, out.String())
			}
		}
	}
}
