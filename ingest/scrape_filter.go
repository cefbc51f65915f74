package ingest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// A /metrics page can be large (16 MiB of small series from a busy engine
// with many LoRA adapters or a chatty exporter), and expfmt materialises
// every family of it as protobuf messages: ≈ 600 MB a scrape. The page is
// therefore filtered line by line as it streams in, and only the families
// kvroute reads reach the parser, within bounds.
const (
	// maxScrapeLineBytes bounds one line of a family kvroute reads; longer
	// lines of other families are skipped without being held.
	maxScrapeLineBytes = 64 << 10
	// maxScrapeKeptSeries bounds the samples kept of the families kvroute
	// reads (one per engine, model and LoRA adapter each, a histogram's
	// _sum and _count).
	maxScrapeKeptSeries = 16 << 10
	// maxScrapeKeptBytes bounds the text handed to the parser.
	maxScrapeKeptBytes = 4 << 20
)

// scrapeFamilies are the metric families kvroute reads from an engine's
// /metrics, by name without the _total, _sum, _count, _bucket or _created
// suffix of their samples.
var scrapeFamilies = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range []string{vllmRunning, vllmWaiting, vllmKVUsage, vllmKVUsageOld, vllmQueries, vllmHits,
		vllmQueriesOld, vllmHitsOld, vllmCacheConfig, processStartTime, vllmPromptTokens, vllmPromptCached, vllmPrefillTime} {
		m[n] = true
	}
	return m
}()

// Errors of filterMetrics (each a scrape error, counted and logged).
var (
	errScrapeLine   = errors.New("a line of a read family is over the line limit")
	errScrapeSeries = errors.New("the read families have too many series")
)

// filterMetrics copies from r the lines of the families kvroute reads
// (their # HELP and # TYPE lines and samples, histogram buckets left out).
func filterMetrics(r io.Reader) ([]byte, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	var out bytes.Buffer
	series := 0
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than the reader's buffer: keep it only if it is of a
			// read family, and only up to the line limit.
			keep := scrapeLineKept(line)
			var long []byte
			if keep {
				long = append(long, line...)
			}
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				if keep {
					if len(long)+len(line) > maxScrapeLineBytes {
						return nil, fmt.Errorf("%w (%d bytes)", errScrapeLine, maxScrapeLineBytes)
					}
					long = append(long, line...)
				}
			}
			line = long
		} else if scrapeLineKept(line) {
			// line is kept below
		} else {
			line = nil
		}
		if len(line) > 0 {
			if line[0] != '#' {
				if series++; series > maxScrapeKeptSeries {
					return nil, fmt.Errorf("%w (over %d)", errScrapeSeries, maxScrapeKeptSeries)
				}
			}
			if out.Len()+len(line)+1 > maxScrapeKeptBytes {
				return nil, fmt.Errorf("%w (over %d bytes)", errScrapeSeries, maxScrapeKeptBytes)
			}
			out.Write(line)
			if line[len(line)-1] != '\n' {
				out.WriteByte('\n')
			}
		}
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// scrapeLineKept reports whether a line (or the start of a long one) belongs
// to a family kvroute reads.
func scrapeLineKept(line []byte) bool {
	s := line
	if len(s) > 0 && s[0] == '#' {
		// "# HELP name ..." or "# TYPE name ..."; other comments go.
		rest, ok := bytes.CutPrefix(s, []byte("# HELP "))
		if !ok {
			if rest, ok = bytes.CutPrefix(s, []byte("# TYPE ")); !ok {
				return false
			}
		}
		s = rest
	}
	end := bytes.IndexAny(s, "{ \t\n")
	if end < 0 {
		end = len(s)
	}
	name := s[:end]
	if bytes.HasSuffix(name, []byte("_bucket")) {
		return false
	}
	if scrapeFamilies[string(name)] { // no allocation: the lookup converts in place
		return true
	}
	for _, suf := range [...]string{"_total", "_sum", "_count", "_created"} {
		if bytes.HasSuffix(name, []byte(suf)) && scrapeFamilies[string(name[:len(name)-len(suf)])] {
			return true
		}
	}
	return false
}
