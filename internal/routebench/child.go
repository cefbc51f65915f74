package routebench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child is a process the demo started (an emulated vLLM replica or kvroute).
// Its output goes to a log file; Stop ends it with SIGTERM, then SIGKILL.
type Child struct {
	Name    string
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // Wait's result, set before done closes
}

// StartChild runs path with args and extra environment, writing stdout and
// stderr to logPath. The child gets its own process group, so a terminal's
// Ctrl-C reaches only the demo, which then stops its children in order; on
// Linux the kernel also kills the child if the demo dies without cleaning up.
func StartChild(name, path string, args, env []string, logPath string) (*Child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &Child{Name: name, LogPath: logPath, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		f.Close()
		close(c.done)
	}()
	return c, nil
}

// Exited is closed once the process has exited.
func (c *Child) Exited() <-chan struct{} { return c.done }

// ExitErr describes how the child ended (call after Exited).
func (c *Child) ExitErr() error {
	if c.err == nil {
		return fmt.Errorf("%s exited", c.Name)
	}
	return fmt.Errorf("%s exited: %w", c.Name, c.err)
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the
// child. It returns once the process is gone; calling it again is harmless.
func (c *Child) Stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// LogTail returns the last n bytes of the child's log, for error messages.
func (c *Child) LogTail(n int64) string {
	f, err := os.Open(c.LogPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// Children stops a set of children together.
type Children struct {
	mu   sync.Mutex
	list []*Child
}

// Add records c to be stopped by StopAll.
func (cs *Children) Add(c *Child) {
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
}

// StopAll stops every child, the last started first, each within grace, in
// parallel; it returns once all are gone.
func (cs *Children) StopAll(grace time.Duration) {
	cs.mu.Lock()
	list := cs.list
	cs.list = nil
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for i := len(list) - 1; i >= 0; i-- {
		wg.Go(func() { list[i].Stop(grace) })
	}
	wg.Wait()
}

// FirstExit returns an error naming a child that has already exited, nil
// while all run.
func (cs *Children) FirstExit() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var errs []error
	for _, c := range cs.list {
		select {
		case <-c.done:
			errs = append(errs, fmt.Errorf("%w (log %s: %s)", c.ExitErr(), c.LogPath, lastLine(c.LogTail(2048))))
		default:
		}
	}
	return errors.Join(errs...)
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
