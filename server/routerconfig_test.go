package server

import (
	"reflect"
	"slices"
	"testing"

	"github.com/kvroute/kvroute/config"
)

// TestEveryRoutingSettingIsMapped: each field of config.Routing changes
// what the router is given (RouterOptions: the decision, applied live) or
// what the ext_proc server is given (extprocOptions: Envoy's stream,
// applied at a restart), and a key tagged reload:"live" changes
// RouterOptions, the only thing a reload hands over. A new setting that
// reaches neither fails here by its key.
func TestEveryRoutingSettingIsMapped(t *testing.T) {
	base := config.Default().Routing
	router, stream := RouterOptions(base), extprocOptions(base)
	var walk func(prefix string, path []int, typ reflect.Type)
	walk = func(prefix string, path []int, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			key := prefix + yamlName(f)
			at := append(slices.Clone(path), i)
			if f.Type.Kind() == reflect.Struct && f.Type.NumField() > 0 && f.Type.Field(0).Tag.Get("yaml") != "" {
				walk(key+".", at, f.Type) // a section: each of its settings
				continue
			}
			changed := base
			if !perturb(reflect.ValueOf(&changed).Elem().FieldByIndex(at)) {
				t.Errorf("%s: the test cannot change a %s; teach perturb its kind", key, f.Type)
				continue
			}
			toRouter := !reflect.DeepEqual(RouterOptions(changed), router)
			toStream := !reflect.DeepEqual(extprocOptions(changed), stream)
			switch {
			case !toRouter && !toStream:
				t.Errorf("%s reaches neither RouterOptions nor extprocOptions (server/routerconfig.go)", key)
			case config.Live(key) && !toRouter:
				t.Errorf("%s is reload:\"live\" but does not reach RouterOptions, which a reload applies", key)
			case !config.Live(key) && toRouter:
				t.Errorf("%s reaches RouterOptions but is not reload:\"live\": a reload would apply it", key)
			}
		}
	}
	walk("routing.", nil, reflect.TypeOf(base))
}

// yamlName is a field's key as written in the config file.
func yamlName(f reflect.StructField) string {
	name := f.Tag.Get("yaml")
	for i := range len(name) {
		if name[i] == ',' {
			return name[:i]
		}
	}
	return name
}

// perturb sets v to a value other than its current one; false when it
// does not know v's kind.
func perturb(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Float64:
		v.SetFloat(v.Float()*2 + 0.125)
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int()*2 + 1)
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.String:
		if v.String() == config.BodyModeFullDuplex {
			v.SetString(config.BodyModeBuffered)
		} else {
			v.SetString(config.BodyModeFullDuplex)
		}
	case reflect.Slice:
		// One more entry (a zero one: a band or objective of priority 0).
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		if v.Type().Elem().Kind() != reflect.Bool {
			return false
		}
		b := !v.IsNil() && !v.Elem().Bool() // a nil *bool reads as its default, true
		v.Set(reflect.ValueOf(&b).Convert(v.Type()))
	default:
		return false
	}
	return true
}
