package chattemplate

// Jinja2's builtin tests (jinja2/tests.py, 3.1): `x is defined`, `x is not none`, ...

type testFunc func(st *state, v Value, args []Value) (bool, error)

var tests map[string]testFunc

func init() {
	tests = map[string]testFunc{
		"defined":   func(st *state, v Value, a []Value) (bool, error) { _, u := v.(*Undefined); return !u, nil },
		"undefined": func(st *state, v Value, a []Value) (bool, error) { _, u := v.(*Undefined); return u, nil },
		"none":      func(st *state, v Value, a []Value) (bool, error) { return v == nil, nil },
		"boolean":   func(st *state, v Value, a []Value) (bool, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(st *state, v Value, a []Value) (bool, error) { b, ok := v.(bool); return ok && b, nil },
		"false":     func(st *state, v Value, a []Value) (bool, error) { b, ok := v.(bool); return ok && !b, nil },
		"integer":   func(st *state, v Value, a []Value) (bool, error) { _, ok := v.(int64); return ok, nil },
		"float":     func(st *state, v Value, a []Value) (bool, error) { _, ok := v.(float64); return ok, nil },
		"number": func(st *state, v Value, a []Value) (bool, error) {
			_, _, _, ok := number(v)
			return ok, nil
		},
		"string": func(st *state, v Value, a []Value) (bool, error) { _, ok := v.(string); return ok, nil },
		"mapping": func(st *state, v Value, a []Value) (bool, error) {
			_, ok := v.(*Dict)
			return ok, nil
		},
		"sequence": func(st *state, v Value, a []Value) (bool, error) {
			switch v.(type) {
			case string, *List, Tuple, *Dict, *Undefined:
				return true, nil
			}
			return false, nil
		},
		"iterable": func(st *state, v Value, a []Value) (bool, error) {
			switch v.(type) {
			case string, *List, Tuple, *Dict, *Undefined, *Iterator, *View:
				return true, nil
			}
			return false, nil
		},
		"callable": func(st *state, v Value, a []Value) (bool, error) {
			switch v.(type) {
			case *Macro, *builtinFunc, *boundMethod, *Undefined, *joiner:
				return true, nil
			}
			return false, nil
		},
		"odd": func(st *state, v Value, a []Value) (bool, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && equalValues(m, int64(1)), err
		},
		"even": func(st *state, v Value, a []Value) (bool, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && equalValues(m, int64(0)), err
		},
		"divisibleby": func(st *state, v Value, a []Value) (bool, error) {
			if len(a) != 1 {
				return false, typeErrorf("divisibleby needs one argument")
			}
			m, err := arith("%", v, a[0])
			if err != nil {
				return false, err
			}
			return equalValues(m, int64(0)), nil
		},
		"lower": func(st *state, v Value, a []Value) (bool, error) { return pyIsLower(strValue(v)), nil },
		"upper": func(st *state, v Value, a []Value) (bool, error) { return pyIsUpper(strValue(v)), nil },
		"sameas": func(st *state, v Value, a []Value) (bool, error) {
			if len(a) != 1 {
				return false, typeErrorf("sameas needs one argument")
			}
			switch x := v.(type) {
			case nil, bool:
				return v == a[0], nil
			case *List, *Dict, *Namespace:
				return v == a[0], nil
			case int64:
				y, ok := a[0].(int64)
				return ok && x == y && x >= -5 && x <= 256, nil
			case string:
				y, ok := a[0].(string)
				return ok && x == y, nil
			}
			return false, nil
		},
		"in": func(st *state, v Value, a []Value) (bool, error) {
			if len(a) != 1 {
				return false, typeErrorf("in needs one argument")
			}
			return contains(a[0], v)
		},
		"filter": func(st *state, v Value, a []Value) (bool, error) {
			s, ok := v.(string)
			_, found := filters[s]
			return ok && found, nil
		},
		"test": func(st *state, v Value, a []Value) (bool, error) {
			s, ok := v.(string)
			_, found := tests[s]
			return ok && found, nil
		},
		"escaped": func(st *state, v Value, a []Value) (bool, error) { return false, nil },
	}
	// Tests without parameters refuse arguments, as the Python functions do.
	for _, name := range []string{"defined", "undefined", "none", "boolean", "true", "false", "integer", "float",
		"number", "string", "mapping", "sequence", "iterable", "callable", "odd", "even", "lower", "upper", "filter", "test", "escaped"} {
		fn := tests[name]
		tests[name] = func(st *state, v Value, a []Value) (bool, error) {
			if len(a) > 0 {
				return false, typeErrorf("test_%s() takes 1 positional argument but %d were given", name, len(a)+1)
			}
			return fn(st, v, a)
		}
	}
	cmp := func(op string) testFunc {
		return func(st *state, v Value, a []Value) (bool, error) {
			if len(a) != 1 {
				return false, typeErrorf("comparison test needs one argument")
			}
			return compare(op, v, a[0])
		}
	}
	for name, op := range map[string]string{
		"eq": "==", "equalto": "==", "==": "==", "ne": "!=", "!=": "!=",
		"lt": "<", "lessthan": "<", "<": "<", "le": "<=", "<=": "<=",
		"gt": ">", "greaterthan": ">", ">": ">", "ge": ">=", ">=": ">=",
	} {
		tests[name] = cmp(op)
	}
}

func (st *state) evalTest(e *testExpr, sc *scope) (Value, error) {
	if err := st.step(1); err != nil {
		return nil, err
	}
	fn := e.fn
	if fn == nil {
		return nil, errorf("TemplateAssertionError", "no test named '%s'", e.name)
	}
	if n, isName := e.val.(*nameExpr); isName && (e.name == "defined" || e.name == "undefined") &&
		len(e.args) == 0 && len(e.kwNames) == 0 {
		// `name is defined`: answered without building the Undefined that
		// evaluating a missing name makes. A name bound to an undefined
		// value is not defined either, as when evaluated.
		v, found := st.find(n.name, sc)
		_, isU := v.(*Undefined)
		defined := found && !isU
		return defined == (e.name == "defined") != e.negate, nil
	}
	v, err := st.eval(e.val, sc)
	if err != nil {
		return nil, err
	}
	args, _, err := st.evalArgs(e.args, e.kwNames, e.kwVals, nil, nil, sc)
	if err != nil {
		return nil, err
	}
	r, err := fn(st, v, args)
	if err != nil {
		return nil, err
	}
	return r != e.negate, nil
}
