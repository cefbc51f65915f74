package routetest

import "testing"

// TestChatWorkloadAppendBodyIsBody: AppendBody builds Body's bytes.
func TestChatWorkloadAppendBodyIsBody(t *testing.T) {
	w := &ChatWorkload{Sys: Prose(1, 300), User: Prose(2, 100)}
	for _, i := range []int{0, 7, 4096, 123456789} {
		if got, want := w.AppendBody([]byte("x"), i), append([]byte("x"), w.Body(i)...); string(got) != string(want) {
			t.Fatalf("AppendBody(%d) = %.80q…, Body = %.80q…", i, got, want)
		}
	}
}
