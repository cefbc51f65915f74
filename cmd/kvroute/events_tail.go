package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvroute/kvroute/config"
	"github.com/kvroute/kvroute/ingest/vllmevent"
	"github.com/kvroute/kvroute/internal/zmtpcap"
)

// defaultTailCount bounds `events tail` when neither --count nor --for is given.
const defaultTailCount = 10

// replayEnd is the seq of the frame that ends a replay (-1 as 8 bytes,
// vllm/distributed/kv_events.py ZmqEventPublisher.END_SEQ).
const replayEnd = ^uint64(0)

// tailLine is one batch as `events tail` prints it.
type tailLine struct {
	Seq    uint64                `json:"seq"`
	Topic  string                `json:"topic,omitempty"`
	Source string                `json:"source"` // "replay" or "live"
	Batch  *vllmevent.EventBatch `json:"batch,omitempty"`
	Error  string                `json:"error,omitempty"`
	// PayloadHex is the raw payload (--payload-hex), for `events decode --hex`.
	PayloadHex string `json:"payload_hex,omitempty"`
}

func tailUsage(io stdio, fs *flag.FlagSet) func() {
	return func() {
		fmt.Fprintln(io.err, "usage: kvroute events tail --events ADDR [--replay ADDR] [--topic T] [--count N] [--for D] [--pretty] [--payload-hex]")
		fmt.Fprintln(io.err, "Connects to an engine's KV-event PUB socket (vLLM's kv_events_config endpoint, e.g.")
		fmt.Fprintln(io.err, "tcp://10.0.0.5:5557) and prints each batch it publishes as one JSON line: seq, topic,")
		fmt.Fprintln(io.err, "and the decoded batch. With --replay (the replay_endpoint), it first prints the batches")
		fmt.Fprintln(io.err, "the engine still buffers. It stops after --count batches (10 when neither bound is")
		fmt.Fprintln(io.err, "given) or after --for, whichever comes first. The output contains prompt token ids")
		fmt.Fprintln(io.err, "(BlockStored token_ids): it is for your terminal, not for logs.")
		fs.PrintDefaults()
	}
}

// runEventsTail is `kvroute events tail`.
func runEventsTail(ctx context.Context, args []string, io stdio) error {
	fs := flag.NewFlagSet("events tail", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = tailUsage(io, fs)
	events := fs.String("events", "", "the engine's KV-event PUB `endpoint`, tcp://HOST:PORT or ipc://PATH")
	replay := fs.String("replay", "", "the engine's replay ROUTER `endpoint`: print its buffered batches first")
	topic := fs.String("topic", "", "subscribe to topics starting with this `prefix` (vLLM's default topic is empty)")
	count := fs.Int("count", 0, "stop after this many batches (default 10 without --for)")
	dur := fs.Duration("for", 0, "stop after this long (e.g. 30s)")
	maxBytes := fs.Int("max-message-bytes", config.Default().Ingest.MaxMessageBytes, "refuse a message announcing more than this many bytes (ingest.max_message_bytes)")
	pretty := fs.Bool("pretty", false, "indent the JSON")
	withHex := fs.Bool("payload-hex", false, "add each raw payload as hex (payload_hex), the input of events decode --hex")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() != 0 || *events == "" || *count < 0 || *dur < 0 || *maxBytes <= 0 {
		fs.Usage()
		return errUsage
	}
	if *count == 0 && *dur == 0 {
		*count = defaultTailCount
	}
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A frame announcing more than the limit closes the connection before it
	// is read; Recv then fails with the lengths, and the tail ends with it.
	capped := zmtpcap.Context(ctx, &zmtpcap.Limit{MaxMessageBytes: uint64(*maxBytes)})

	enc := json.NewEncoder(io.out)
	if *pretty {
		enc.SetIndent("", "  ")
	}
	printed := 0
	emit := func(seq uint64, topic, source string, payload []byte) error {
		line := tailLine{Seq: seq, Topic: topic, Source: source}
		b, err := vllmevent.DecodeBatch(payload)
		if err != nil {
			line.Error = fmt.Sprintf("undecodable payload of %d bytes: %v", len(payload), err)
		} else {
			line.Batch = b
		}
		if *withHex {
			line.PayloadHex = hex.EncodeToString(payload)
		}
		printed++
		return enc.Encode(line)
	}
	done := func() bool { return *count > 0 && printed >= *count }

	// Subscribe before asking for the replay, so nothing falls between them.
	sub := zmq4.NewSub(capped, zmtpcap.Quiet, zmq4.WithDialerTimeout(5*time.Second))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, *topic); err != nil {
		return err
	}
	if err := sub.Dial(zmtpcap.Endpoint(*events)); err != nil {
		return fmt.Errorf("--events %s: %w", *events, err)
	}
	type live struct {
		frames [][]byte
		err    error
	}
	msgs := make(chan live, 64)
	go func() {
		for {
			msg, err := sub.Recv()
			if err == nil && msg.Type == zmq4.CmdMsg {
				continue
			}
			select {
			case msgs <- live{msg.Frames, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var replayed uint64
	haveReplayed := false
	if *replay != "" {
		err := fetchReplay(capped, *replay, func(seq uint64, topic string, payload []byte) error {
			if done() {
				return errStop
			}
			replayed, haveReplayed = seq, true
			return emit(seq, topic, "replay", payload)
		})
		if err != nil && !errors.Is(err, errStop) {
			return fmt.Errorf("--replay %s: %w", *replay, err)
		}
	}
	for !done() {
		select {
		case <-ctx.Done():
			return nil // --for elapsed, or interrupted
		case m := <-msgs:
			if m.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("--events %s: %w", *events, m.err)
			}
			if len(m.frames) != 3 || len(m.frames[1]) != 8 {
				fmt.Fprintf(io.err, "kvroute events tail: message of %d frames, want [topic, 8-byte seq, payload]\n", len(m.frames))
				continue
			}
			seq := binary.BigEndian.Uint64(m.frames[1])
			if haveReplayed && seq <= replayed {
				continue // printed from the replay already
			}
			if err := emit(seq, string(m.frames[0]), "live", m.frames[2]); err != nil {
				return err
			}
		}
	}
	return nil
}

var errStop = errors.New("enough batches")

// fetchReplay asks a ROUTER replay endpoint for every buffered batch from
// seq 0 on, as ingest does: a DEALER sends ["", seq]; replies are
// ["", topic, seq, payload] (or ["", seq, payload] from older vLLM) until the
// end marker (seq -1 or an empty payload).
func fetchReplay(ctx context.Context, endpoint string, fn func(seq uint64, topic string, payload []byte) error) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmtpcap.Quiet, zmq4.WithDialerTimeout(5*time.Second))
	defer d.Close()
	if err := d.Dial(zmtpcap.Endpoint(endpoint)); err != nil {
		return err
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, binary.BigEndian.AppendUint64(nil, 0))); err != nil {
		return err
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			return err
		}
		if msg.Type == zmq4.CmdMsg {
			continue
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		var topic string
		switch len(f) {
		case 3:
			topic, f = string(f[0]), f[1:]
		case 2:
		default:
			return fmt.Errorf("replay reply of %d frames", len(msg.Frames))
		}
		if len(f[0]) != 8 {
			return errors.New("replay reply without an 8-byte seq")
		}
		seq := binary.BigEndian.Uint64(f[0])
		if seq == replayEnd || len(f[1]) == 0 {
			return nil
		}
		if err := fn(seq, topic, f[1]); err != nil {
			return err
		}
	}
}
