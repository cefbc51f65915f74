package chattemplate

// Statement nodes.

type node any

type textNode struct{ text string }

type outputNode struct{ e expr }

type ifNode struct {
	conds  []expr
	bodies [][]node
	els    []node
}

type forNode struct {
	target    assignTarget
	iter      expr
	cond      expr // optional loop filter
	body      []node
	els       []node
	recursive bool
}

type setNode struct {
	target assignTarget
	value  expr
}

// setBlockNode is {% set x %}...{% endset %}, optionally filtered.
type setBlockNode struct {
	target  assignTarget
	filters []*filterExpr
	body    []node
}

type macroNode struct {
	name   string
	params []string
	defs   []expr // nil entries: no default
	body   []node
}

type callBlockNode struct {
	call   *callExpr
	params []string
	defs   []expr
	body   []node
}

type filterBlockNode struct {
	filters []*filterExpr
	body    []node
}

type withNode struct {
	targets []assignTarget
	values  []expr
	body    []node
}

// scopeNode is a body rendered in its own scope ({% generation %}).
type scopeNode struct{ body []node }

type breakNode struct{}

type continueNode struct{}

// assignTarget is a name, a tuple of targets, or ns.attr.
type assignTarget struct {
	name string
	attr string // with name: namespace attribute assignment
	// attrKey is attr boxed once, the key ns.attrs.Set takes.
	attrKey Value
	tuple   []assignTarget
	isTup   bool
}

// Expression nodes.

type expr any

type constExpr struct{ v Value }

type nameExpr struct{ name string }

type listExpr struct{ items []expr }

type tupleExpr struct{ items []expr }

type dictExpr struct{ keys, vals []expr }

type attrExpr struct {
	obj     expr
	name    string
	methods methodSet // methodsNamed(name)
}

type itemExpr struct {
	obj expr
	key expr
}

type sliceExpr struct {
	obj               expr
	start, stop, step expr // nil when omitted
}

type callExpr struct {
	fn      expr
	args    []expr
	kwNames []Value // strings, boxed once here rather than at every call
	kwVals  []expr
	star    expr
	starKw  expr
}

type filterExpr struct {
	val     expr // nil inside filter blocks and set blocks
	name    string
	fn      filterFunc // filters[name] when parsed, nil for an unknown filter
	args    []expr
	kwNames []Value // strings, boxed once here rather than at every call
	kwVals  []expr
}

type testExpr struct {
	val     expr
	name    string
	fn      testFunc // tests[name] when parsed, nil for an unknown test
	args    []expr
	kwNames []Value // strings, boxed once here rather than at every call
	kwVals  []expr
	negate  bool
}

type binExpr struct {
	op   string
	l, r expr
}

type unaryExpr struct {
	op string
	e  expr
}

type compareExpr struct {
	first expr
	ops   []string
	rest  []expr
}

type condExpr struct {
	cond, then, els expr // els nil: undefined
}
