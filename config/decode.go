package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads, decodes, defaults and validates the config file at path.
func Load(path string) (*Config, error) {
	b, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// MaxFileBytes bounds a config file: far above any real config (a pool of 64
// replicas is a few kilobytes), far below what could hurt the process.
const MaxFileBytes = 4 << 20

// ReadFile reads a config file of at most MaxFileBytes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%s: config file is over the %d-byte limit", path, MaxFileBytes)
	}
	return b, nil
}

// Parse decodes a YAML config over Default, derives the metrics URLs and
// validates the result. The error, when not
// nil, joins one error per problem, each naming its key path.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("config is empty")
		}
		return nil, fmt.Errorf("config is not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("config holds more than one YAML document")
	}
	c := Default()
	var d decoder
	d.decode(&doc, reflect.ValueOf(&c).Elem(), "")
	// Validation runs after decoding errors too, so one pass reports every
	// problem; a key that failed to decode kept its default and is not
	// judged again.
	c.derive()
	v := validator{skip: d.failed}
	c.validate(&v)
	if errs := append(d.errs, v.errs...); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

// decoder walks a YAML node tree against a Go struct, strictly.
type decoder struct {
	errs   []error
	failed map[string]bool // key paths that failed to decode
	visits int             // nodes visited, aliases expanded: bounded against alias bombs
}

// maxVisits bounds the nodes decoded, counting every alias expansion, so a
// small file of nested aliases ("billion laughs") cannot take forever.
const maxVisits = 100_000

var durationType = reflect.TypeOf(Duration(0))

func (d *decoder) fail(path string, format string, args ...any) {
	if d.failed == nil {
		d.failed = map[string]bool{}
	}
	d.failed[path] = true
	if path == "" {
		path = "(top level)"
	}
	d.errs = append(d.errs, fmt.Errorf("%s: %s", boundedPath(path), fmt.Sprintf(format, boundArgs(format, args)...)))
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.visits++; d.visits > maxVisits {
		if d.visits == maxVisits+1 {
			d.fail(path, "config too large or aliases expand too far (over %d nodes)", maxVisits)
		}
		return
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // key: (empty) keeps the zero value
	}
	if v.Type() == durationType {
		d.decodeDuration(n, v, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(path, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			listDefaults(s.Index(i))
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String, reflect.Bool, reflect.Int, reflect.Float64:
		if n.Kind != yaml.ScalarNode {
			d.fail(path, "want a %s, got %s", kindName(v.Kind()), describe(n))
			return
		}
		if v.Kind() == reflect.String && n.Tag != "!!str" {
			// Numbers and booleans as strings must be quoted: seed: "0".
			if n.Tag == "!!int" || n.Tag == "!!float" || n.Tag == "!!bool" {
				v.SetString(n.Value)
				return
			}
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.fail(path, "%q is not a %s", n.Value, kindName(v.Kind()))
		}
	default:
		d.fail(path, "unsupported field type %s", v.Type())
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(path, "want a mapping, got %s", describe(n))
		return
	}
	fields := map[string]int{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			fields[name] = i
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		key := k.Value
		kp := join(path, key)
		if seen[key] {
			d.fail(kp, "duplicate key")
			continue
		}
		seen[key] = true
		idx, ok := fields[key]
		if !ok {
			if near := closest(key, fields); near != "" {
				d.fail(kp, "unknown key; did you mean %q? (known: %s)", near, strings.Join(sortedKeys(fields), ", "))
			} else {
				d.fail(kp, "unknown key (known: %s)", strings.Join(sortedKeys(fields), ", "))
			}
			continue
		}
		d.decode(val, v.Field(idx), kp)
	}
}

func (d *decoder) decodeDuration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.fail(path, "want a duration like \"10m\", got %s", describe(n))
		return
	}
	if n.Value == "0" {
		v.SetInt(0)
		return
	}
	dur, err := time.ParseDuration(n.Value)
	if err != nil || dur < 0 {
		d.fail(path, "%q is not a duration (like \"500ms\", \"10m\")", n.Value)
		return
	}
	v.SetInt(int64(dur))
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprint(quoted(n.Value))
	}
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int:
		return "whole number"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean (true/false)"
	default:
		return k.String()
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Declaration order reads best: sort by field index.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && m[keys[j]] < m[keys[j-1]]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// closest returns the known key nearest to key when it is near enough to be
// a typo: at most one edit in a key of up to five bytes, two in a longer
// one. "" when none is.
func closest(key string, known map[string]int) string {
	if len(key) > 64 {
		return ""
	}
	limit := 1
	if len(key) > 5 {
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, k := range sortedKeys(known) {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
