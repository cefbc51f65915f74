package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docRow is one key row of a table in docs/CONFIG.md.
type docRow struct {
	key, def string
	line     int
}

// configDocRows reads the key tables of docs/CONFIG.md: a table under a
// heading that names a list (## `pools[].replicas[]`) holds keys relative to
// it; one cell may name several keys (`listen.tls.cert_file`, `key_file`:
// the later ones beside the first).
func configDocRows(t *testing.T) []docRow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile("^## `([^`]+)`")
	span := regexp.MustCompile("`([^`]*)`")
	var rows []docRow
	prefix := ""
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			prefix = ""
			if m := heading.FindStringSubmatch(line); m != nil {
				prefix = m[1] + "."
			}
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("CONFIG.md:%d: a key row needs key, default and meaning cells", i+1)
		}
		first := ""
		for _, m := range span.FindAllStringSubmatch(cells[0], -1) {
			key := m[1]
			if first == "" {
				first = prefix + key
				key = first
			} else {
				key = first[:strings.LastIndexByte(first, '.')+1] + key
			}
			rows = append(rows, docRow{key: key, def: strings.TrimSpace(cells[1]), line: i + 1})
		}
	}
	if len(rows) < 40 {
		t.Fatalf("CONFIG.md: found %d key rows; the table format changed", len(rows))
	}
	return rows
}

// fieldByKey finds the value of a key path (pools[] as the first element)
// in c.
func fieldByKey(c reflect.Value, key string) reflect.Value {
	v := c
	for part := range strings.SplitSeq(key, ".") {
		name, list := strings.CutSuffix(part, "[]")
		t := v.Type()
		found := false
		for i := range t.NumField() {
			if yamlName(t.Field(i)) == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}
		}
		if list {
			v = reflect.New(v.Type().Elem()).Elem()
			listDefaults(v)
		}
	}
	return v
}

// derivedDefaults are keys whose default comes from another key.
var derivedDefaults = map[string]string{
	"pools[].replicas[].metrics": "`http://<address>/metrics`",
}

// TestConfigDocMatchesCode fails when docs/CONFIG.md and the code disagree:
// a key documented that does not exist, a key that exists undocumented, or
// a documented default (the first `value` of the default cell; "none",
// "required" and "—" mean the zero value) that is not the code's.
func TestConfigDocMatchesCode(t *testing.T) {
	rows := configDocRows(t)
	documented := map[string]bool{}
	def := Default()
	for _, r := range rows {
		if documented[r.key] {
			t.Errorf("CONFIG.md:%d: %s is documented twice", r.line, r.key)
		}
		documented[r.key] = true
		s := settingByKey(r.key)
		if s == nil {
			t.Errorf("CONFIG.md:%d: %s is not a config key", r.line, r.key)
			continue
		}
		if want, ok := derivedDefaults[r.key]; ok {
			if r.def != want {
				t.Errorf("CONFIG.md:%d: %s default %s, want %s", r.line, r.key, r.def, want)
			}
			continue
		}
		got := fieldByKey(reflect.ValueOf(def), r.key)
		doc := reflect.New(got.Type()).Elem()
		if m := regexp.MustCompile("^`([^`]*)`").FindStringSubmatch(r.def); m != nil {
			var d decoder
			d.decode(scalarNode(m[1]), doc, r.key)
			if len(d.errs) > 0 {
				t.Errorf("CONFIG.md:%d: %s default %s: %v", r.line, r.key, r.def, d.errs)
				continue
			}
		} else if !strings.HasPrefix(r.def, "none") && !strings.HasPrefix(r.def, "required") && r.def != "—" {
			t.Errorf("CONFIG.md:%d: %s default cell %q: want `value`, none, required or —", r.line, r.key, r.def)
			continue
		}
		if !sameValue(got, doc) {
			t.Errorf("CONFIG.md:%d: %s default %s, the code's is %v (config.go's default tag)", r.line, r.key, r.def, shown(got))
		}
	}
	for _, s := range Settings() {
		if !documented[s.Key] {
			t.Errorf("%s is not documented in docs/CONFIG.md", s.Key)
		}
	}
}

func settingByKey(key string) *Setting {
	all := Settings()
	if i := slices.IndexFunc(all, func(s Setting) bool { return s.Key == key }); i >= 0 {
		return &all[i]
	}
	return nil
}

// sameValue compares two field values; nil and empty lists are the same.
func sameValue(a, b reflect.Value) bool {
	if a.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	if a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil() {
		return reflect.DeepEqual(a.Elem().Interface(), b.Elem().Interface())
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

func shown(v reflect.Value) any {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		return v.Elem().Interface()
	}
	return v.Interface()
}

// TestDocsNameOnlyConfigKeys fails when README.md or a docs/ page names a
// config key (`routing.max_prompt_bytes`, `pools[].tokenizer`) that does not
// exist. A code span beginning with a top-level section and a dot is read as
// a key; a trailing .* or . names a whole section.
func TestDocsNameOnlyConfigKeys(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	files = append(files, filepath.Join("..", "README.md"))
	sections := map[string]bool{}
	for _, s := range Settings() {
		sec, _, _ := strings.Cut(s.Key, ".")
		sections[strings.TrimSuffix(sec, "[]")] = true
	}
	prefixes := map[string]bool{}
	for _, s := range Settings() {
		for i := range len(s.Key) {
			if s.Key[i] == '.' {
				prefixes[s.Key[:i]] = true
			}
		}
		prefixes[s.Key] = true
	}
	keySpan := regexp.MustCompile("`([a-z_]+)((?:\\[[0-9]*\\])?\\.[a-z_.\\[\\]0-9*]*)`")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range keySpan.FindAllStringSubmatch(line, -1) {
				if !sections[m[1]] {
					continue
				}
				key := stripIndexes(m[1] + m[2])
				key = strings.TrimSuffix(strings.TrimSuffix(key, "*"), ".")
				checked++
				if !prefixes[key] {
					t.Errorf("%s:%d: `%s` is not a config key", filepath.Base(f), i+1, m[1]+m[2])
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("found %d key references in the docs; the scan is broken", checked)
	}
}

// TestConfigDocLiveKeys fails when the keys CONFIG.md says a reload applies
// live are not exactly those tagged reload:"live".
func TestConfigDocLiveKeys(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "CONFIG.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "**applied live**")
	para, _, ok2 := strings.Cut(after, " and the `replicas` of static pools")
	if !ok || !ok2 {
		t.Fatal("CONFIG.md: the live-reload list is not where the test looks")
	}
	var doc []string
	var code, all []string
	for _, s := range Settings() {
		all = append(all, s.Key)
		if s.Live {
			code = append(code, s.Key)
		}
	}
	for _, m := range regexp.MustCompile("`([a-z_]+)(\\.\\*)?`").FindAllStringSubmatch(para, -1) {
		switch {
		case m[1] == "routing":
		case m[2] != "":
			// `flow_control.*`: every key under it.
			for _, k := range all {
				if strings.HasPrefix(k, "routing."+m[1]+".") {
					doc = append(doc, k)
				}
			}
		default:
			doc = append(doc, "routing."+m[1])
		}
	}
	slices.Sort(doc)
	slices.Sort(code)
	if !slices.Equal(doc, code) {
		t.Errorf("CONFIG.md's live keys %v, tagged reload:\"live\" %v", doc, code)
	}
}
