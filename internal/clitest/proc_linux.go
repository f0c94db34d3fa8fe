package clitest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: Linux's USER_HZ,
// 100 ticks a second on every architecture Go runs on.
const userHZ = 100

// cpuTime returns the CPU time, user and system, every thread of process
// pid has used so far, from /proc/pid/stat (to a tick, 10 ms), and false
// where it cannot be read.
func cpuTime(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	f := statFields(b)
	if len(f) < 13 {
		return 0, false
	}
	// Fields 14 and 15 of the line, utime and stime.
	u, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, false
	}
	s, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / userHZ, true
}

// statFields returns the fields of a /proc stat line past the command
// name (which may hold spaces and parentheses): the state first.
func statFields(b []byte) []string {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// asleep reports whether every thread of process pid sleeps (state S: in
// a read, a wait on a lock or the network, the Go scheduler's idle
// futex), none running, waiting for a CPU or in an uninterruptible wait;
// false in the second result where /proc cannot say.
func asleep(pid int) (bool, bool) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // a thread that ended
		}
		f := statFields(b)
		if len(f) == 0 {
			return false, false
		}
		if f[0] != "S" {
			return false, true
		}
	}
	return len(tasks) > 0, true
}
