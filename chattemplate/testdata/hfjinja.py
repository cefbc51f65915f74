"""The Jinja2 environment the case generators render with, configured as
transformers configures chat templates (ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the generation tag, loop controls, tojson,
raise_exception, and strftime_now at a fixed time)."""
import json, datetime, jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.exceptions import TemplateError
class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)
    def _gen(self, caller): return caller()
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def raise_exception(m): raise TemplateError(m)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.datetime(2026,1,15,9,30,0).strftime(f)
