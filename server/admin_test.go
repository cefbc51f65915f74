package server

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// adminServer runs a ready kvroute whose admin listener has bounds b.
func adminServer(t *testing.T, b adminBounds) *Server {
	t.Helper()
	s, err := New(Options{Config: qwenConfig(t, blockSize, newReplica(t)), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s.adminBounds = b
	serve(t, s)
	return s
}

// slowClient opens a connection to the admin listener, sends the headers of
// an explain request announcing a body of n bytes and a first few bytes of
// it, then nothing.
func slowClient(t *testing.T, s *Server, n int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST /debug/explain?path=/v1/completions HTTP/1.1\r\nHost: kvroute\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\"", n)
	return c
}

// closedWithin reports whether the server ends c (after whatever answer)
// within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	return err == nil // EOF: the server closed it; a timeout is an error
}

// A client that sends the headers of a request and then its body slowly, or
// not at all, is cut at the admin read timeout instead of being held.
func TestAdminCutsSlowBodies(t *testing.T) {
	b := defaultAdminBounds
	b.readTimeout = 300 * time.Millisecond
	s := adminServer(t, b)
	c := slowClient(t, s, 1<<20)
	if !closedWithin(c, 5*time.Second) {
		t.Fatal("a client stalled in its body was still connected after 5 s (read timeout 300 ms)")
	}
}

// However many clients connect and stall, the admin listener holds at most
// its connection cap, and once they are cut it serves again.
func TestAdminBoundsItsConnections(t *testing.T) {
	b := defaultAdminBounds
	b.maxConns, b.readTimeout, b.readHeaderTimeout = 8, time.Second, time.Second
	s := adminServer(t, b)
	var conns []net.Conn
	for range 40 {
		conns = append(conns, slowClient(t, s, 1<<20))
	}
	time.Sleep(200 * time.Millisecond)
	if got := testutil.ToFloat64(s.adminConns); got > 8 {
		t.Fatalf("the admin listener holds %v connections, cap 8", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + s.AdminAddr().String() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin never served again: %v", err)
		}
		if got := testutil.ToFloat64(s.adminConns); got > 8 {
			t.Fatalf("the admin listener holds %v connections, cap 8", got)
		}
	}
	for _, c := range conns {
		c.Close()
	}
}

// /debug/explain serves a bounded number of requests at once: with every
// slot held by a client sending its body slowly, one more is answered 503
// with Retry-After, counted, before its body is read.
func TestExplainConcurrencyIsBounded(t *testing.T) {
	b := defaultAdminBounds
	b.explainSlots = 2
	s := adminServer(t, b)
	for range 2 {
		slowClient(t, s, 1<<20)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post("http://"+s.AdminAddr().String()+"/debug/explain?path=/v1/completions", "application/json",
			bytes.NewReader([]byte(`{"model":"qwen","prompt":"x"}`)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			if resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("explain answered %d with every slot held", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := metricValue(t, s, "kvroute_admin_explain_requests_total", `result="busy"`); got < 1 {
		t.Errorf("busy refusals counted: %v", got)
	}
}
