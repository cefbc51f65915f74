package chattemplate

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kvroute/kvroute/internal/testdata"
)

// conformanceTarget is the acceptance bar: templates (of 100) whose
// every conversation renders exactly as Jinja2 3.1.6 rendered it.
const conformanceTarget = 95

// frozenNow is the clock the goldens were rendered with (strftime_now).
func frozenNow() time.Time { return time.Date(2026, 1, 15, 9, 30, 0, 0, time.UTC) }

func loadConformance(t testing.TB) (templates map[string]string, convs *Dict, renders map[string]testdata.Jinja2Render) {
	t.Helper()
	return testdata.ChatTemplates(t), loadConversations(t), testdata.Jinja2Renders(t)
}

// loadConversations decodes the conversations the goldens were rendered from.
func loadConversations(t testing.TB) *Dict {
	t.Helper()
	cv, err := DecodeJSON(testdata.Conversations(t))
	if err != nil {
		t.Fatal(err)
	}
	return cv.(*Dict)
}

// conformanceContext is the context the goldens were rendered with.
func conformanceContext(conv *Dict) map[string]any {
	msgs, _ := conv.Get("messages")
	tools, _ := conv.Get("tools")
	return map[string]any{
		"messages":              msgs,
		"tools":                 tools,
		"documents":             nil,
		"add_generation_prompt": true,
		"bos_token":             "<s>",
		"eos_token":             "</s>",
		"unk_token":             "<unk>",
		"pad_token":             "<pad>",
	}
}

// firstDiff describes where got and want diverge.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d:\n   got %q\n  want %q", i, got[lo:min(len(got), i+60)], want[lo:min(len(want), i+60)])
}

func TestConformanceWithJinja2(t *testing.T) {
	templates, convs, renders := loadConformance(t)
	names := make([]string, 0, len(templates))
	for n := range templates {
		names = append(names, n)
	}
	sort.Strings(names)
	matched := 0
	var failures []string
	errMissed, compared, raised := 0, 0, 0
	for _, name := range names {
		tpl, perr := Parse(templates[name])
		ok := true
		var why []string
		for _, ck := range convs.Keys() {
			key := name + "|" + ck.(string)
			want, found := renders[key]
			if !found {
				continue
			}
			compared++
			if perr != nil {
				ok = false
				why = append(why, fmt.Sprintf("%s: parse: %v", ck, perr))
				if want.Err != nil {
					errMissed++
				}
				continue
			}
			conv, _ := convs.Get(ck)
			got, err := tpl.Render(conformanceContext(conv.(*Dict)), RenderOptions{Now: frozenNow})
			switch {
			case want.Err != nil:
				if err != nil {
					raised++
					if err.Error() != *want.Err {
						ok = false
						why = append(why, fmt.Sprintf("%s: raised %q, Jinja2 raised %q", ck, err.Error(), *want.Err))
					}
				}
				if err == nil {
					ok = false
					errMissed++
					why = append(why, fmt.Sprintf("%s: rendered, Jinja2 raised %s", ck, *want.Err))
				}
			case err != nil:
				ok = false
				why = append(why, fmt.Sprintf("%s: error %v", ck, err))
			case got != *want.Out:
				ok = false
				why = append(why, fmt.Sprintf("%s: differs %s", ck, firstDiff(got, *want.Out)))
			}
		}
		if ok {
			matched++
		} else {
			failures = append(failures, name+"\n    "+strings.Join(why, "\n    "))
		}
	}
	if compared != len(renders) {
		t.Errorf("compared %d renders, golden file has %d", compared, len(renders))
	}
	t.Logf("conformance: %d renders compared, %d expected errors raised", compared, raised)
	t.Logf("conformance: %d of %d templates identical on every conversation (target %d)", matched, len(names), conformanceTarget)
	for _, f := range failures {
		t.Logf("unmatched: %s", f)
	}
	if matched < conformanceTarget {
		t.Errorf("conformance %d < target %d", matched, conformanceTarget)
	}
	if errMissed > 0 {
		t.Errorf("%d err entries did not raise", errMissed)
	}
}
