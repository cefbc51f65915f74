package routebench

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
)

func TestChildStopsOnSIGTERM(t *testing.T) {
	c, err := StartChild("sleeper", "/bin/sh", []string{"-c", "echo started; exec sleep 30"}, nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		testdata.Missing(t, "cannot start /bin/sh: %v", err)
	}
	waitLog(t, c, "started")
	c.Stop(10 * time.Second)
	select {
	case <-c.Exited():
	default:
		t.Fatal("Stop returned while the child runs")
	}
	if !strings.Contains(c.ExitErr().Error(), "terminated") {
		t.Fatalf("exit %v, want death by SIGTERM", c.ExitErr())
	}
	c.Stop(time.Second) // again: harmless
}

func TestChildIgnoringSIGTERMIsKilled(t *testing.T) {
	c, err := StartChild("stubborn", "/bin/sh", []string{"-c", `trap "" TERM; echo ready; while :; do sleep 0.05; done`}, nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		testdata.Missing(t, "cannot start /bin/sh: %v", err)
	}
	waitLog(t, c, "ready")
	cs := &Children{}
	cs.Add(c)
	cs.StopAll(200 * time.Millisecond)
	if !strings.Contains(c.ExitErr().Error(), "killed") {
		t.Fatalf("exit %v, want SIGKILL after the grace period", c.ExitErr())
	}
}

func TestChildrenReportAnEarlyExitWithItsLog(t *testing.T) {
	cs := &Children{}
	c, err := StartChild("crasher", "/bin/sh", []string{"-c", "echo address already in use >&2; exit 3"}, nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		testdata.Missing(t, "cannot start /bin/sh: %v", err)
	}
	cs.Add(c)
	<-c.Exited()
	err = cs.FirstExit()
	if err == nil || !strings.Contains(err.Error(), "crasher exited: exit status 3") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("FirstExit = %v", err)
	}
	cs.StopAll(time.Second)
}

func waitLog(t *testing.T, c *Child, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(c.LogTail(256), want) {
			return
		}
	}
	t.Fatalf("child never logged %q", want)
}
