package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/kvroute/kvroute/tokenize"
)

// runTokenize implements `kvroute tokenize`: it encodes text read on stdin
// with a model's tokenizer.json (as vLLM would for /v1/completions) and
// prints the ids as a JSON array. With --jsonl each input line is a JSON
// string and each output line the array of its ids.
func runTokenize(_ context.Context, args []string, std stdio) error {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(std.err)
	dir := fs.String("tokenizer", "", "directory holding tokenizer.json (and tokenizer_config.json), or the tokenizer.json file")
	noSpecial := fs.Bool("no-special-tokens", false, "do not add the post-processor's special tokens (BOS, ...)")
	jsonl := fs.Bool("jsonl", false, "read one JSON string per line, print one JSON array of ids per line")
	// --chat (render a chat request with the model's template, then encode)
	// belongs to the chat-template engine and is added beside these flags.
	fs.Usage = func() {
		fmt.Fprintln(std.err, "usage: kvroute tokenize --tokenizer DIR [--no-special-tokens] [--jsonl] < text")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *dir == "" || fs.NArg() != 0 {
		fs.Usage()
		return errUsage
	}
	tok, err := tokenize.Load(*dir)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(std.out)
	defer out.Flush()
	if !*jsonl {
		text, err := readAll(std.in)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		writeIDs(out, tok.Encode(string(text), !*noSpecial))
		return out.Flush()
	}
	if std.in == nil {
		return errors.New("no standard input")
	}
	sc := bufio.NewScanner(std.in)
	sc.Buffer(make([]byte, 0, 64*1024), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var text string
		if err := json.Unmarshal(sc.Bytes(), &text); err != nil {
			return fmt.Errorf("stdin line %d: want a JSON string: %w", line, err)
		}
		writeIDs(out, tok.Encode(text, !*noSpecial))
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	return out.Flush()
}

// writeIDs prints ids as a compact JSON array and a newline.
func writeIDs(w io.Writer, ids []int) {
	buf := make([]byte, 0, len(ids)*7+3)
	buf = append(buf, '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, ']', '\n')
	w.Write(buf)
}
