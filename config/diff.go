package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Diff lists where a and b differ, as YAML key paths in field order:
// `routing.placement_slack`, `pools[0].tokenizer`, `pools[1].replicas` (a
// list of another length is named whole; equal lengths are compared element
// by element, `pools[0].replicas[2].address`). Config reload decides from it
// what can change live.
func Diff(a, b *Config) []string {
	var out []string
	diffValue(reflect.ValueOf(*a), reflect.ValueOf(*b), "", &out)
	return out
}

func diffValue(a, b reflect.Value, path string, out *[]string) {
	switch a.Kind() {
	case reflect.Struct:
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			p := name
			if path != "" {
				p = path + "." + name
			}
			diffValue(a.Field(i), b.Field(i), p, out)
		}
	case reflect.Slice:
		if a.Len() != b.Len() {
			*out = append(*out, path)
			return
		}
		for i := range a.Len() {
			diffValue(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				*out = append(*out, path)
			}
			return
		}
		diffValue(a.Elem(), b.Elem(), path, out)
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			*out = append(*out, path)
		}
	}
}
