package fleetsim

import (
	"bytes"
	"encoding/xml"
	"io"
	"strconv"
	"testing"
	"time"
)

// TestWriteSVGHeadingsDoNotOverlap: texts on one baseline must not run into
// each other (12 px sans-serif: at most 7 px a character). The hit-rate
// heading once carried the ideal and pooled rates and ran into the TTFT one.
func TestWriteSVGHeadingsDoNotOverlap(t *testing.T) {
	rep := &Report{Ideal: 0.935, Pooled: &Result{Name: "pooled", PromptTokens: 100, HitTokens: 57}, Results: []*Result{
		{Name: "round-robin", PromptTokens: 100, HitTokens: 40, TTFT: []time.Duration{300 * time.Millisecond}},
		{Name: "kvroute", PromptTokens: 100, HitTokens: 80, TTFT: []time.Duration{100 * time.Millisecond}},
	}}
	var b bytes.Buffer
	rep.WriteSVG(&b, "Fleet simulation: 240 requests, 4 engines × 1024 blocks × 16 tokens")
	type text struct {
		x, y float64
		s    string
	}
	var texts []text
	dec := xml.NewDecoder(&b)
	var cur *text
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if el.Name.Local == "text" {
				cur = &text{}
				for _, a := range el.Attr {
					switch a.Name.Local {
					case "x":
						cur.x, _ = strconv.ParseFloat(a.Value, 64)
					case "y":
						cur.y, _ = strconv.ParseFloat(a.Value, 64)
					case "text-anchor":
						cur = nil // right-aligned row labels: not headings
					}
				}
			}
		case xml.CharData:
			if cur != nil {
				cur.s += string(el)
			}
		case xml.EndElement:
			if el.Name.Local == "text" && cur != nil {
				texts = append(texts, *cur)
				cur = nil
			}
		}
	}
	for i, a := range texts {
		if a.x+7*float64(len([]rune(a.s))) > 760 {
			t.Errorf("%q runs past the chart's right edge", a.s)
		}
		for _, c := range texts[i+1:] {
			if a.y == c.y && a.x < c.x && a.x+7*float64(len([]rune(a.s))) > c.x {
				t.Errorf("%q runs into %q", a.s, c.s)
			}
		}
	}
}
