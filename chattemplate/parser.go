package chattemplate

import (
	"fmt"
	"slices"
)

// The parser follows jinja2/parser.py (3.1): the same precedence ladder
// (condexpr > or > and > not > compare > +,- > ~ > *,/,//,% > ** > unary >
// postfix/filters/tests) and the same statement grammar.

const maxParseDepth = 200

type parser struct {
	toks  []token
	pos   int
	depth int
}

func (p *parser) cur() token { return p.toks[p.pos] }

func (p *parser) peek(n int) token {
	if p.pos+n < len(p.toks) {
		return p.toks[p.pos+n]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) failf(format string, args ...any) error {
	return &SyntaxError{Line: p.cur().line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.failf("expected '%s', got %s", op, p.cur())
	}
	return nil
}

func (p *parser) expectKind(k tokKind, what string) (token, error) {
	if p.cur().kind != k {
		return token{}, p.failf("expected %s, got %s", what, p.cur())
	}
	return p.next(), nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.failf("template nested too deeply")
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseTemplate parses a whole token stream.
func parseTemplate(toks []token) ([]node, error) {
	p := &parser{toks: toks}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if p.cur().kind != tEOF {
		return nil, p.failf("unexpected %s", p.cur())
	}
	return body, nil
}

// subparse reads nodes until EOF or a block tag whose first name is in
// endNames; it then leaves the stream on that name.
func (p *parser) subparse(endNames []string) ([]node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			return body, nil
		case tText:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple(tupleOpts{condexpr: true})
			if err != nil {
				return nil, err
			}
			if _, err := p.expectKind(tVarEnd, "'}}'"); err != nil {
				return nil, err
			}
			body = append(body, &outputNode{e: e})
		case tBlockBegin:
			p.next()
			if endNames != nil && p.cur().kind == tName && slices.Contains(endNames, p.cur().val) {
				return body, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, p.failf("unexpected %s", t)
		}
	}
}

// parseStatements expects the end of the current tag, then parses a body up
// to one of endNames, leaving the stream on the end name (dropNeedle: past it).
func (p *parser) parseStatements(endNames []string, dropNeedle bool) ([]node, error) {
	p.skipOp(":")
	if _, err := p.expectKind(tBlockEnd, "'%}'"); err != nil {
		return nil, err
	}
	body, err := p.subparse(endNames)
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tEOF {
		return nil, p.failf("unexpected end of template, expected one of %v", endNames)
	}
	if dropNeedle {
		p.next()
	}
	return body, nil
}

func (p *parser) endTag() error {
	_, err := p.expectKind(tBlockEnd, "'%}'")
	return err
}

func (p *parser) parseStatement() (node, error) {
	t := p.cur()
	if t.kind != tName {
		return nil, p.failf("tag name expected")
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	switch t.val {
	case "if":
		p.next()
		return p.parseIf()
	case "for":
		p.next()
		return p.parseFor()
	case "set":
		p.next()
		return p.parseSet()
	case "macro":
		p.next()
		return p.parseMacro()
	case "call":
		p.next()
		return p.parseCallBlock()
	case "filter":
		p.next()
		filters, err := p.parseFilterChain(nil, true)
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"endfilter"}, true)
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{filters: filters, body: body}, p.endTag()
	case "with":
		p.next()
		return p.parseWith()
	case "generation":
		p.next()
		body, err := p.parseStatements([]string{"endgeneration"}, true)
		if err != nil {
			return nil, err
		}
		return &scopeNode{body: body}, p.endTag()
	case "print":
		p.next()
		e, err := p.parseTuple(tupleOpts{condexpr: true})
		if err != nil {
			return nil, err
		}
		return &outputNode{e: e}, p.endTag()
	case "break":
		p.next()
		return &breakNode{}, p.endTag()
	case "continue":
		p.next()
		return &continueNode{}, p.endTag()
	case "do":
		return nil, p.failf("the 'do' tag needs the jinja2.ext.do extension, which chat templates do not get")
	}
	return nil, p.failf("unknown or unsupported tag '%s'", t.val)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseTuple(tupleOpts{})
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch p.next().val {
		case "elif":
			continue
		case "else":
			els, err := p.parseStatements([]string{"endif"}, true)
			if err != nil {
				return nil, err
			}
			n.els = els
		}
		return n, p.endTag()
	}
}

func (p *parser) parseFor() (node, error) {
	target, err := p.parseAssignTarget([]string{"in"}, false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.failf("expected 'in', got %s", p.cur())
	}
	iter, err := p.parseTuple(tupleOpts{endNames: []string{"recursive"}})
	if err != nil {
		return nil, err
	}
	n := &forNode{target: target, iter: iter}
	if p.skipName("if") {
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	n.recursive = p.skipName("recursive")
	if n.body, err = p.parseStatements([]string{"endfor", "else"}, false); err != nil {
		return nil, err
	}
	if p.next().val == "else" {
		if n.els, err = p.parseStatements([]string{"endfor"}, true); err != nil {
			return nil, err
		}
	}
	return n, p.endTag()
}

func (p *parser) parseSet() (node, error) {
	target, err := p.parseAssignTarget(nil, true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(tupleOpts{condexpr: true})
		if err != nil {
			return nil, err
		}
		return &setNode{target: target, value: v}, p.endTag()
	}
	var filters []*filterExpr
	if p.isOp("|") {
		if filters, err = p.parseFilterChain(nil, false); err != nil {
			return nil, err
		}
	}
	body, err := p.parseStatements([]string{"endset"}, true)
	if err != nil {
		return nil, err
	}
	return &setBlockNode{target: target, filters: filters, body: body}, p.endTag()
}

func (p *parser) parseSignature() ([]string, []expr, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var params []string
	var defs []expr
	hasDefault := false
	for !p.isOp(")") {
		if len(params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		t, err := p.expectKind(tName, "parameter name")
		if err != nil {
			return nil, nil, err
		}
		var d expr
		if p.skipOp("=") {
			if d, err = p.parseExpression(true); err != nil {
				return nil, nil, err
			}
			hasDefault = true
		} else if hasDefault {
			return nil, nil, p.failf("non-default argument follows default argument")
		}
		params = append(params, t.val)
		defs = append(defs, d)
	}
	p.next()
	return params, defs, nil
}

func (p *parser) parseMacro() (node, error) {
	t, err := p.expectKind(tName, "macro name")
	if err != nil {
		return nil, err
	}
	params, defs, err := p.parseSignature()
	if err != nil {
		return nil, err
	}
	body, err := p.parseStatements([]string{"endmacro"}, true)
	if err != nil {
		return nil, err
	}
	return &macroNode{name: t.val, params: params, defs: defs, body: body}, p.endTag()
}

func (p *parser) parseCallBlock() (node, error) {
	n := &callBlockNode{}
	var err error
	if p.isOp("(") {
		if n.params, n.defs, err = p.parseSignature(); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := e.(*callExpr)
	if !ok {
		return nil, p.failf("expected call")
	}
	n.call = call
	if n.body, err = p.parseStatements([]string{"endcall"}, true); err != nil {
		return nil, err
	}
	return n, p.endTag()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(nil, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.values = append(n.values, v)
	}
	body, err := p.parseStatements([]string{"endwith"}, true)
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.endTag()
}

// parseAssignTarget reads a name, ns.attr (withNamespace) or a tuple of them.
func (p *parser) parseAssignTarget(endNames []string, withNamespace bool) (assignTarget, error) {
	one := func() (assignTarget, error) {
		if p.skipOp("(") {
			t, err := p.parseAssignTarget(nil, withNamespace)
			if err != nil {
				return t, err
			}
			return t, p.expectOp(")")
		}
		t, err := p.expectKind(tName, "assignment target")
		if err != nil {
			return assignTarget{}, err
		}
		switch t.val {
		case "true", "false", "none", "True", "False", "None":
			return assignTarget{}, p.failf("can't assign to '%s'", t.val)
		}
		if withNamespace && p.isOp(".") {
			p.next()
			a, err := p.expectKind(tName, "attribute name")
			if err != nil {
				return assignTarget{}, err
			}
			return assignTarget{name: t.val, attr: a.val, attrKey: a.val}, nil
		}
		return assignTarget{name: t.val}, nil
	}
	var items []assignTarget
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return assignTarget{}, err
			}
		}
		if p.tupleEnd(endNames) || p.isOp("=") || p.isOp("|") {
			break
		}
		t, err := one()
		if err != nil {
			return t, err
		}
		items = append(items, t)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) == 0 {
			return assignTarget{}, p.failf("expected assignment target, got %s", p.cur())
		}
		return items[0], nil
	}
	return assignTarget{tuple: items, isTup: true}, nil
}

func (p *parser) tupleEnd(endNames []string) bool {
	t := p.cur()
	if t.kind == tVarEnd || t.kind == tBlockEnd || t.kind == tEOF || (t.kind == tOp && t.val == ")") {
		return true
	}
	return t.kind == tName && slices.Contains(endNames, t.val)
}

type tupleOpts struct {
	condexpr bool
	endNames []string
	explicit bool
}

func (p *parser) parseTuple(o tupleOpts) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.tupleEnd(o.endNames) {
			break
		}
		e, err := p.parseExpression(o.condexpr)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !o.explicit {
			return nil, p.failf("expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseExpression(condexpr bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !condexpr {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{cond: cond, then: e, els: els}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) {
	return p.parseBinaryLevel(tName, []string{"or"}, p.parseAnd)
}

func (p *parser) parseAnd() (expr, error) {
	return p.parseBinaryLevel(tName, []string{"and"}, p.parseNot)
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", e: e}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []string
	var rest []expr
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.peek(1).kind == tName && p.peek(1).val == "in":
			op = "not in"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
		rest = append(rest, r)
	}
	if len(ops) == 0 {
		return first, nil
	}
	return &compareExpr{first: first, ops: ops, rest: rest}, nil
}

// parseBinaryLevel parses next (op next)*, left-associative, where op is a
// token of kind (an operator, or a keyword such as or) among ops.
func (p *parser) parseBinaryLevel(kind tokKind, ops []string, next func() (expr, error)) (expr, error) {
	l, err := next()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		if t.kind != kind || !slices.Contains(ops, t.val) {
			return l, nil
		}
		p.next()
		r, err := next()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error) {
	return p.parseBinaryLevel(tOp, []string{"+", "-"}, p.parseConcat)
}

func (p *parser) parseConcat() (expr, error) {
	return p.parseBinaryLevel(tOp, []string{"~"}, p.parseMath2)
}

func (p *parser) parseMath2() (expr, error) {
	return p.parseBinaryLevel(tOp, []string{"*", "/", "//", "%"}, p.parsePow)
}

func (p *parser) parsePow() (expr, error) {
	return p.parseBinaryLevel(tOp, []string{"**"}, func() (expr, error) { return p.parseUnary(true) })
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	switch {
	case p.isOp("-"):
		p.next()
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: "-", e: inner}
		if c, ok := inner.(*constExpr); ok {
			// A negative literal (messages[::-1], loop.index0 - 1 is not one):
			// fold it now, so each evaluation does not box the number
			// again. negate is pure; an error is left for run time.
			if v, err := negate(c.v); err == nil {
				e = &constExpr{v: v}
			}
		}
	case p.isOp("+"):
		p.next()
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: "+", e: inner}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		return &nameExpr{name: t.val}, nil
	case tString:
		p.next()
		s := t.val
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tInt:
		p.next()
		return &constExpr{v: t.ival}, nil
	case tFloat:
		p.next()
		return &constExpr{v: t.fval}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(tupleOpts{condexpr: true, explicit: true})
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			var items []expr
			for !p.isOp("]") {
				if len(items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				e, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				items = append(items, e)
			}
			p.next()
			return &listExpr{items: items}, nil
		case "{":
			p.next()
			d := &dictExpr{}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.failf("unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			p.next()
			t := p.next()
			switch t.kind {
			case tName:
				e = &attrExpr{obj: e, name: t.val, methods: methodsNamed(t.val)}
			case tInt:
				e = &itemExpr{obj: e, key: &constExpr{v: t.ival}}
			default:
				return nil, p.failf("expected name or number")
			}
		case p.isOp("["):
			p.next()
			var args []expr
			for !p.isOp("]") {
				if len(args) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
				}
				a, err := p.parseSubscribed(e)
				if err != nil {
					return nil, err
				}
				args = append(args, a)
			}
			p.next()
			switch len(args) {
			case 0:
				e = &itemExpr{obj: e, key: &tupleExpr{}} // Jinja2 reads x[] as x[()]
			case 1:
				if s, ok := args[0].(*sliceExpr); ok {
					e = s
				} else {
					e = &itemExpr{obj: e, key: args[0]}
				}
			default:
				e = &itemExpr{obj: e, key: &tupleExpr{items: args}}
			}
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

// parseSubscribed reads one subscript: an expression or a slice a:b:c.
func (p *parser) parseSubscribed(obj expr) (expr, error) {
	var parts [3]expr
	if !p.isOp(":") {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		parts[0] = e
	}
	p.next() // first ':'
	if !p.isOp(":") && !p.isOp("]") && !p.isOp(",") {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[1] = e
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			e, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			parts[2] = e
		}
	}
	return &sliceExpr{obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

type callArgs struct {
	args    []expr
	kwNames []Value
	kwVals  []expr
	star    expr
	starKw  expr
}

func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	if err := p.expectOp("("); err != nil {
		return a, err
	}
	first := true
	for !p.isOp(")") {
		if !first {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		first = false
		switch {
		case p.isOp("*"):
			p.next()
			e, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.star = e
		case p.isOp("**"):
			p.next()
			e, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.starKw = e
		case p.cur().kind == tName && p.peek(1).kind == tOp && p.peek(1).val == "=":
			name := p.next().val
			p.next()
			e, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.kwNames = append(a.kwNames, name)
			a.kwVals = append(a.kwVals, e)
		default:
			if len(a.kwNames) > 0 || a.star != nil || a.starKw != nil {
				return a, p.failf("invalid syntax for function call expression")
			}
			e, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.args = append(a.args, e)
		}
	}
	p.next()
	return a, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: a.args, kwNames: a.kwNames, kwVals: a.kwVals, star: a.star, starKw: a.starKw}, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			fs, err := p.parseFilterChain(e, false)
			if err != nil {
				return nil, err
			}
			e = fs[len(fs)-1]
		case p.isName("is"):
			t, err := p.parseTest(e)
			if err != nil {
				return nil, err
			}
			e = t
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

// parseFilterChain reads `|f(args)|g...`; each filter wraps the previous.
// inline: the first filter has no leading pipe ({% filter f %}).
func (p *parser) parseFilterChain(val expr, inline bool) ([]*filterExpr, error) {
	var out []*filterExpr
	for inline || p.isOp("|") {
		if !inline {
			p.next()
		}
		inline = false
		t, err := p.expectKind(tName, "filter name")
		if err != nil {
			return nil, err
		}
		name := t.val
		for p.isOp(".") {
			p.next()
			t, err := p.expectKind(tName, "filter name")
			if err != nil {
				return nil, err
			}
			name += "." + t.val
		}
		f := &filterExpr{val: val, name: name, fn: filters[name]}
		if p.isOp("(") {
			a, err := p.parseCallArgs()
			if err != nil {
				return nil, err
			}
			if a.star != nil || a.starKw != nil {
				return nil, p.failf("*args and **kwargs are not supported in filter calls")
			}
			f.args, f.kwNames, f.kwVals = a.args, a.kwNames, a.kwVals
		}
		out = append(out, f)
		val = f
	}
	return out, nil
}

func (p *parser) parseTest(val expr) (expr, error) {
	p.next() // is
	t := &testExpr{val: val}
	if p.skipName("not") {
		t.negate = true
	}
	nt, err := p.expectKind(tName, "test name")
	if err != nil {
		return nil, err
	}
	t.name = nt.val
	for p.isOp(".") {
		p.next()
		nt, err := p.expectKind(tName, "test name")
		if err != nil {
			return nil, err
		}
		t.name += "." + nt.val
	}
	t.fn = tests[t.name]
	cur := p.cur()
	switch {
	case cur.kind == tOp && cur.val == "(":
		a, err := p.parseCallArgs()
		if err != nil {
			return nil, err
		}
		t.args, t.kwNames, t.kwVals = a.args, a.kwNames, a.kwVals
	case (cur.kind == tName || cur.kind == tString || cur.kind == tInt || cur.kind == tFloat ||
		cur.kind == tOp && (cur.val == "[" || cur.val == "{")) &&
		!(cur.kind == tName && (cur.val == "else" || cur.val == "or" || cur.val == "and")):
		if cur.kind == tName && cur.val == "is" {
			return nil, p.failf("you cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		t.args = []expr{arg}
	}
	return t, nil
}
