package mesh

import (
	"bytes"
	"errors"
	"testing"

	"github.com/kvroute/kvroute/index"
)

func TestBeginRoundTrips(t *testing.T) {
	keys := []index.BlockKey{1, 1 << 63, 42}
	b := appendBegin(nil, header{sender: 7, seq: 9, layout: 11, sent: -5}, 13, 2048, 2, "pool-a", "vllm-0/0", keys)
	if len(b) != beginLen("pool-a", "vllm-0/0", len(keys)) {
		t.Fatalf("begin of %d bytes, beginLen says %d", len(b), beginLen("pool-a", "vllm-0/0", len(keys)))
	}
	var m message
	if err := decode(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.kind != kindBegin || m.sender != 7 || m.seq != 9 || m.layout != 11 || m.sent != -5 || m.request != 13 || m.uncached != 2048 || m.matched != 2 ||
		string(m.pool) != "pool-a" || string(m.endpoint) != "vllm-0/0" || len(m.keys) != 3 || m.keys[1] != 1<<63 {
		t.Fatalf("decoded %+v", m)
	}
	if err := decode(appendEnd(nil, header{sender: 7, seq: 10, layout: 11}, 13), &m); err != nil || m.kind != kindEnd || m.request != 13 || len(m.keys) != 0 {
		t.Fatalf("end: %+v, %v", m, err)
	}
	if err := decode(appendHeader(nil, kindHello, header{sender: 7, seq: 11, layout: 11}), &m); err != nil || m.kind != kindHello || m.seq != 11 {
		t.Fatalf("hello: %+v, %v", m, err)
	}
}

func TestDecodeRefusesMalformedMessages(t *testing.T) {
	good := appendBegin(nil, header{sender: 7, seq: 9, layout: 11}, 13, 100, 1, "p", "e", []index.BlockKey{5, 6})
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShort},
		{"header cut", good[:headerLen-1], errShort},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), errMagic},
		{"version", mut(func(b []byte) []byte { b[4] = 2; return b }), errVersion},
		{"reserved", mut(func(b []byte) []byte { b[7] = 1; return b }), errReserved},
		{"kind", mut(func(b []byte) []byte { b[5] = 9; return b }), errKind},
		{"key cut", good[:len(good)-1], errLength},
		{"key extra", append(bytes.Clone(good), 0), errLength},
		{"key count huge", mut(func(b []byte) []byte { b[56], b[57], b[58], b[59] = 0xff, 0xff, 0xff, 0xff; return b }), errLength},
		{"matched over keys", mut(func(b []byte) []byte { b[52] = 3; return b }), errMatched},
		{"empty pool name", mut(func(b []byte) []byte { b[beginFixed] = 0; return b }), errName},
		{"pool name past the end", mut(func(b []byte) []byte { b[beginFixed] = 255; return b }), errName},
		{"begin without names", good[:beginFixed], errShort},
		{"end too long", append(appendEnd(nil, header{sender: 1, seq: 1, layout: 1}, 1), 0), errLength},
		{"hello too long", append(appendHeader(nil, kindHello, header{sender: 1, seq: 1, layout: 1}), 0), errLength},
	}
	for _, c := range cases {
		var m message
		if err := decode(c.b, &m); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzDecode: any bytes decode without panicking, and what decodes is the
// message its fields re-encode to (one encoding per message).
func FuzzDecode(f *testing.F) {
	f.Add(appendBegin(nil, header{sender: 7, seq: 9, layout: 11, sent: 1}, 13, 100, 1, "p", "e", []index.BlockKey{5, 6}))
	f.Add(appendEnd(nil, header{sender: 1, seq: 2, layout: 3}, 4))
	f.Add(appendHeader(nil, kindHello, header{sender: 1, seq: 2, layout: 3}))
	f.Add([]byte("KVRM"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m message
		if decode(b, &m) != nil {
			return
		}
		var re []byte
		switch m.kind {
		case kindHello:
			re = appendHeader(nil, kindHello, m.header)
		case kindEnd:
			re = appendEnd(nil, m.header, m.request)
		case kindBegin:
			re = appendBegin(nil, m.header, m.request, m.uncached, m.matched, string(m.pool), string(m.endpoint), m.keys)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("decoded %+v re-encodes differently", m)
		}
	})
}
