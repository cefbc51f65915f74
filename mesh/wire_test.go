package mesh

import (
	"bytes"
	"encoding/binary"
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

// FuzzReceive: any sequence of messages on two streams, booked through the
// whole receive path, keeps every bound — the books match the mesh's count,
// the count stays within max_requests and each sender within its share,
// tokens and keys within the pool's bounds — and panics nowhere.
func FuzzReceive(f *testing.F) {
	h := func(sender, seq uint64) header { return header{sender: sender, seq: seq, layout: 77} }
	var seed []byte
	for _, msg := range [][]byte{
		appendHeader(nil, kindHello, h(5, 1)),
		appendBegin(nil, h(5, 2), 1, 4e9, 2, "p", "e", []index.BlockKey{1, 2, 3, 4, 5, 6}),
		appendBegin(nil, h(5, 3), 2, 10, 0, "p", "nobody", nil),
		appendEnd(nil, h(5, 4), 1),
		appendEnd(nil, h(6, 1), 9),
	} {
		seed = binary.LittleEndian.AppendUint16(seed, uint16(len(msg)))
		seed = append(seed, msg...)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, in []byte) {
		b := &books{}
		o := testOptions()
		o.Insecure, o.MaxRequests, o.Addresses = true, 8, []string{"127.0.0.1:1", "127.0.0.1:2"}
		o.Pools = map[string]PoolBounds{"p": {MaxTokens: 1000, MaxKeys: 4}}
		m, err := New(o, b)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var streams [2]stream
		for i := 0; len(in) >= 2; i++ {
			n := int(binary.LittleEndian.Uint16(in))
			in = in[2:]
			n = min(n, len(in))
			m.receive(in[:n], &streams[i%2])
			in = in[n:]
		}
		begun, open := b.state()
		m.mu.Lock()
		defer m.mu.Unlock()
		if open != m.booked || m.booked > o.MaxRequests {
			t.Fatalf("books hold %d, the mesh counts %d (max %d)", open, m.booked, o.MaxRequests)
		}
		for _, p := range m.peers {
			if len(p.reqs) > m.perSender {
				t.Fatalf("a sender holds %d bookings, share %d", len(p.reqs), m.perSender)
			}
		}
		for _, w := range begun {
			if w.Pool == "p" && (w.Uncached > 1000 || len(w.Keys) > 4 || w.Matched > len(w.Keys)) {
				t.Fatalf("booked %d tokens, %d keys, %d matched", w.Uncached, len(w.Keys), w.Matched)
			}
		}
	})
}
