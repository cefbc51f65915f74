package testdata

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// MsgpackMap is an ordered msgpack map for Msgpack: keys and values
// alternate, and the encoding keeps their order (vLLM's encoder does).
type MsgpackMap []any

// Msgpack encodes v one after the other as msgpack, the way the KV-event
// tests build payloads: a MsgpackMap is a map in its own order, an []any an
// array, anything else msgpack's own encoding. It fails the test on error.
func Msgpack(tb testing.TB, v ...any) []byte {
	tb.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	for _, x := range v {
		if err := encodeMsgpack(e, x); err != nil {
			tb.Fatal(err)
		}
	}
	return buf.Bytes()
}

func encodeMsgpack(e *msgpack.Encoder, v any) error {
	switch v := v.(type) {
	case MsgpackMap:
		if err := e.EncodeMapLen(len(v) / 2); err != nil {
			return err
		}
		for _, x := range v {
			if err := encodeMsgpack(e, x); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := e.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := encodeMsgpack(e, x); err != nil {
				return err
			}
		}
		return nil
	default:
		return e.Encode(v)
	}
}

// Unhex decodes a golden file's hex string, failing the test on error.
func Unhex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
