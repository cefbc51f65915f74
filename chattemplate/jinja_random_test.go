package chattemplate

import (
	"encoding/json"
	"os"
	"testing"
)

// TestRandomTemplatesMatchJinja2 replays testdata/jinja_random_cases.json:
// random templates built from the constructs chat templates use, rendered by
// real Jinja2 (testdata/jinja_cases.py). Every output must be identical and
// every template Jinja2 rejected or failed on must fail here too.
func TestRandomTemplatesMatchJinja2(t *testing.T) {
	raw, err := os.ReadFile("testdata/jinja_random_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Jinja2 string          `json:"jinja2"`
		Ctx    json.RawMessage `json:"ctx"`
		Cases  []struct {
			Src string  `json:"src"`
			Out *string `json:"out"`
			Err string  `json:"err"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	cv, err := DecodeJSON(doc.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := cv.(*Dict)
	outputs, failures := 0, 0
	for _, c := range doc.Cases {
		// A fresh context per case, like the generator's deep copy.
		ctx := map[string]any{}
		for i, k := range d.keys {
			ctx[k.(string)] = d.vals[i]
		}
		var got string
		tpl, err := Parse(c.Src)
		if err == nil {
			got, err = tpl.Render(ctx, RenderOptions{Now: frozenNow})
		}
		switch {
		case c.Out == nil:
			failures++
			if err == nil {
				t.Errorf("%q: rendered %q, Jinja2 %s raised %s", c.Src, got, doc.Jinja2, c.Err)
			}
		case err != nil:
			t.Errorf("%q: %v; Jinja2 rendered %q", c.Src, err, *c.Out)
		default:
			outputs++
			if got != *c.Out {
				t.Errorf("%q:\n got %q\nwant %q", c.Src, got, *c.Out)
			}
		}
	}
	if outputs < 300 || failures < 300 {
		t.Errorf("corpus too small: %d outputs, %d failures", outputs, failures)
	}
}
