package main

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/member"
)

// TestDaemonClusterCleanStop stops a healthy three-node cluster the way an
// orchestrator does, SIGTERM to every node at once: each leaves, exits 0
// and logs no ERROR (every leave was a clean one).
func TestDaemonClusterCleanStop(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildSluiced(t)
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesPath, rulesV2)
	const key = "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	common := []string{"-listen", "127.0.0.1:0", "-rules", rulesPath, "-gossip", "127.0.0.1:0", "-cluster-key", key}
	a := startDaemon(t, bin, true, append(common, "-node-name", "a")...)
	b := startDaemon(t, bin, true, append(common, "-node-name", "b", "-join", a.gossip)...)
	c := startDaemon(t, bin, true, append(common, "-node-name", "c", "-join", a.gossip)...)
	nodes := []*daemonProc{a, b, c}

	for _, p := range nodes {
		adm, err := client.NewAdmin(client.AdminConfig{Addr: p.http})
		if err != nil {
			t.Fatal(err)
		}
		clocktest.Eventually(t, 30*time.Second, p.http+" to see three alive members", func() bool {
			m, err := adm.Members(t.Context())
			if err != nil {
				return false
			}
			alive := 0
			for _, mb := range m.Members {
				if mb.State == member.StateAlive {
					alive++
				}
			}
			return alive == 3
		})
	}

	var wg sync.WaitGroup
	for _, p := range nodes {
		wg.Go(p.term)
	}
	wg.Wait()
	for i, p := range nodes {
		l := p.log()
		if strings.Contains(l, "level=ERROR") {
			t.Errorf("node %c logged an ERROR on a clean stop:\n%s", 'a'+i, l)
		}
		if !strings.Contains(l, "msg=stopped") {
			t.Errorf("node %c's log lacks the stop message:\n%s", 'a'+i, l)
		}
	}
}
