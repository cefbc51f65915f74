package tokenize

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
)

// parallelTexts are texts of more than parallelMinWords words: made-up
// words (every one merged), English prose, and the two mixed with digits
// and punctuation.
func parallelTexts() []string {
	made := testdata.MadeUpProse(7, 3*parallelMinWords)
	english := englishPrompt(64 << 10)
	return []string{made, english, made[:len(made)/3] + " 12345, 67.8%! " + english[:len(english)/2] + "\n\n" + made[len(made)/2:]}
}

// TestParallelEncodeEqualsSerial: the chunked encode with a helper gives
// the ids of the one-goroutine encode, on every model with a pre-tokenizer.
func TestParallelEncodeEqualsSerial(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Log("GOMAXPROCS is 1: the parallel encode runs serially here, and is compared all the same")
	}
	for _, name := range mergeModels {
		tok := loadTokenizer(t, name, true)
		if tok.preTokenizer == nil {
			continue
		}
		for i, text := range parallelTexts() {
			st := getScratch()
			words := slices.Clone(tok.preTokenizer.split(nil, piece{text, true}, st))
			if len(words) < parallelMinWords {
				t.Fatalf("%s text %d: %d words, want at least %d", name, i, len(words), parallelMinWords)
			}
			want := tok.model.encodeWordList([]int{-1}, words, st)
			for range 3 {
				if got := tok.model.encodeWordListParallel([]int{-1}, words, st); !slices.Equal(got, want) {
					t.Fatalf("%s text %d: parallel encode differs from serial (%d vs %d ids)", name, i, len(got), len(want))
				}
			}
			putScratch(st)
		}
	}
}

// TestParallelEncodeUnderLoad: many encodes at once, more than there are
// spare cores, each equal to its serial encode; no helper is left counted.
func TestParallelEncodeUnderLoad(t *testing.T) {
	tok := withoutSegmentCache(loadTokenizer(t, "qwen3", true))
	texts := parallelTexts()
	want := make([][]int, len(texts))
	for i, text := range texts {
		want[i] = tok.Encode(text, false)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 6 {
				i := (g + k) % len(texts)
				if got := tok.Encode(texts[i], false); !slices.Equal(got, want[i]) {
					t.Errorf("goroutine %d text %d: differs", g, i)
				}
			}
		})
	}
	wg.Wait()
	waitHelpersReleased(t)
}

// waitHelpersReleased fails unless every helper's count is released within
// 5 s: a cancelled helper releases it when it is scheduled, maybe after its
// encode returned.
func waitHelpersReleased(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); encodeHelpers.Load() != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := encodeHelpers.Load(); n != 0 {
		t.Errorf("%d helpers still counted 5 s after the encodes returned", n)
	}
}

// TestParallelEncodeHelperPanicReachesTheCaller: a helper that panics (a
// bug) records the panic and finishes, and the caller re-raises it.
func TestParallelEncodeHelperPanicReachesTheCaller(t *testing.T) {
	tok := loadTokenizer(t, "qwen3", true)
	broken := *tok.model
	broken.cache = nil // encodeWordList dereferences it
	words := tok.preTokenizer.split(nil, piece{strings.Repeat(" zentwirl", parallelMinWords), true}, getScratch())
	c := newChunkedWords(words, getScratch())
	encodeHelpers.Add(1) // helpEncode releases its count
	broken.helpEncode(c)
	<-c.done
	if c.panick == nil {
		t.Fatal("helper's panic not recorded")
	}
	defer func() {
		if v := recover(); v != c.panick {
			t.Errorf("caller raised %v, want the helper's panic", v)
		}
	}()
	c.join(nil)
}

// TestParallelEncodeDoesNotWaitForALateHelper: when the caller has taken
// every chunk before the helper started, join returns at once, and the
// helper, starting later, takes nothing.
func TestParallelEncodeDoesNotWaitForALateHelper(t *testing.T) {
	tok := loadTokenizer(t, "qwen3", true)
	st := getScratch()
	defer putScratch(st)
	words := slices.Clone(tok.preTokenizer.split(nil, piece{testdata.MadeUpProse(3, parallelMinWords), true}, st))
	want := tok.model.encodeWordList(nil, words, st)
	c := newChunkedWords(words, st)
	c.encodeChunks(tok.model, 0, st)
	if got := c.join(nil); !slices.Equal(got, want) { // blocks forever if it waits
		t.Fatal("ids differ from the serial encode")
	}
	encodeHelpers.Add(1)
	tok.model.helpEncode(c)
	if c.state.Load() != helperCancelled {
		t.Fatalf("late helper: state %d, want cancelled", c.state.Load())
	}
	waitHelpersReleased(t)
}
