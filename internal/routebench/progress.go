package routebench

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Progress prints one live line per phase: on a terminal it is redrawn in
// place (carriage return) at most every 100ms; otherwise a plain line is
// written every Every (default 2s) and when the phase ends.
type Progress struct {
	W     io.Writer
	TTY   bool
	Every time.Duration

	mu            sync.Mutex
	label         string
	start, last   time.Time
	done, total   int
	errs          int
	prompt, cache int64
}

// IsTerminal reports whether f is a character device (an interactive terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Begin starts a phase of total requests.
func (p *Progress) Begin(label string, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.total = label, total
	p.done, p.errs, p.prompt, p.cache = 0, 0, 0, 0
	p.start, p.last = time.Now(), time.Now()
	p.printLocked(false)
}

// Observe is a Driver.Progress callback.
func (p *Progress) Observe(done, total int, s Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = done, total
	if s.Err != nil {
		p.errs++
	} else {
		p.prompt += int64(s.PromptTokens)
		p.cache += int64(s.CachedTokens)
	}
	every := p.Every
	if p.TTY {
		every = 100 * time.Millisecond
	} else if every == 0 {
		every = 2 * time.Second
	}
	if time.Since(p.last) >= every {
		p.last = time.Now()
		p.printLocked(false)
	}
}

// End prints the phase's final line.
func (p *Progress) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.printLocked(true)
}

func (p *Progress) printLocked(final bool) {
	if p.W == nil {
		return
	}
	hit := 0.0
	if p.prompt > 0 {
		hit = 100 * float64(p.cache) / float64(p.prompt)
	}
	line := fmt.Sprintf("%-22s %4d/%-4d requests  %5.1fs  cache hit %5.1f %%  errors %d",
		p.label, p.done, p.total, time.Since(p.start).Seconds(), hit, p.errs)
	switch {
	case p.TTY && final:
		fmt.Fprintf(p.W, "\r\033[K%s\n", line)
	case p.TTY:
		fmt.Fprintf(p.W, "\r\033[K%s", line)
	default:
		fmt.Fprintln(p.W, line)
	}
}
