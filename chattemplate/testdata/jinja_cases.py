"""Generate jinja_random_cases.json: random templates over the features chat
templates use, rendered by real Jinja2 (run with Jinja2 3.1.6:
`python3 jinja_cases.py SEED COUNT`). Configured as transformers configures
chat templates. Outputs that print object addresses or Markup reprs are
dropped (they cannot be reproduced byte for byte)."""
import copy, json, random, re, sys, jinja2
from hfjinja import env
ctx = {"s": "Hello, World", "t": "  a b\tc \n", "n": 7, "m": -3, "f": 2.5, "g": 0.1, "b": True, "z": None,
       "l": ["b", "A", "c", "a"], "nums": [3, 1, 2], "e": [], "d": {"b": 2, "a": 1, "c": [1, {"x": "y"}]},
       "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>r</think>A", "tool_calls": [{"function": {"name": "f", "arguments": {"k": 1}}}]}]}
R = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
strs = ["'%s-%d'", "'%5.2f|%-3s|%03d'", "'{}:{:>4}'", "'{0!r}'", "'{:.3}'", "'{:,}'", "'{:x}'", "'ü ß 中'", "'\\n'", "'tab\\t'",
        "'a'", "'Hello'", "','", "''", "' x '", "'<think>'", '"q\\"t"', "'é'"]
vars_ = ["s", "t", "n", "m", "f", "g", "b", "z", "l", "nums", "e", "d", "messages", "u", "messages[1]", "d.c", "messages[-1].tool_calls[0].function"]
def lit():
    return R.choice(strs + ["0", "1", "2", "-1", "3.5", "1e3", "true", "false", "none", "[1, 'a']", "{'k': 1, 'j': [2]}", "(1, 2)", "[]"])
filters = ["tojson(indent=4)", "tojson(separators=(',', ':'))", "tojson(sort_keys=true)", "dictsort(reverse=true)", "dictsort(by='value')", "sort(attribute='role')", "sort(reverse=true)", "map('string')", "map('length')", "select('string')", "reject('none')", "selectattr('content', 'defined')", "selectattr('role', 'in', ['user', 'system'])", "sum(start=10)", "join(', ', attribute='role')", "min(attribute='role')", "unique(attribute='role')", "truncate(5)", "replace('a', 'b', 1)", "indent(4, true)", "indent('> ')", "int(5)", "float(1.5)", "round(1, 'floor')", "default(none)", "string | length", "trim('H')", "format(3)", "center(3)", "first", "list | last",
           "trim", "length", "list", "join(',')", "join", "upper", "lower", "title", "capitalize", "replace('a', 'b')", "string", "int", "float",
           "first", "last", "default('x')", "default('y', true)", "tojson", "tojson(indent=2)", "items", "dictsort", "unique", "reverse", "sort", "map('upper')",
           "select", "reject", "selectattr('role')", "map(attribute='role')", "rejectattr('role', 'equalto', 'user')", "abs", "round", "sum", "max", "min", "indent(2)", "center(9)", "wordcount", "batch(2)", "safe"]
tests = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence", "integer", "float", "boolean", "true", "false", "odd", "even", "divisibleby(2)", "in([1, 'a'])", "eq 1", "lower", "upper", "callable"]
methods = ["format(name='x')", "split(' ', 1)", "split(none, 1)", "rsplit(None, 1)", "splitlines()", "strip(' Hd')", "startswith('He', 1)", "endswith('l', 0, 4)", "replace('', '-')", "count('l', 3)", "find('l', 4)", "rfind('l')", "index('o')", "rindex('l')", "center(20, '=')", "rjust(15)", "title().swapcase()", "lower().capitalize()", "removeprefix('He')", "removesuffix('ld')", "isalpha()", "isspace()", "islower()", "isupper()", "istitle()", "get('role', 'none')", "copy()",
           "strip()", "strip('H')", "lstrip()", "rstrip('d')", "split(',')", "split()", "rsplit(',', 1)", "startswith('H')", "endswith(('d', 'x'))", "replace('l', 'L')",
           "count('l')", "find('o')", "upper()", "lower()", "title()", "capitalize()", "format(1, 2)", "get('a')", "get('zz', 0)", "keys()", "values()", "items()", "index(1)", "isdigit()", "zfill(5)", "ljust(6, '*')", "partition(',')"]
ops = ["%", "%", "~", "+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
def expr(d=0):
    if d > 3:
        return R.choice([lit(), R.choice(vars_)])
    k = R.randrange(12)
    if k == 0: return lit()
    if k == 1: return R.choice(vars_)
    if k == 2: return f"{expr(d+1)} {R.choice(ops)} {expr(d+1)}"
    if k == 3: return f"{expr(d+1)} | {R.choice(filters)}"
    if k == 4: return f"{expr(d+1)} is {R.choice(['', 'not '])}{R.choice(tests)}"
    if k == 5: return f"({expr(d+1)}).{R.choice(methods)}"
    if k == 6: return f"{expr(d+1)} if {expr(d+1)} else {expr(d+1)}"
    if k == 7:
        sub = R.choice(['0', '-1', '1:', ':2', '::-1', '1:3', "'a'", "'role'", 'n'])
        return R.choice(vars_) + "[" + sub + "]"
    if k == 8: return f"not {expr(d+1)}"
    if k == 9: return f"[{expr(d+1)}, {expr(d+1)}]"
    if k == 10: return f"({expr(d+1)})"
    return f"{{{R.choice(strs)}: {expr(d+1)}}}"
def ws():
    return R.choice(["", "", "-"])
def stmt(d=0):
    k = R.randrange(10 if d < 2 else 4)
    if k == 0: return R.choice(["text ", "\n", "  line\n", "x", "\n  "])
    if k in (1, 2): return f"{{{{{ws()} {expr()} {ws()}}}}}"
    if k == 3: return f"{{%{ws()} set {R.choice(['v', 'w'])} = {expr()} {ws()}%}}" + R.choice(["", "{{ v }}"])
    if k == 4:
        return f"{{%{ws()} if {expr()} {ws()}%}}{body(d)}{{% elif {expr()} %}}{body(d)}{{% else %}}{body(d)}{{%{ws()} endif {ws()}%}}"
    if k == 5:
        it = R.choice(["l", "nums", "messages", "d", "d.items()", "range(3)", "s", "e", "l | sort", "messages[1:]"])
        tgt = "k, val" if it == "d.items()" else "x"
        extra = R.choice(["", f" if {expr()}"])
        return f"{{%{ws()} for {tgt} in {it}{extra} {ws()}%}}{{{{ loop.index }}}}{{{{ loop.last }}}}{body(d)}{R.choice(['', '{% if loop.index > 1 %}{% break %}{% endif %}', '{% continue %}'])}{{% else %}}E{{% endfor %}}"
    if k == 6:
        return "{% set ns = namespace(c=0) %}{% for x in l %}{% set ns.c = ns.c + 1 %}" + body(d) + "{% endfor %}{{ ns.c }}"
    if k == 7:
        return "{% macro mm(a, b='d') %}[{{ a }}|{{ b }}]" + body(d) + "{% endmacro %}{{ mm(" + expr() + ") }}{{ mm(1, b=" + expr() + ") }}"
    if k == 8:
        return "{% filter " + R.choice(["upper", "trim", "lower"]) + " %}" + body(d) + "{% endfilter %}"
    return "{% set blk %}" + body(d) + "{% endset %}{{ blk | length }}"
def body(d):
    return "".join(stmt(d+1) for _ in range(R.randrange(1, 3)))
cases = []
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2000):
    src = "".join(stmt() for _ in range(R.randrange(1, 4)))
    try:
        out = env.from_string(src).render(**copy.deepcopy(ctx))
        if re.search(r" at 0x[0-9a-f]+>", out, re.I) or "Markup(" in out:
            continue
        cases.append({"src": src, "out": out})
    except Exception as ex:
        cases.append({"src": src, "err": type(ex).__name__})
# Keep every rendered case and a sample of the failing ones.
errs = [c for c in cases if "err" in c]
cases = [c for c in cases if "err" not in c] + errs[:400]
json.dump({"jinja2": jinja2.__version__, "ctx": ctx, "cases": cases}, open("jinja_random_cases.json", "w"), ensure_ascii=False, indent=0)

