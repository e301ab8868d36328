package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// EnvServer names the environment variable that chooses the server the
// helpers start: "redis" (or unset) for redis-server and redis-cli,
// "valkey" for valkey-server and valkey-cli (Valkey 8, the Redis fork
// many clouds now run). Every helper (the frozen clock, Cluster,
// replicas, Sentinel) starts the chosen one; make test runs the packages
// that use this one twice, once on each.
const EnvServer = "SLUICE_TEST_REDIS"

// Flavor is a Redis-compatible server the helpers can start.
type Flavor struct {
	// Name is EnvServer's value for it: "redis" or "valkey".
	Name string
	// Server and CLI are its binaries, looked up on PATH; Server also
	// runs a Sentinel (with --sentinel).
	Server, CLI string
	// Install says how to install it on Debian.
	Install string
}

var flavors = []Flavor{
	{Name: "redis", Server: "redis-server", CLI: "redis-cli",
		Install: "apt-get install redis-server"},
	{Name: "valkey", Server: "valkey-server", CLI: "valkey-cli",
		Install: "Debian 12: apt-get install -t bookworm-backports valkey-server; make deps adds bookworm-backports to apt's sources"},
}

// CurrentFlavor is the server EnvServer chooses.
func CurrentFlavor() (Flavor, error) {
	v := os.Getenv(EnvServer)
	if v == "" {
		return flavors[0], nil
	}
	for _, f := range flavors {
		if f.Name == v {
			return f, nil
		}
	}
	return Flavor{}, fmt.Errorf("%s=%q: want redis or valkey", EnvServer, v)
}

// flavor is CurrentFlavor, failing the test on a bad EnvServer.
func flavor(t testing.TB) Flavor {
	t.Helper()
	f, err := CurrentFlavor()
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return f
}

// requireRedis fails the test unless the chosen server's binaries are on
// PATH (skips it with SLUICE_SKIP_REDIS=1), and returns the flavor.
func requireRedis(t testing.TB) Flavor {
	t.Helper()
	f := flavor(t)
	for _, bin := range []string{f.Server, f.CLI} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("SLUICE_SKIP_REDIS") == "1" {
				t.Skipf("redistest: %s not found and SLUICE_SKIP_REDIS=1", bin)
			}
			t.Fatalf("redistest: %s not found: install it (%s), or set SLUICE_SKIP_REDIS=1 to skip", bin, f.Install)
		}
	}
	return f
}

// Version is the name and version of the server at addr as its INFO
// server reports them: "redis 7.0.15", "valkey 8.0.1" (a Sentinel too).
func Version(addr string) (string, error) {
	info, err := Command(addr, "INFO", "server")
	if err != nil {
		return "", err
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	// Valkey reports redis_version too (the Redis release it is
	// compatible with), and its own in valkey_version.
	if v, ok := fields["valkey_version"]; ok {
		return "valkey " + v, nil
	}
	if v, ok := fields["redis_version"]; ok {
		return "redis " + v, nil
	}
	return "", fmt.Errorf("INFO server of %s names no version", addr)
}
