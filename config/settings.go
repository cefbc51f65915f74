package config

import (
	"fmt"
	"iter"
	"math"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// A setting is declared once, by its field in the structs of config.go and
// that field's tags:
//
//	yaml:"placement_slack"   the key
//	default:"0"              the default, written as in a config file (none: the zero value)
//	check:"nonnegative"      a bound on the value alone (checks below; cross-key rules are in validate.go)
//	reload:"live"            a config reload applies it at once (none: a restart is needed)
//
// Default, Validate, Live and the test that compares docs/CONFIG.md with the
// code all read these tags.

// Setting describes one leaf key of the config file.
type Setting struct {
	// Key is the key path, list elements as []: "routing.placement_slack",
	// "pools[].replicas[].name".
	Key string
	// Default is the default as written in a file ("" when the zero value).
	Default string
	// Check is the field's check tag.
	Check string
	// Live reports whether a reload applies the key at once.
	Live bool
	// Type is the field's Go type.
	Type reflect.Type
}

// Settings lists every leaf key of the config file in declaration order.
func Settings() []Setting {
	var out []Setting
	walkSettings(reflect.TypeOf(Config{}), "", &out)
	return out
}

func walkSettings(t reflect.Type, path string, out *[]Setting) {
	for i, key := range keyedFields(t, path) {
		f := t.Field(i)
		switch nestingOf(f.Type) {
		case nestSection:
			walkSettings(f.Type, key, out)
		case nestList:
			walkSettings(f.Type.Elem(), key+"[]", out)
		default:
			*out = append(*out, Setting{Key: key, Default: f.Tag.Get("default"), Check: f.Tag.Get("check"),
				Live: f.Tag.Get("reload") == "live", Type: f.Type})
		}
	}
}

// keyedFields yields the index and key path (under path) of each field of
// the struct type t that the config file names.
func keyedFields(t reflect.Type, path string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" && !yield(i, join(path, name)) {
				return
			}
		}
	}
}

// nesting is how a field's type holds settings.
type nesting uint8

const (
	nestLeaf    nesting = iota // one setting
	nestSection                // a struct of settings (a Duration is a leaf)
	nestList                   // a list of structs of settings
)

func nestingOf(t reflect.Type) nesting {
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		return nestSection
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		return nestList
	}
	return nestLeaf
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || !f.IsExported() {
		return ""
	}
	return name
}

// liveKeys are the keys with reload:"live", and the lists whose every leaf
// is live (Diff names a list whose length changed by the list's key).
var liveKeys = func() map[string]bool {
	m := map[string]bool{}
	lists := map[string]bool{}
	for _, s := range Settings() {
		if s.Live {
			m[s.Key] = true
		}
		for i := strings.Index(s.Key, "[]"); i >= 0; {
			list := s.Key[:i]
			if ok, seen := lists[list]; !seen || ok {
				lists[list] = s.Live
			}
			j := strings.Index(s.Key[i+2:], "[]")
			if j < 0 {
				break
			}
			i += 2 + j
		}
	}
	for list, ok := range lists {
		if ok {
			m[list] = true
		}
	}
	return m
}()

// Live reports whether a config reload applies the key path (as Diff names
// it: list indexes written, "pools[0].replicas") at once.
func Live(key string) bool { return liveKeys[stripIndexes(key)] }

// stripIndexes turns pools[3].replicas[0].name into pools[].replicas[].name.
func stripIndexes(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		b.WriteByte(key[i])
		if key[i] == '[' {
			for i+1 < len(key) && key[i+1] != ']' {
				i++
			}
		}
	}
	return b.String()
}

// applyDefaults sets every field of the struct v (recursively, not into
// lists) to its default tag, decoded as a config file's value would be.
func applyDefaults(v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if yamlName(f) == "" {
			continue
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != durationType {
			applyDefaults(fv)
			continue
		}
		def, ok := f.Tag.Lookup("default")
		if !ok {
			continue
		}
		var d decoder
		d.decode(scalarNode(def), fv, f.Name)
		if len(d.errs) > 0 {
			panic(fmt.Sprintf("config: field %s.%s: default %q: %v", t.Name(), f.Name, def, d.errs))
		}
	}
}

// scalarNode is the YAML node a default tag decodes from.
func scalarNode(s string) *yaml.Node {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil || len(n.Content) != 1 {
		panic(fmt.Sprintf("config: default %q is not one YAML value", s))
	}
	return n.Content[0]
}

// checkFields applies the check tags of the struct v and of every struct
// within it, lists included; path is v's key path.
func (vd *validator) checkFields(v reflect.Value, path string) {
	t := v.Type()
	for i, key := range keyedFields(t, path) {
		f, fv := t.Field(i), v.Field(i)
		switch nestingOf(f.Type) {
		case nestSection:
			vd.checkFields(fv, key)
		case nestList:
			for j := range fv.Len() {
				vd.checkFields(fv.Index(j), fmt.Sprintf("%s[%d]", key, j))
			}
		default:
			if check := f.Tag.Get("check"); check != "" {
				vd.check(key, check, fv)
			}
		}
	}
}

// check applies one check tag: positive, nonnegative, unit (0..1),
// unitopen ((0, 1]) or oneof=a|b|c.
func (vd *validator) check(key, check string, v reflect.Value) {
	if allowed, ok := strings.CutPrefix(check, "oneof="); ok {
		vd.oneOf(key, v.String(), strings.Split(allowed, "|")...)
		return
	}
	var x float64
	var shown any
	switch {
	case v.Type() == durationType:
		x, shown = float64(v.Int()), Duration(v.Int())
	case v.Kind() == reflect.Int:
		x, shown = float64(v.Int()), v.Int()
	case v.Kind() == reflect.Float64:
		x, shown = v.Float(), v.Float()
	default:
		panic(fmt.Sprintf("config: check %q on %s (%s)", check, key, v.Type()))
	}
	finite := !math.IsInf(x, 0) && !math.IsNaN(x)
	switch check {
	case "positive":
		if !(x > 0) || !finite {
			vd.fail(key, "%v must be positive", shown)
		}
	case "nonnegative":
		if !(x >= 0) || !finite {
			vd.fail(key, "%v must not be negative", shown)
		}
	case "unit":
		if !(x >= 0 && x <= 1) {
			vd.fail(key, "%v is not within 0..1", shown)
		}
	case "unitopen":
		if !(x > 0 && x <= 1) {
			vd.fail(key, "%v is not within (0, 1]", shown)
		}
	default:
		panic(fmt.Sprintf("config: unknown check %q on %s", check, key))
	}
}
