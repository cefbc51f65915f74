package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvroute/kvroute/internal/testdata"
)

// TestEventsDecodePrintsVectorPayloads decodes vLLM's captured payloads (raw
// and --hex) and checks the printed JSON against the vectors' decoded views:
// exact integer hashes, hex bytes hashes, the fields operators look at.
func TestEventsDecodePrintsVectorPayloads(t *testing.T) {
	v := testdata.LoadKVEventVectors(t)
	checked := 0
	for _, sc := range v.Scenarios {
		for _, st := range sc.Steps {
			raw, err := hex.DecodeString(st.PayloadHex)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range []struct {
				args  []string
				stdin []byte
			}{{[]string{"events", "decode"}, raw}, {[]string{"events", "decode", "--hex", "--pretty"}, []byte(st.PayloadHex + "\n")}} {
				var out, errw bytes.Buffer
				if code := run(context.Background(), in.args, stdio{bytes.NewReader(in.stdin), &out, &errw}); code != 0 {
					t.Fatalf("%s: exit %d: %s", st.Step, code, errw.String())
				}
				var got struct {
					TS     json.Number      `json:"ts"`
					Rank   *int             `json:"data_parallel_rank"`
					Events []map[string]any `json:"events"`
				}
				dec := json.NewDecoder(&out)
				dec.UseNumber()
				if err := dec.Decode(&got); err != nil {
					t.Fatalf("%s: %v\n%s", st.Step, err, out.String())
				}
				var decoded []json.RawMessage // [ts, events, data_parallel_rank]
				if err := json.Unmarshal(st.Decoded, &decoded); err != nil || len(decoded) != 3 {
					t.Fatalf("%s: payload_decoded: %v", st.Step, err)
				}
				var want []map[string]any
				wd := json.NewDecoder(bytes.NewReader(decoded[1]))
				wd.UseNumber()
				if err := wd.Decode(&want); err != nil {
					t.Fatal(err)
				}
				if string(got.TS) != string(decoded[0]) || got.Rank == nil || *got.Rank != 0 || len(got.Events) != len(want) {
					t.Fatalf("%s: got %+v", st.Step, got)
				}
				for i, w := range want {
					for _, field := range []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_name", "medium", "group_idx"} {
						wv, ok := w[field]
						if !ok {
							continue
						}
						if g, w := jsonString(t, got.Events[i][field]), jsonString(t, unbinHex(wv)); g != w {
							t.Errorf("%s event %d %s: got %s want %s", st.Step, i, field, g, w)
						}
					}
				}
				checked++
			}
		}
	}
	if checked != 30 {
		t.Errorf("checked %d payloads, want 30", checked)
	}
}

// unbinHex turns the vectors' {"bin": "<hex>"} into the hex string the CLI prints.
func unbinHex(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if h, ok := v["bin"]; ok {
			return h
		}
	case []any:
		out := make([]any, len(v))
		for i := range v {
			out[i] = unbinHex(v[i])
		}
		return out
	}
	return v
}

func jsonString(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEventsDecodeRejectsGarbageAndBadUsage(t *testing.T) {
	code, _, errs := runCLI(t, "not msgpack", "events", "decode")
	if code != 1 || !strings.Contains(errs, "kvroute events: malformed KV event batch") {
		t.Errorf("garbage: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := runCLI(t, "zz", "events", "decode", "--hex"); code != 1 {
		t.Errorf("bad hex: exit %d", code)
	}
	if code, _, _ := runCLI(t, "", "events"); code != 2 {
		t.Errorf("no verb: exit %d", code)
	}
	if code, _, _ := runCLI(t, "", "events", "decode", "--nope"); code != 2 {
		t.Errorf("bad flag: exit %d", code)
	}
}
