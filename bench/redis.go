package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// ErrRedisReply means Redis answered something the bench cannot read.
var ErrRedisReply = errors.New("unexpected Redis reply")

// RedisCommandStats returns the calls of every command from Redis's
// INFO commandstats at addr (host:port), e.g. {"evalsha": 1200}.
func RedisCommandStats(ctx context.Context, addr string) (map[string]int64, error) {
	info, err := redisCommand(ctx, addr, "INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	return ParseCommandStats(info)
}

// RedisPing returns nil when Redis at addr answers PING.
func RedisPing(ctx context.Context, addr string) error {
	_, err := redisCommand(ctx, addr, "PING")
	return err
}

// redisCommand sends one command over a fresh connection and returns a
// bulk or simple string reply.
func redisCommand(ctx context.Context, addr string, args ...string) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = c.SetDeadline(deadline)
	var req []byte
	req = fmt.Appendf(req, "*%d\r\n", len(args))
	for _, a := range args {
		req = fmt.Appendf(req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(req); err != nil {
		return nil, fmt.Errorf("cannot send %s to Redis: %w", args[0], err)
	}
	return readRESPString(bufio.NewReader(c))
}

// maxInfoBytes bounds the INFO reply the bench accepts.
const maxInfoBytes = 16 << 20

func readRESPString(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("cannot read Redis reply: %w", err)
	}
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: empty line", ErrRedisReply)
	}
	switch line[0] {
	case '+':
		return append([]byte(nil), line[1:]...), nil
	case '-':
		return nil, fmt.Errorf("%w: %s", ErrRedisReply, line[1:])
	case '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < 0 || n > maxInfoBytes {
			return nil, fmt.Errorf("%w: bulk length %q", ErrRedisReply, line[1:])
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("cannot read Redis reply: %w", err)
		}
		return buf[:n], nil
	}
	return nil, fmt.Errorf("%w: %q", ErrRedisReply, line)
}

// ParseCommandStats parses INFO commandstats: lines such as
// "cmdstat_evalsha:calls=12,usec=80,usec_per_call=6.67,..." (sub-commands
// appear as "cmdstat_client|setname"). Other lines (the "# Commandstats"
// header, blank lines) are ignored; a cmdstat line without a valid calls
// count is an error.
func ParseCommandStats(info []byte) (map[string]int64, error) {
	out := map[string]int64{}
	for len(info) > 0 {
		var line []byte
		line, info, _ = bytes.Cut(info, []byte("\n"))
		line = bytes.TrimRight(line, "\r")
		rest, ok := bytes.CutPrefix(line, []byte("cmdstat_"))
		if !ok {
			continue
		}
		name, fields, ok := bytes.Cut(rest, []byte(":"))
		if !ok || len(name) == 0 {
			return nil, fmt.Errorf("%w: commandstats line %q", ErrRedisReply, line)
		}
		calls := int64(-1)
		for len(fields) > 0 {
			var f []byte
			f, fields, _ = bytes.Cut(fields, []byte(","))
			if v, ok := bytes.CutPrefix(f, []byte("calls=")); ok {
				n, err := strconv.ParseInt(string(v), 10, 64)
				if err != nil || n < 0 {
					return nil, fmt.Errorf("%w: calls %q of %s", ErrRedisReply, v, name)
				}
				calls = n
			}
		}
		if calls < 0 {
			return nil, fmt.Errorf("%w: no calls for %s", ErrRedisReply, name)
		}
		if out[string(name)] > 1<<62-calls {
			return nil, fmt.Errorf("%w: calls of %s overflow", ErrRedisReply, name)
		}
		out[string(name)] += calls
	}
	return out, nil
}

// DiffCommandStats returns after − before per command, leaving out the
// commands the bench itself sends to measure (info, ping) and commands whose
// count did not change.
func DiffCommandStats(before, after map[string]int64) (diff map[string]int64, total int64) {
	diff = map[string]int64{}
	for name, n := range after {
		switch name {
		case "info", "ping":
			continue
		}
		if d := n - before[name]; d > 0 {
			diff[name] = d
			total += d
		}
	}
	return diff, total
}

// scriptCommands are the commands that run a script: one network round
// trip (and one atomic Store operation) each.
var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// ScriptCalls is the number of script invocations in a commandstats diff.
// INFO commandstats also counts the commands a script runs inside Redis
// (a lease script's TIME, HMGET, HSET, PEXPIRE), so the total overstates
// the Store operations the node asked for; script calls are those.
func ScriptCalls(diff map[string]int64) int64 {
	var n int64
	for name, c := range diff {
		if scriptCommands[name] {
			n += c
		}
	}
	return n
}

// ScriptRuns is the number of Sluice scripts run in a commandstats diff:
// each reads the clock once with TIME, so a batched script call that runs
// the scripts of several Store calls counts each, where ScriptCalls
// counts it once. The node also sends TIME on its own (own: a first
// touch's, with its SET NX, and its clock samples; see the lua package),
// which are not scripts.
func ScriptRuns(diff map[string]int64, own int64) int64 { return max(0, diff["time"]-own) }

// runsPerDec is r's ScriptRuns per decision.
func runsPerDec(r *RunResult) float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(ScriptRuns(r.RedisCalls, r.FirstTouches+r.ClockSamples)) / float64(r.Decisions)
}

// firstTouchesPerDec is r's first touches (SET NX tries) per decision.
func firstTouchesPerDec(r *RunResult) float64 {
	if r.Decisions == 0 {
		return 0
	}
	return float64(r.FirstTouches) / float64(r.Decisions)
}

// nodeFirstTouches reads the node's first-touch counters from its
// /metrics (the lua package's sluice_redis_first_touches_total and
// sluice_redis_clock_samples_total): SET NX tries (wrote and had_state)
// and TIME commands sent on their own.
func nodeFirstTouches(addr string) (tries, samples int64, err error) {
	status, body, err := fasthttp.GetTimeout(nil, "http://"+addr+"/metrics", 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	if status != fasthttp.StatusOK {
		return 0, 0, fmt.Errorf("GET /metrics: status %d", status)
	}
	for _, line := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch name {
		case `sluice_redis_first_touches_total{result="wrote"}`, `sluice_redis_first_touches_total{result="had_state"}`:
			tries += int64(n)
		case `sluice_redis_clock_samples_total`:
			samples += int64(n)
		}
	}
	return tries, samples, nil
}
