package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// maxEventPayloadBytes bounds what `events decode` reads from stdin.
const maxEventPayloadBytes = 64 << 20

// runEvents implements `kvroute events decode`: it reads one raw vLLM
// KVEventBatch payload (the third ZMQ frame) on stdin and prints it as JSON,
// int hashes as exact integers and bytes hashes as hex strings; `events
// tail` (runEventsTail) reads them from an engine.
func runEvents(ctx context.Context, args []string, io stdio) error {
	usage := func() {
		fmt.Fprintln(io.err, "usage: kvroute events decode [--hex] [--pretty] < payload")
		fmt.Fprintln(io.err, "       kvroute events tail --events ADDR [--replay ADDR] [--count N | --for D]  (kvroute events tail --help)")
		fmt.Fprintln(io.err, "  payload: one msgpack KVEventBatch as vLLM publishes it (the third frame of [topic, seq, payload]).")
		fmt.Fprintln(io.err, "  To capture one from a running engine (its kv_events_config endpoint):")
		fmt.Fprintln(io.err, "    kvroute events tail --events tcp://HOST:5557 --count 1 --payload-hex | jq -r .payload_hex > batch.hex")
		fmt.Fprintln(io.err, "    kvroute events decode --hex --pretty < batch.hex")
		fmt.Fprintln(io.err, "  (events tail prints the batches decoded already; the output contains prompt token ids.)")
	}
	if len(args) > 0 && args[0] == "tail" {
		return runEventsTail(ctx, args[1:], io)
	}
	if len(args) == 0 || args[0] != "decode" {
		usage()
		return errUsage
	}
	fs := flag.NewFlagSet("events decode", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = usage
	isHex := fs.Bool("hex", false, "stdin holds the payload as hex text (whitespace ignored)")
	pretty := fs.Bool("pretty", false, "indent the JSON")
	if err := fs.Parse(args[1:]); err != nil {
		return errUsage
	}
	if fs.NArg() != 0 {
		usage()
		return errUsage
	}
	payload, err := readAllLimited(io.in, maxEventPayloadBytes)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	if *isHex {
		payload, err = hex.DecodeString(string(bytes.Join(bytes.Fields(payload), nil)))
		if err != nil {
			return fmt.Errorf("stdin: --hex: %w", err)
		}
	}
	batch, err := vllmevent.DecodeBatch(payload)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(io.out)
	if *pretty {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(batch)
}

func readAllLimited(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("payload larger than %d bytes", limit)
	}
	return b, nil
}
