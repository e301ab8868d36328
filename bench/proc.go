package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports (the kernel ABI fixes
// it; sysconf(_SC_CLK_TCK) would need cgo).
const clockTicks = 100

// ErrProcStat means a /proc/<pid>/stat line could not be read.
var ErrProcStat = errors.New("cannot parse /proc/<pid>/stat")

// ProcCPU returns the user+system CPU seconds the process pid has used.
func ProcCPU(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cannot read CPU time of pid %d: %w", pid, err)
	}
	return ParseProcStat(b)
}

// ParseProcStat reads utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself, so fields are counted from the
// last ')'.
func ParseProcStat(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", ErrProcStat)
	}
	fields := bytes.Fields(b[i+1:])
	// fields[0] is field 3 (state); utime is field 14 → index 11.
	if len(fields) < 13 {
		return 0, fmt.Errorf("%w: %d fields after the command name, want ≥ 13", ErrProcStat, len(fields))
	}
	ut, err1 := strconv.ParseUint(string(fields[11]), 10, 64)
	st, err2 := strconv.ParseUint(string(fields[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: utime %q stime %q", ErrProcStat, fields[11], fields[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// MachineCPU returns the CPU seconds all processors have spent busy in
// processes (user, nice, system) or stolen by the hypervisor (steal) since
// boot, from /proc/stat. Interrupt and softirq time is left out: much of it
// is the loopback traffic of the run itself. The suite subtracts its own
// processes from the difference over a run to show the load that came from
// outside it.
func MachineCPU() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("cannot read /proc/stat: %w", err)
	}
	return ParseMachineStat(b)
}

// ParseMachineStat reads the aggregate "cpu" line of /proc/stat.
func ParseMachineStat(b []byte) (float64, error) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("%w: /proc/stat cpu line has %d fields, want ≥ 9", ErrProcStat, len(f))
		}
		var busy uint64
		for _, i := range []int{1, 2, 3, 8} { // user nice system steal
			n, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%w: /proc/stat field %d %q", ErrProcStat, i, f[i])
			}
			busy += n
		}
		return float64(busy) / clockTicks, nil
	}
	return 0, fmt.Errorf("%w: no cpu line in /proc/stat", ErrProcStat)
}
