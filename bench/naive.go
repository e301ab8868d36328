package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// NaiveConfig configures the naive counter: the baseline Redis design that
// leases exist to beat.
type NaiveConfig struct {
	// Addr is Redis's host:port.
	Addr string
	// Keys is the key table (KeyConfig.KeyNames()).
	Keys [][]byte
	// Limit is the rule: Limit hits per Period, fixed windows aligned on
	// multiples of Period since the Unix epoch (Burst is not used).
	Limit Limit
	// Hits per check; 0 means 1.
	Hits int64
	// Timeout bounds one request; 0 means 2s.
	Timeout time.Duration
	// Now is the clock that picks the window; nil means time.Now.
	Now func() time.Time
}

// naiveDriver is the counter of envoyproxy/ratelimit's Redis backend: for
// every check one pipelined INCRBY of the window's key and EXPIRE of it,
// no script and no state in the limiter. A check is allowed when the count
// after it is at most the limit. A batch sends every check of the batch in
// one pipeline.
type naiveDriver struct {
	cfg    NaiveConfig
	client rueidis.Client
	expire int64 // seconds, as EXPIRE takes them
}

// NewNaiveDriver connects to Redis.
func NewNaiveDriver(cfg NaiveConfig) (Driver, error) {
	if cfg.Addr == "" {
		return nil, errors.New("naive: addr: required")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("naive: keys: required")
	}
	if cfg.Limit.Limit <= 0 || cfg.Limit.Period < time.Millisecond {
		return nil, fmt.Errorf("naive: limit: %w", ErrBadLimit)
	}
	if cfg.Hits == 0 {
		cfg.Hits = 1
	}
	if cfg.Hits < 0 {
		return nil, errors.New("naive: hits: must be ≥ 0")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
	if err != nil {
		return nil, fmt.Errorf("naive: cannot connect to Redis at %s: %w", cfg.Addr, err)
	}
	// The key lives as long as its window, rounded up to whole seconds.
	exp := int64((cfg.Limit.Period + time.Second - 1) / time.Second)
	return &naiveDriver{cfg: cfg, client: c, expire: exp}, nil
}

func (d *naiveDriver) Name() string { return "naive-incr" }

func (d *naiveDriver) Close() error {
	d.client.Close()
	return nil
}

func (d *naiveDriver) NewSession() (Session, error) {
	return &naiveSession{d: d}, nil
}

type naiveSession struct {
	d    *naiveDriver
	cmds rueidis.Commands
	key  []byte
}

// NaiveKey is the Redis key of a counter key's window starting at
// windowMs (unix ms): "naive:<key>:<window start>".
func NaiveKey(dst []byte, key []byte, windowMs int64) []byte {
	dst = append(dst, "naive:"...)
	dst = append(dst, key...)
	dst = append(dst, ':')
	return strconv.AppendInt(dst, windowMs, 10)
}

func (s *naiveSession) Do(keys []int32, out []Outcome) error {
	d := s.d
	period := d.cfg.Limit.Period.Milliseconds()
	now := d.cfg.Now().UnixMilli()
	window := now - now%period
	s.cmds = s.cmds[:0]
	for _, k := range keys {
		s.key = NaiveKey(s.key[:0], d.cfg.Keys[k], window)
		key := string(s.key)
		s.cmds = append(s.cmds, d.client.B().Incrby().Key(key).Increment(d.cfg.Hits).Build(),
			d.client.B().Expire().Key(key).Seconds(d.expire).Build())
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.Timeout)
	defer cancel()
	res := d.client.DoMulti(ctx, s.cmds...)
	for i := range keys {
		n, err := res[2*i].AsInt64()
		if err == nil {
			err = res[2*i+1].Error()
		}
		if err != nil {
			for j := range out {
				out[j] = Failed
			}
			return fmt.Errorf("naive: %w", err)
		}
		if n <= d.cfg.Limit.Limit {
			out[i] = Allowed
		} else {
			out[i] = Denied
		}
	}
	return nil
}
