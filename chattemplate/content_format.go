package chattemplate

// detectContentFormat follows vLLM's _detect_content_format
// (vllm/entrypoints/chat_utils.py, v0.11+): the template takes OpenAI-style
// content parts when it loops over `<message>.content` (or
// `<message>['content']`, through filters, tests and slices), where
// <message> is a loop variable over `messages` or a variable assigned from
// it. Anything vLLM's walk would trip over (a tuple or namespace target)
// makes it fall back to "string", as vLLM does.
func detectContentFormat(t *Template) string {
	var sets []*setNode
	var fors []*forNode
	walkNodes(t.body, func(n node) {
		switch n := n.(type) {
		case *setNode:
			sets = append(sets, n)
		case *forNode:
			fors = append(fors, n)
		}
	})

	// Variables that hold messages (or a filtered/sliced view of them).
	msgVars := []string{"messages"}
	seen := map[string]bool{"messages": true}
	for q := 0; q < len(msgVars); q++ {
		rel := msgVars[q]
		for _, s := range sets {
			if !isVarOrElemsAccess(s.value, rel, "") {
				continue
			}
			if s.target.isTup || s.target.attr != "" {
				return ContentFormatString
			}
			if !seen[s.target.name] {
				seen[s.target.name] = true
				msgVars = append(msgVars, s.target.name)
			}
		}
	}
	// Loop variables over those: one message each.
	var itemVars []string
	for _, f := range fors {
		for _, v := range msgVars {
			if isVarOrElemsAccess(f.iter, v, "") {
				if f.target.isTup {
					return ContentFormatString
				}
				itemVars = append(itemVars, f.target.name)
				break
			}
		}
	}
	for _, f := range fors {
		for _, v := range itemVars {
			if isVarOrElemsAccess(f.iter, v, "content") {
				if f.target.isTup {
					return ContentFormatString
				}
				return ContentFormatOpenAI
			}
		}
	}
	return ContentFormatString
}

// isVarOrElemsAccess: e is `name` (key "") or `name.key`/`name['key']`,
// possibly wrapped in filters, tests or a slice.
func isVarOrElemsAccess(e expr, name, key string) bool {
	switch x := e.(type) {
	case *filterExpr:
		return x.val != nil && isVarOrElemsAccess(x.val, name, key)
	case *testExpr:
		return isVarOrElemsAccess(x.val, name, key)
	case *sliceExpr:
		return isVarOrElemsAccess(x.obj, name, key)
	}
	if key == "" {
		n, ok := e.(*nameExpr)
		return ok && n.name == name
	}
	switch x := e.(type) {
	case *itemExpr:
		n, ok := x.obj.(*nameExpr)
		c, isConst := x.key.(*constExpr)
		return ok && n.name == name && isConst && c.v == key
	case *attrExpr:
		n, ok := x.obj.(*nameExpr)
		return ok && n.name == name && x.name == key
	}
	return false
}

// walkNodes visits every statement in document order, depth first.
func walkNodes(body []node, visit func(node)) {
	for _, n := range body {
		visit(n)
		switch n := n.(type) {
		case *ifNode:
			for _, b := range n.bodies {
				walkNodes(b, visit)
			}
			walkNodes(n.els, visit)
		case *forNode:
			walkNodes(n.body, visit)
			walkNodes(n.els, visit)
		case *setBlockNode:
			walkNodes(n.body, visit)
		case *macroNode:
			walkNodes(n.body, visit)
		case *callBlockNode:
			walkNodes(n.body, visit)
		case *filterBlockNode:
			walkNodes(n.body, visit)
		case *withNode:
			walkNodes(n.body, visit)
		case *scopeNode:
			walkNodes(n.body, visit)
		}
	}
}
