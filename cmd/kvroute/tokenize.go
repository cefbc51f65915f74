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
	"time"

	"github.com/kvroute/kvroute/chattemplate"
	"github.com/kvroute/kvroute/chattemplate/modelchat"
	"github.com/kvroute/kvroute/tokenize"
)

// runTokenize implements `kvroute tokenize`: it encodes text read on stdin
// with a model's tokenizer.json (as vLLM would for /v1/completions) and
// prints the ids as a JSON array. With --jsonl each input line is a JSON
// string and each output line the array of its ids. With --chat stdin is an
// OpenAI chat completions body, rendered with the model's chat template and
// encoded as vLLM's chat endpoint does; it prints {"prompt": text, "ids": [...]}.
func runTokenize(_ context.Context, args []string, std stdio) error {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(std.err)
	dir := fs.String("tokenizer", "", "directory holding tokenizer.json (and tokenizer_config.json), or the tokenizer.json file")
	noSpecial := fs.Bool("no-special-tokens", false, "do not add the post-processor's special tokens (BOS, ...); text and --jsonl modes")
	jsonl := fs.Bool("jsonl", false, "read one JSON string per line, print one JSON array of ids per line")
	chat := fs.Bool("chat", false, "stdin is a /v1/chat/completions JSON body: render the chat template, then encode (add_special_tokens from the body, default false); prints {\"prompt\": ..., \"ids\": [...]}")
	templateFile := fs.String("chat-template", "", "with --chat: Jinja chat template file to use instead of the tokenizer's")
	nowFlag := fs.String("now", "", "with --chat: clock for strftime_now, RFC 3339 (default: the current time)")
	fs.Usage = func() {
		fmt.Fprintln(std.err, "usage: kvroute tokenize --tokenizer DIR [--no-special-tokens] [--jsonl] < text")
		fmt.Fprintln(std.err, "       kvroute tokenize --tokenizer DIR --chat [--chat-template FILE] [--now RFC3339] < request.json")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	chatOnly := *templateFile != "" || *nowFlag != ""
	if *dir == "" || fs.NArg() != 0 || (*chat && (*jsonl || *noSpecial)) || (chatOnly && !*chat) {
		fs.Usage()
		return errUsage
	}
	now := time.Now
	if *nowFlag != "" {
		t, err := time.Parse(time.RFC3339, *nowFlag)
		if err != nil {
			fmt.Fprintf(std.err, "--now: %v\n", err)
			return errUsage
		}
		now = func() time.Time { return t }
	}
	tok, err := tokenize.Load(*dir)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(std.out)
	defer out.Flush()
	switch {
	case *chat:
		body, err := readAll(std.in)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		prompt, ids, err := encodeChat(tok, *dir, *templateFile, now, body)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(out)
		enc.SetEscapeHTML(false) // <|im_start|> as is
		if err := enc.Encode(struct {
			Prompt string `json:"prompt"`
			IDs    []int  `json:"ids"`
		}{prompt, ids}); err != nil {
			return err
		}
		return out.Flush()
	case !*jsonl:
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

// encodeChat renders a chat completions body with the model's chat template
// and encodes it with add_special_tokens as the body says (default false),
// as vLLM's /v1/chat/completions does. The template is templateFile when
// given, else chat_template.jinja beside tokenizer_config.json (transformers
// >= 4.43 saves it there, and it wins), else tokenizer_config.json's
// chat_template — the order `kvroute serve` uses for a pool.
func encodeChat(tok *tokenize.Tokenizer, tokenizerPath, templateFile string, now func() time.Time, body []byte) (string, []int, error) {
	templates, err := modelchat.Load(tok, tokenizerPath, templateFile, now)
	if err != nil {
		return "", nil, err
	}
	req, err := chattemplate.ParseChatRequest(body)
	if err != nil {
		return "", nil, err
	}
	text, err := templates.RenderRequest(req)
	if err != nil {
		return "", nil, err
	}
	ids := tok.Encode(text, req.AddSpecialTokens)
	if ids == nil {
		ids = []int{} // print [], not null
	}
	return text, ids, nil
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
