package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TickSeconds is the length of a clock tick (USER_HZ, 100/s), the unit of
// CPUTicks.
const TickSeconds = 0.01

// CPUTicks returns utime+stime of process pid in clock ticks, from
// /proc/<pid>/stat (Linux only).
func CPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces) start at
	// state (field 3); utime and stime are fields 14 and 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// CPUNanos returns the time process pid's threads have run, in
// nanoseconds, from /proc/<pid>/task/*/schedstat (Linux only): finer than
// CPUTicks, and without its tick sampling.
func CPUNanos(pid int) (int64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/schedstat: %w", t.Name(), err)
		}
		total += n
	}
	return total, nil
}

// RSS returns the resident set size of the process in bytes, from VmRSS
// in /proc/<pid>/status (Linux only).
func (p *Process) RSS() (int64, error) {
	rss, err := ReadRSS(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s rss: %w", p.name, err)
	}
	return rss, nil
}

// MustRSS is RSS that fails the test on error.
func (p *Process) MustRSS(t testing.TB) int64 {
	t.Helper()
	return must[int64](t)(p.RSS())
}

// ReadRSS returns the resident set size (VmRSS) of process pid in bytes,
// from /proc/<pid>/status (Linux only).
func ReadRSS(pid int) (int64, error) { return readStatusKB(pid, "VmRSS") }

// ReadPeakRSS returns the peak resident set size (VmHWM) of process pid in
// bytes, from /proc/<pid>/status (Linux only).
func ReadPeakRSS(pid int) (int64, error) { return readStatusKB(pid, "VmHWM") }

// readStatusKB reads field (a size in kB) of /proc/<pid>/status, in bytes.
func readStatusKB(pid int, field string) (int64, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected %s line %q", path, field, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: parse %s: %w", path, field, err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("%s: no %s line (process exited?)", path, field)
}
