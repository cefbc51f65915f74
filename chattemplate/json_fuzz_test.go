package chattemplate

import (
	"reflect"
	"testing"
)

// oldDecodeJSON is the plain form of DecodeJSON, without objects and arrays
// waiting on the decoder's stack and without interned strings: the
// reference FuzzDecodeJSONMatchesGrowingDecoder holds the decoder to.
func oldDecodeJSON(data []byte) (Value, error) {
	d := &oldJSONDecoder{jsonDecoder{s: data}}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.s) {
		return nil, d.errorf("trailing data")
	}
	return v, nil
}

type oldJSONDecoder struct{ jsonDecoder }

func (d *oldJSONDecoder) value(depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, d.errorf("nesting deeper than %d", maxJSONDepth)
	}
	if d.i >= len(d.s) {
		return nil, d.errorf("unexpected end of input")
	}
	switch c := d.s[d.i]; {
	case c == '{':
		d.i++
		obj := NewDict()
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == '}' {
			d.i++
			return obj, nil
		}
		for {
			d.skipSpace()
			if d.i >= len(d.s) || d.s[d.i] != '"' {
				return nil, d.errorf("expected object key")
			}
			k, err := d.str()
			if err != nil {
				return nil, err
			}
			d.skipSpace()
			if d.i >= len(d.s) || d.s[d.i] != ':' {
				return nil, d.errorf("expected ':'")
			}
			d.i++
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			obj.Set(k, v)
			d.skipSpace()
			if d.i >= len(d.s) {
				return nil, d.errorf("unexpected end of object")
			}
			if d.s[d.i] == ',' {
				d.i++
				continue
			}
			if d.s[d.i] == '}' {
				d.i++
				return obj, nil
			}
			return nil, d.errorf("expected ',' or '}'")
		}
	case c == '[':
		d.i++
		l := &List{}
		d.skipSpace()
		if d.i < len(d.s) && d.s[d.i] == ']' {
			d.i++
			return l, nil
		}
		for {
			d.skipSpace()
			v, err := d.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
			d.skipSpace()
			if d.i >= len(d.s) {
				return nil, d.errorf("unexpected end of array")
			}
			if d.s[d.i] == ',' {
				d.i++
				continue
			}
			if d.s[d.i] == ']' {
				d.i++
				return l, nil
			}
			return nil, d.errorf("expected ',' or ']'")
		}
	case c == '"':
		return d.str()
	case c == 't':
		return d.literal("true", true)
	case c == 'f':
		return d.literal("false", false)
	case c == 'n':
		return d.literal("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return nil, d.errorf("unexpected character %q", c)
	}
}

// FuzzDecodeJSONMatchesGrowingDecoder: the decoder returns the same values
// (key order, repeated keys, numbers, strings) and the same errors as the
// one it replaced, with strings copied or borrowed (decodeBorrowed).
func FuzzDecodeJSONMatchesGrowingDecoder(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"Be brief.\n"},{"role":"user","content":"Hi \u00e9 \ud83d\ude00"}]}`,
		`{"a":1,"b":[1,2.5,-3e2,true,false,null],"a":{"x":"y"},"c":{}}`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k1":0}`,
		`[[[]],[{}],"role","tool_call_id","tool_call_idx","rol\u0065"]`,
		`{"role":"user","content":[{"type":"text","text":"x"}],}`,
		`{"role" "user"}`, `[1,2`, `"unterminated`, `{"a":"\x"}`, "\"ctl\x01\"", `{"a":1}x`,
		`{"role":"assistant\"","name":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := DecodeJSON(data)
		want, wantErr := oldDecodeJSON(data)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, old decoder %v", data, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %#v, old decoder %#v", data, got, want)
		}
		// Borrowed strings (in place or in a reused arena) read the same.
		for range 2 {
			b, arena, bErr := decodeBorrowed(data)
			if (bErr == nil) != (gotErr == nil) || bErr != nil && bErr.Error() != gotErr.Error() {
				t.Fatalf("%q: borrowed decode error %v, DecodeJSON %v", data, bErr, gotErr)
			}
			if !reflect.DeepEqual(b, got) {
				t.Fatalf("%q: borrowed decode %#v, DecodeJSON %#v", data, b, got)
			}
			releaseArena(arena)
		}
	})
}

// TestPlainRunMatchesByteLoop: plainRun, sixteen and eight bytes at a time,
// stops where a byte-by-byte walk of jsonPlain stops, for every byte value
// at every position of two vector blocks, a word and a tail, and from every
// start that shifts them.
func TestPlainRunMatchesByteLoop(t *testing.T) {
	byteLoop := func(s []byte, i int) int {
		for i < len(s) && jsonPlain[s[i]] {
			i++
		}
		return i
	}
	buf := []byte("abcdefgh ijklmno~pqrstuvwABCDEFGH IJKLMNO~PQRS")
	for c := range 256 {
		for at := range buf {
			s := append([]byte(nil), buf...)
			s[at] = byte(c)
			for start := range 19 {
				if got, want := plainRun(s, start), byteLoop(s, start); got != want {
					t.Fatalf("byte %#x at %d, from %d: plainRun = %d, want %d", c, at, start, got, want)
				}
			}
		}
	}
}
