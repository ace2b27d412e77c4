package pgembed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidFile is the content of DataDir/postmaster.pid:
// line 1 pid, 2 data dir, 3 start time, 4 port, 5 socket dir,
// 6 listen address, 7 shared memory key, 8 status (starting/ready/stopping).
type pidFile struct {
	pid    int
	port   int
	status string
}

func readPidFile(dataDir string) (pidFile, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return pidFile{}, err
	}
	lines := strings.Split(string(raw), "\n")
	var pf pidFile
	if len(lines) > 0 {
		pf.pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	}
	if len(lines) > 3 {
		pf.port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	if len(lines) > 7 {
		pf.status = strings.TrimSpace(lines[7])
	}
	if pf.pid <= 0 {
		return pf, fmt.Errorf("malformed postmaster.pid in %s", dataDir)
	}
	return pf, nil
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A zombie (e.g. when we are PID 1 and nobody reaps it) is dead.
	if raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if i := bytes.LastIndexByte(raw, ')'); i >= 0 && i+2 < len(raw) && raw[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// looksLikePostgres reports whether pid runs the postgres executable
// (true when it cannot be determined).
func looksLikePostgres(pid int) bool {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return true
	}
	comm := strings.TrimSpace(string(raw))
	return comm == "postgres" || comm == "postmaster"
}

// waitGone waits until pid no longer runs.
func waitGone(ctx context.Context, pid int) error {
	for processAlive(pid) {
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("pgembed: postmaster pid %d still running: %w", pid, err)
		}
	}
	return nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// readLogSince returns the log written since offset (at most the last 64 KiB).
func readLogSince(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSize(path)
	if offset > size { // rotated or truncated
		offset = 0
	}
	if size-offset > 64<<10 {
		offset = size - 64<<10
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// logTail returns the last n lines of the log written since offset.
func logTail(path string, offset int64, n int) string {
	text := strings.TrimRight(readLogSince(path, offset), "\n")
	if text == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// bindFailed reports whether the server log since offset shows that the
// port was in use.
func bindFailed(path string, offset int64) bool {
	text := readLogSince(path, offset)
	return strings.Contains(text, "could not bind") || strings.Contains(text, "Address already in use") ||
		strings.Contains(text, "could not create any TCP/IP sockets")
}
