package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kvroute/kvroute/chattemplate"
)

// runChatTemplate implements `kvroute chat-template render`: it renders a
// Jinja chat template with a JSON context read from stdin, as transformers
// would, and prints the text exactly (no newline added).
func runChatTemplate(_ context.Context, args []string, io stdio) error {
	usage := func() {
		fmt.Fprintln(io.err, "usage: kvroute chat-template render --template-file F [--now RFC3339] < context.json")
		fmt.Fprintln(io.err, "  context.json: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true, \"bos_token\": \"<s>\", ...}")
	}
	if len(args) == 0 || args[0] != "render" {
		usage()
		return errUsage
	}
	fs := flag.NewFlagSet("chat-template render", flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = usage
	templateFile := fs.String("template-file", "", "Jinja chat template file")
	nowFlag := fs.String("now", "", "clock for strftime_now, RFC 3339 (default: the current time)")
	if err := fs.Parse(args[1:]); err != nil {
		return errUsage
	}
	if *templateFile == "" || fs.NArg() != 0 {
		usage()
		return errUsage
	}
	now := time.Now
	if *nowFlag != "" {
		t, err := time.Parse(time.RFC3339, *nowFlag)
		if err != nil {
			fmt.Fprintf(io.err, "--now: %v\n", err)
			return errUsage
		}
		now = func() time.Time { return t }
	}
	src, err := os.ReadFile(*templateFile)
	if err != nil {
		return err
	}
	tpl, err := chattemplate.Parse(string(src))
	if err != nil {
		return fmt.Errorf("%s: %w", *templateFile, err)
	}
	input, err := readAll(io.in)
	if err != nil {
		return fmt.Errorf("read context: %w", err)
	}
	v, err := chattemplate.DecodeJSON(input)
	if err != nil {
		return fmt.Errorf("context: %w", err)
	}
	d, ok := v.(*chattemplate.Dict)
	if !ok {
		return errors.New("context: not a JSON object")
	}
	ctx := make(map[string]any, d.Len())
	for _, k := range d.Keys() {
		ks, _ := k.(string)
		ctx[ks], _ = d.Get(k)
	}
	out, err := tpl.Render(ctx, chattemplate.RenderOptions{Now: now})
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(io.out, out)
	return err
}

func readAll(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errors.New("no standard input")
	}
	return io.ReadAll(r)
}
