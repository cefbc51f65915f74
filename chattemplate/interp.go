package chattemplate

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// Default render limits. A chat template rendering a long conversation uses
// a few thousand steps; these bounds only stop runaway or hostile templates.
const (
	DefaultMaxSteps      = 2_000_000
	DefaultMaxOutputSize = 32 << 20
	maxCallDepth         = 64
	maxRange             = 100_000 // jinja2.sandbox.MAX_RANGE
)

// Template is a parsed chat template, safe for concurrent Render calls.
type Template struct {
	body []node
}

// RenderOptions tune one render.
type RenderOptions struct {
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
	// MaxSteps bounds the work of one render (statements, loop iterations,
	// calls, filter items); 0 means DefaultMaxSteps.
	MaxSteps int
	// MaxOutputSize bounds the size in bytes of the output and of any string
	// built while rendering; 0 means DefaultMaxOutputSize.
	MaxOutputSize int
	// SizeHint is the expected output size in bytes: the output buffer
	// starts at that size (capped by MaxOutputSize) instead of growing.
	SizeHint int
}

// Parse lexes and parses a Jinja2 template with the settings transformers
// uses for chat templates (trim_blocks, lstrip_blocks, loopcontrols,
// {% generation %}).
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	body, err := parseTemplate(toks)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Render renders the template with ctx as its global variables. Values may
// be engine values (DecodeJSON, *Dict, *List, ...) or plain Go data, which
// FromGo converts. A template that calls raise_exception returns an *Error
// of Kind "TemplateError"; Render never panics on any template or context.
func (t *Template) Render(ctx map[string]any, opts RenderOptions) (out string, err error) {
	b, err := t.AppendRender(nil, ctx, opts)
	if err != nil {
		return "", err
	}
	// b is this render's own buffer and is never written again.
	return unsafe.String(unsafe.SliceData(b), len(b)), nil
}

// AppendRender is Render appending the output to dst, so a caller can
// render into one reused buffer. On error the returned slice is dst with
// whatever was rendered before the error appended.
func (t *Template) AppendRender(dst []byte, ctx map[string]any, opts RenderOptions) ([]byte, error) {
	st := newState(opts)
	for k, v := range ctx {
		st.vars.set(k, FromGo(v))
	}
	return st.render(t, dst, opts.SizeHint)
}

// stateWithRoom is a render's state with its output buffer, its root
// frame and room for its first global variables: one allocation a render.
type stateWithRoom struct {
	state
	out   outBuf
	root  loopFrame
	names [maxListedVars]string
	vals  [maxListedVars]Value
}

// newState returns a render's state for opts, with no variables yet.
func newState(opts RenderOptions) *state {
	b := &stateWithRoom{}
	st := &b.state
	st.maxSteps, st.maxBytes, st.now = opts.MaxSteps, opts.MaxOutputSize, opts.Now
	if st.maxSteps <= 0 {
		st.maxSteps = DefaultMaxSteps
	}
	if st.maxBytes <= 0 {
		st.maxBytes = DefaultMaxOutputSize
	}
	if st.now == nil {
		st.now = time.Now
	}
	st.vars.names, st.vars.vals = b.names[:0], b.vals[:0]
	st.out = &b.out
	b.root.scope = scope{names: b.root.names[:0], vals: b.root.vals[:0]}
	st.root = &b.root.scope
	return st
}

// render runs t with st's variables, appending to dst.
func (st *state) render(t *Template, dst []byte, sizeHint int) ([]byte, error) {
	out := st.out
	*out = outBuf{b: dst, base: len(dst)}
	if sizeHint > 0 {
		out.b = slices.Grow(out.b, min(sizeHint, st.maxBytes))
	}
	_, err := st.execBody(t.body, st.root)
	return out.b, err
}

// maxListedVars bounds the global variables a render searches linearly;
// past it they move to a map (a request's chat_template_kwargs may hold
// any number).
const maxListedVars = 8

// renderVars are a render's global variables (the context): a short list
// searched linearly, or a map once there are more than maxListedVars.
type renderVars struct {
	names []string
	vals  []Value
	m     map[string]Value
}

// set stores v under name, replacing an earlier value.
func (rv *renderVars) set(name string, v Value) {
	if rv.m != nil {
		rv.m[name] = v
		return
	}
	for i, n := range rv.names {
		if n == name {
			rv.vals[i] = v
			return
		}
	}
	if len(rv.names) == maxListedVars {
		rv.m = make(map[string]Value, 2*maxListedVars)
		for i, n := range rv.names {
			rv.m[n] = rv.vals[i]
		}
		rv.m[name] = v
		clear(rv.vals)
		rv.names, rv.vals = rv.names[:0], rv.vals[:0]
		return
	}
	rv.names = append(rv.names, name)
	rv.vals = append(rv.vals, v)
}

func (rv *renderVars) get(name string) (Value, bool) {
	if rv.m != nil {
		v, ok := rv.m[name]
		return v, ok
	}
	for i, n := range rv.names {
		if n == name {
			return rv.vals[i], true
		}
	}
	return nil, false
}

// outBuf is a render's output (or a captured block's): the bytes after
// base in b.
type outBuf struct {
	b    []byte
	base int
}

// Len returns the bytes written so far.
func (o *outBuf) Len() int { return len(o.b) - o.base }

func (o *outBuf) WriteString(s string) { o.b = append(o.b, s...) }

// String returns the captured text without a copy; a captured block's
// buffer is its own and is not written after it is read.
func (o *outBuf) String() string {
	t := o.b[o.base:]
	return unsafe.String(unsafe.SliceData(t), len(t))
}

// scope holds the variables assigned in one Jinja2 frame. Frames are small,
// so a slice beats a map.
type scope struct {
	parent *scope
	names  []string
	vals   []Value
}

// loopFrame is a loop's scope with room for four variables, one allocation.
type loopFrame struct {
	scope
	names [4]string
	vals  [4]Value
}

func (s *scope) lookup(name string) (Value, bool) {
	for f := s; f != nil; f = f.parent {
		for i := len(f.names) - 1; i >= 0; i-- {
			if f.names[i] == name {
				return f.vals[i], true
			}
		}
	}
	return nil, false
}

func (s *scope) set(name string, v Value) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

type ctl uint8

const (
	ctlNone ctl = iota
	ctlBreak
	ctlContinue
)

type state struct {
	steps     int
	maxSteps  int
	maxBytes  int
	callDepth int
	now       func() time.Time
	vars      renderVars // the context: the template's global variables
	out       *outBuf
	root      *scope // the template's top-level frame
}

func (st *state) step(n int) error {
	st.steps += n
	if st.steps > st.maxSteps {
		return errorf("LimitError", "more than %d render steps", st.maxSteps)
	}
	return nil
}

// checkSize fails when a string of n bytes would exceed the size budget.
func (st *state) checkSize(n int) error {
	if n > st.maxBytes {
		return errorf("LimitError", "value of %d bytes exceeds the %d byte limit", n, st.maxBytes)
	}
	return nil
}

func (st *state) write(s string) error {
	if err := st.checkSize(st.out.Len() + len(s)); err != nil {
		return err
	}
	st.out.WriteString(s)
	return nil
}

// maxSumSpine bounds the '+' chain writeSum flattens; a longer chain's
// left part is evaluated as usual.
const maxSumSpine = 16

// writeSum outputs {{ a + b + ... }}. Chat templates concatenate a message's
// content with its role markers this way; while the operands are strings
// their pieces are written one after the other instead of building each
// partial concatenation (a copy of the content per '+'). Operands are
// evaluated left to right and every partial sum is size-checked as evalBin
// and add do; at the first operand that is not a string the pieces are
// joined and the sum continues with add, so the output and any error are
// exactly eval's.
func (st *state) writeSum(e *binExpr, sc *scope) error {
	var spineBuf [maxSumSpine]expr
	spine := spineBuf[:0]
	x := expr(e)
	for len(spine) < maxSumSpine {
		b, ok := x.(*binExpr)
		if !ok || b.op != "+" {
			break
		}
		spine = append(spine, b.r)
		x = b.l
	}
	first, err := st.eval(x, sc)
	if err != nil {
		return err
	}
	var pieceBuf [maxSumSpine + 1]string
	pieces := pieceBuf[:0]
	var acc Value // the sum so far once an operand is not a string
	total := 0
	joined := false
	if s, ok := first.(string); ok {
		pieces, total = append(pieces, s), len(s)
	} else {
		acc, joined = first, true
	}
	for i := len(spine) - 1; i >= 0; i-- {
		r, err := st.eval(spine[i], sc)
		if err != nil {
			return err
		}
		if !joined {
			if s, ok := r.(string); ok {
				total += len(s)
				if err := st.checkSize(total); err != nil {
					return err
				}
				pieces = append(pieces, s)
				continue
			}
			acc, joined = strings.Join(pieces, ""), true
		}
		if acc, err = st.add(acc, r); err != nil {
			return err
		}
	}
	if joined {
		return st.write(strValue(acc))
	}
	if err := st.checkSize(st.out.Len() + total); err != nil {
		return err
	}
	for _, s := range pieces {
		st.out.WriteString(s)
	}
	return nil
}

// capture renders body into a fresh buffer and returns its text.
func (st *state) capture(body []node, sc *scope) (string, error) {
	saved := st.out
	var b outBuf
	st.out = &b
	_, err := st.execBody(body, sc)
	st.out = saved
	return b.String(), err
}

// captureFiltered renders body in a child scope of sc and passes its text
// through filters in turn ({% set x | f %} and {% filter f %} blocks).
func (st *state) captureFiltered(body []node, filters []*filterExpr, sc *scope) (Value, error) {
	text, err := st.capture(body, &scope{parent: sc})
	if err != nil {
		return nil, err
	}
	var v Value = text
	for _, f := range filters {
		if v, err = st.applyFilter(f, v, sc); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (st *state) lookup(name string, sc *scope) Value {
	if v, ok := st.find(name, sc); ok {
		return v
	}
	return undefinedName(name)
}

// find looks name up in the frames, the context and the globals, in that
// order.
func (st *state) find(name string, sc *scope) (Value, bool) {
	if v, ok := sc.lookup(name); ok {
		return v, true
	}
	if v, ok := st.vars.get(name); ok {
		return v, true
	}
	v, ok := globals[name]
	return v, ok
}

func (st *state) execBody(body []node, sc *scope) (ctl, error) {
	for _, n := range body {
		c, err := st.exec(n, sc)
		if err != nil || c != ctlNone {
			return c, err
		}
	}
	return ctlNone, nil
}

func (st *state) exec(n node, sc *scope) (ctl, error) {
	if err := st.step(1); err != nil {
		return ctlNone, err
	}
	switch n := n.(type) {
	case *textNode:
		return ctlNone, st.write(n.text)
	case *outputNode:
		if be, ok := n.e.(*binExpr); ok && be.op == "+" {
			return ctlNone, st.writeSum(be, sc)
		}
		v, err := st.eval(n.e, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.write(strValue(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := st.eval(c, sc)
			if err != nil {
				return ctlNone, err
			}
			if truthy(v) {
				return st.execBody(n.bodies[i], sc)
			}
		}
		return st.execBody(n.els, sc)
	case *forNode:
		return ctlNone, st.execFor(n, sc)
	case *setNode:
		v, err := st.eval(n.value, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.assign(n.target, v, sc)
	case *setBlockNode:
		v, err := st.captureFiltered(n.body, n.filters, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.assign(n.target, v, sc)
	case *macroNode:
		sc.set(n.name, &Macro{name: n.name, params: n.params, defs: n.defs, body: n.body, closure: sc})
		return ctlNone, nil
	case *callBlockNode:
		caller := &Macro{name: "caller", params: n.params, defs: n.defs, body: n.body, closure: sc}
		v, err := st.evalCall(n.call, sc, caller)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.write(strValue(v))
	case *filterBlockNode:
		v, err := st.captureFiltered(n.body, n.filters, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.write(strValue(v))
	case *withNode:
		inner := &scope{parent: sc}
		for i, t := range n.targets {
			v, err := st.eval(n.values[i], sc)
			if err != nil {
				return ctlNone, err
			}
			if err := st.assign(t, v, inner); err != nil {
				return ctlNone, err
			}
		}
		return st.execBody(n.body, inner)
	case *scopeNode:
		text, err := st.capture(n.body, &scope{parent: sc})
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, st.write(text)
	case *breakNode:
		return ctlBreak, nil
	case *continueNode:
		return ctlContinue, nil
	}
	return ctlNone, errorf("RuntimeError", "unknown node %T", n)
}

func (st *state) assign(t assignTarget, v Value, sc *scope) error {
	switch {
	case t.isTup:
		items, err := st.iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.tuple) {
			if len(items) > len(t.tuple) {
				return errorf("ValueError", "too many values to unpack (expected %d)", len(t.tuple))
			}
			return errorf("ValueError", "not enough values to unpack (expected %d, got %d)", len(t.tuple), len(items))
		}
		for i, sub := range t.tuple {
			if err := st.assign(sub, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case t.attr != "":
		obj := st.lookup(t.name, sc)
		ns, ok := obj.(*Namespace)
		if !ok {
			return errorf("TemplateRuntimeError", "cannot assign attribute on non-namespace object")
		}
		ns.attrs.Set(t.attrKey, v)
		return nil
	default:
		sc.set(t.name, v)
		return nil
	}
}

// loopObj is the `loop` variable inside a for loop.
type loopObj struct {
	index0 int
	items  []Value
	depth  int
	last   Value // for loop.changed
	seen   bool
	node   *forNode // set for recursive loops: loop(x) renders node over x
	sc     *scope
}

// loopWithFrame is a loop's object and its frame, allocated together.
type loopWithFrame struct {
	loopObj
	frame loopFrame
}

func (st *state) execFor(n *forNode, sc *scope) error {
	iv, err := st.eval(n.iter, sc)
	if err != nil {
		return err
	}
	return st.runLoop(n, sc, iv, 1)
}

// runLoop runs a for loop over iv; depth is loop.depth (above 1 only inside
// loop(...) calls of a recursive loop).
func (st *state) runLoop(n *forNode, sc *scope, iv Value, depth int) error {
	items, err := st.iterate(iv)
	if err != nil {
		return err
	}
	if n.cond != nil {
		// The loop filter sees the loop target but not `loop`.
		var kept []Value
		for _, it := range items {
			if err := st.step(1); err != nil {
				return err
			}
			f := &scope{parent: sc}
			if err := st.assign(n.target, it, f); err != nil {
				return err
			}
			c, err := st.eval(n.cond, f)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if n.els != nil {
			_, err := st.execBody(n.els, &scope{parent: sc})
			return err
		}
		return nil
	}
	// The loop object and the frame in one allocation.
	lw := &loopWithFrame{loopObj: loopObj{items: items, depth: depth}}
	lo := &lw.loopObj
	if n.recursive {
		lo.node, lo.sc = n, sc
	}
	// Jinja2 clears its "no iteration" flag at the end of the loop body, so
	// an iteration left by break or continue does not clear it (compiler.py
	// visit_For): the else block then runs even though the loop ran.
	runElse := true
	// One frame reused by every iteration: each starts empty, as in Jinja2.
	lf := &lw.frame
	lf.scope = scope{parent: sc, names: lf.names[:0], vals: lf.vals[:0]}
	f := &lf.scope
	for i, it := range items {
		lo.index0 = i
		clear(f.vals)
		f.names, f.vals = f.names[:0], f.vals[:0]
		f.set("loop", lo)
		if err := st.assign(n.target, it, f); err != nil {
			return err
		}
		c, err := st.execBody(n.body, f)
		if err != nil {
			return err
		}
		if c == ctlBreak {
			break
		}
		if c == ctlNone {
			runElse = false
		}
	}
	if runElse && n.els != nil {
		_, err := st.execBody(n.els, &scope{parent: sc})
		return err
	}
	return nil
}

// iterate lists what `for x in v` visits, as Python would.
func (st *state) iterate(v Value) ([]Value, error) {
	switch x := v.(type) {
	case *List:
		return x.Items, nil
	case Tuple:
		return x, nil
	case *Dict:
		return x.keys, nil
	case string:
		// Charge first: a huge string would otherwise allocate before the
		// budget could stop it.
		if err := st.step(utf8.RuneCountInString(x)); err != nil {
			return nil, err
		}
		out := make([]Value, 0, len(x))
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	case *Undefined:
		return nil, nil
	case *Iterator:
		if x.err != nil {
			return nil, x.err
		}
		return x.rest(), nil
	case *View:
		return x.items, nil
	case *Namespace:
		return nil, typeErrorf("'Namespace' object is not iterable")
	}
	return nil, typeErrorf("'%s' object is not iterable", typeName(v))
}

func (st *state) eval(e expr, sc *scope) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		return st.lookup(e.name, sc), nil
	case *attrExpr:
		obj, err := st.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		return getAttrOf(obj, e.name, e.methods)
	case *itemExpr:
		obj, err := st.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		k, err := st.eval(e.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, k)
	case *sliceExpr:
		return st.evalSlice(e, sc)
	case *binExpr:
		return st.evalBin(e, sc)
	case *unaryExpr:
		v, err := st.eval(e.e, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			return negate(v)
		default:
			return positive(v)
		}
	case *compareExpr:
		l, err := st.eval(e.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			r, err := st.eval(e.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, l, r)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = r
		}
		return true, nil
	case *condExpr:
		c, err := st.eval(e.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return st.eval(e.then, sc)
		}
		if e.els == nil {
			return &Undefined{hint: "the inline if-expression on line evaluated to false and no else section was defined."}, nil
		}
		return st.eval(e.els, sc)
	case *listExpr:
		l := &List{Items: make([]Value, len(e.items))}
		for i, it := range e.items {
			v, err := st.eval(it, sc)
			if err != nil {
				return nil, err
			}
			l.Items[i] = v
		}
		return l, nil
	case *tupleExpr:
		t := make(Tuple, len(e.items))
		for i, it := range e.items {
			v, err := st.eval(it, sc)
			if err != nil {
				return nil, err
			}
			t[i] = v
		}
		return t, nil
	case *dictExpr:
		d := newDictCap(len(e.keys))
		for i, ke := range e.keys {
			k, err := st.eval(ke, sc)
			if err != nil {
				return nil, err
			}
			switch k.(type) {
			case *List, *Dict, *Undefined, *Namespace:
				return nil, typeErrorf("unhashable type: '%s'", typeName(k))
			}
			v, err := st.eval(e.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
		}
		return d, nil
	case *callExpr:
		return st.evalCall(e, sc, nil)
	case *filterExpr:
		v, err := st.eval(e.val, sc)
		if err != nil {
			return nil, err
		}
		return st.applyFilter(e, v, sc)
	case *testExpr:
		return st.evalTest(e, sc)
	}
	return nil, errorf("RuntimeError", "unknown expression %T", e)
}

func (st *state) evalBin(e *binExpr, sc *scope) (Value, error) {
	l, err := st.eval(e.l, sc)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return st.eval(e.r, sc)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return st.eval(e.r, sc)
	}
	r, err := st.eval(e.r, sc)
	if err != nil {
		return nil, err
	}
	var v Value
	switch e.op {
	case "~":
		s := strValue(l) + strValue(r)
		if err := st.checkSize(len(s)); err != nil {
			return nil, err
		}
		return s, nil
	case "+":
		v, err = st.add(l, r)
	case "-":
		v, err = arith("-", l, r)
	case "*":
		v, err = st.mul(l, r)
	case "/":
		v, err = arith("/", l, r)
	case "//":
		v, err = arith("//", l, r)
	case "%":
		if s, ok := l.(string); ok {
			v, err = st.percentFormat(s, r)
		} else {
			v, err = arith("%", l, r)
		}
	case "**":
		v, err = arith("**", l, r)
	default:
		return nil, errorf("RuntimeError", "unknown operator %s", e.op)
	}
	return v, err
}

func (st *state) evalSlice(e *sliceExpr, sc *scope) (Value, error) {
	obj, err := st.eval(e.obj, sc)
	if err != nil {
		return nil, err
	}
	var idx [3]Value
	for i, p := range []expr{e.start, e.stop, e.step} {
		if p == nil {
			continue
		}
		v, err := st.eval(p, sc)
		if err != nil {
			return nil, err
		}
		idx[i] = v
	}
	return sliceValue(obj, idx[0], idx[1], idx[2])
}

// evalArgs evaluates call arguments, expanding *args and **kwargs.
func (st *state) evalArgs(args []expr, kwNames []Value, kwVals []expr, star, starKw expr, sc *scope) ([]Value, *Dict, error) {
	pos := make([]Value, 0, len(args))
	for _, a := range args {
		v, err := st.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		pos = append(pos, v)
	}
	if star != nil {
		v, err := st.eval(star, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := st.iterate(v)
		if err != nil {
			return nil, nil, err
		}
		pos = append(pos, items...)
	}
	var kw *Dict
	if len(kwNames) > 0 {
		kw = newDictCap(len(kwNames))
	} else if starKw != nil {
		kw = NewDict()
	}
	for i, n := range kwNames {
		v, err := st.eval(kwVals[i], sc)
		if err != nil {
			return nil, nil, err
		}
		kw.Set(n, v)
	}
	if starKw != nil {
		v, err := st.eval(starKw, sc)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, typeErrorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range d.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, nil, typeErrorf("keywords must be strings")
			}
			kw.Set(ks, d.vals[i])
		}
	}
	return pos, kw, nil
}

func (st *state) evalCall(e *callExpr, sc *scope, caller *Macro) (Value, error) {
	if err := st.step(1); err != nil {
		return nil, err
	}
	if a, ok := e.fn.(*attrExpr); ok {
		// obj.method(...): called without allocating the bound method,
		// in the same order (object, attribute, arguments).
		obj, err := st.eval(a.obj, sc)
		if err != nil {
			return nil, err
		}
		if a.methods.of(obj) {
			args, kw, err := st.evalArgs(e.args, e.kwNames, e.kwVals, e.star, e.starKw, sc)
			if err != nil {
				return nil, err
			}
			m := boundMethod{recv: obj, name: a.name}
			return st.callMethod(&m, args, kw)
		}
		fn, err := getAttrOf(obj, a.name, a.methods)
		if err != nil {
			return nil, err
		}
		return st.callValue(fn, e, sc, caller)
	}
	fn, err := st.eval(e.fn, sc)
	if err != nil {
		return nil, err
	}
	return st.callValue(fn, e, sc, caller)
}

// callValue evaluates e's arguments and calls fn with them.
func (st *state) callValue(fn Value, e *callExpr, sc *scope, caller *Macro) (Value, error) {
	args, kw, err := st.evalArgs(e.args, e.kwNames, e.kwVals, e.star, e.starKw, sc)
	if err != nil {
		return nil, err
	}
	return st.call(fn, args, kw, caller)
}

// call invokes a callable value.
func (st *state) call(fn Value, args []Value, kw *Dict, caller *Macro) (Value, error) {
	switch f := fn.(type) {
	case *Macro:
		return st.callMacro(f, args, kw, caller)
	case *builtinFunc:
		return f.fn(st, args, kw)
	case *boundMethod:
		return st.callMethod(f, args, kw)
	case *loopObj:
		if f.node == nil {
			return nil, typeErrorf("'LoopContext' object is not callable")
		}
		if len(args) != 1 {
			return nil, typeErrorf("loop() takes exactly one argument")
		}
		st.callDepth++
		defer func() { st.callDepth-- }()
		if st.callDepth > maxCallDepth {
			return nil, errorf("LimitError", "recursive loop nested deeper than %d", maxCallDepth)
		}
		saved := st.out
		var b outBuf
		st.out = &b
		err := st.runLoop(f.node, f.sc, args[0], f.depth+1)
		st.out = saved
		return b.String(), err
	case *Undefined:
		return nil, f.err()
	}
	return nil, typeErrorf("'%s' object is not callable", typeName(fn))
}

// Macro is a template macro (or the caller of a {% call %} block).
type Macro struct {
	name    string
	params  []string
	defs    []expr
	body    []node
	closure *scope
}

func (st *state) callMacro(m *Macro, args []Value, kw *Dict, caller *Macro) (Value, error) {
	st.callDepth++
	defer func() { st.callDepth-- }()
	if st.callDepth > maxCallDepth {
		return nil, errorf("LimitError", "macro calls nested deeper than %d", maxCallDepth)
	}
	f := &scope{parent: m.closure}
	for i, p := range m.params {
		switch {
		case i < len(args):
			f.set(p, args[i])
		case kw != nil:
			if v, ok := kw.Get(p); ok {
				f.set(p, v)
				kw.Delete(p)
				continue
			}
			fallthrough
		default:
			if m.defs[i] != nil {
				v, err := st.eval(m.defs[i], f)
				if err != nil {
					return nil, err
				}
				f.set(p, v)
			} else {
				f.set(p, &Undefined{hint: "parameter '" + p + "' was not provided"})
			}
		}
	}
	extra := Tuple{}
	if len(args) > len(m.params) {
		extra = append(extra, args[len(m.params):]...)
	}
	f.set("varargs", extra)
	if kw == nil {
		kw = NewDict()
	}
	f.set("kwargs", kw)
	if caller != nil {
		f.set("caller", caller)
	}
	text, err := st.capture(m.body, f)
	if err != nil {
		return nil, err
	}
	return text, nil
}
