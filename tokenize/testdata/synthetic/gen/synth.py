import json, copy
import os
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..') + '/'
letters = "abcdefghijklmnopqrstuvwxyz"
base_chars = list(letters) + list("0123456789") + ["▁", " ", "-", ".", ",", "!", "'", "[", "]", "<", ">", "/", "é"]
def char_vocab(extra=(), fallback=False):
    v = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for c in base_chars:
        v.setdefault(c, len(v))
    if fallback:
        for b in range(256):
            v["<0x%02X>" % b] = len(v)
    merges = [["▁", "t"], ["h", "e"], ["▁t", "he"], ["l", "l"], ["ll", "o"], ["e", "llo"], ["h", "ello"], ["▁", "hello"], ["a", "b"], ["1", "2"], ["-", "-"], ["o", "r"], ["w", "or"], ["wor", "l"], ["worl", "d"], ["▁", "world"]]
    for a, b in merges:
        v.setdefault(a, len(v)); v.setdefault(b, len(v)); v.setdefault(a + b, len(v))
    for e in extra:
        v.setdefault(e, len(v))
    return v, merges

def added(specs):
    res = []
    for content, id_, special, normalized, lstrip, rstrip, single in specs:
        res.append({"id": id_, "content": content, "single_word": single, "lstrip": lstrip, "rstrip": rstrip, "normalized": normalized, "special": special})
    return res

def tok(normalizer, pre, post, model, added_tokens):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": None, "model": model}

def bpe(vocab, merges, unk="<unk>", fuse=False, fallback=False, ignore=False, merge_form="list"):
    m = merges if merge_form == "list" else [a + " " + b for a, b in merges]
    return {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": fuse, "byte_fallback": fallback, "ignore_merges": ignore, "vocab": vocab, "merges": m}

template = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}

files = {}
v, mg = char_vocab(extra=["[MASK]", "hello", "ab"])
n = len(v)
adds = added([("<s>", 1, True, False, False, False, False), ("</s>", 2, True, False, False, False, False),
              ("[MASK]", v["[MASK]"], True, False, True, True, False), ("hello", v["hello"], False, True, False, False, True),
              ("ab", v["ab"], False, False, False, False, False)])
files["metaspace_first"] = tok(
    {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True, "strip_right": True}]},
    {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": True}]},
    template, bpe(v, mg, fuse=True), adds)
files["metaspace_always_nosplit"] = tok(
    {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
    {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}]},
    None, bpe(v, mg, fuse=False, merge_form="string"), adds)
files["metaspace_legacy_never"] = tok(
    {"type": "NFD"},
    {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": True},
    {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}, template]},
    bpe(v, mg, fuse=True), adds)
vf, mgf = char_vocab(fallback=True)
files["byte_fallback"] = tok(
    {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    None, template, bpe(vf, mgf, fuse=True, fallback=True), added([("<s>", 1, True, False, False, False, False), ("</s>", 2, True, False, False, False, False)]))
for beh in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
    for inv in [False, True]:
        files["split_%s_%s" % (beh, "invert" if inv else "plain")] = tok(
            {"type": "NFKD"},
            {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "[aeiou]|\\d+"}, "behavior": beh, "invert": inv},
                                                   {"type": "Split", "pattern": {"String": "-"}, "behavior": beh, "invert": inv}]},
            None, bpe(v, mg, fuse=True), adds)
# byte level with GPT-2 regex and prefix space
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, [chr(c) for c in cs]))
b2u = bytes_to_unicode()
bv = {}
for b in range(256):
    bv[b2u[b]] = len(bv)
bmerges = [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["l", "l"], ["ll", "o"], ["e", "llo"], ["h", "ello"], ["Ġ", "hello"], ["Ġ", "Ġ"], ["ĠĠ", "ĠĠ"], ["1", "2"], ["12", "3"]]
for a, b in bmerges:
    bv.setdefault(a + b, len(bv))
bv["Ġworld"] = len(bv)  # reachable only through ignore_merges
badds = added([("<|end|>", len(bv), True, False, False, False, False), ("  ", len(bv) + 1, False, True, False, False, False)])
files["bytelevel_gpt2"] = tok(
    {"type": "Replace", "pattern": {"Regex": "\\t"}, "content": "  "},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    bpe(bv, bmerges, unk=None, ignore=True, merge_form="string"), badds)
files["bytelevel_noprefix_lower"] = tok(
    {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "NFC"}]},
    {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
                                           {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    None, bpe(bv, bmerges, unk=None, ignore=False), badds)
for name, t in files.items():
    json.dump(t, open(out + name + ".json", "w"), ensure_ascii=False, indent=1)
inputs = ["", " ", "hello world", "  Hello World  ", "the hello, ab then abab", "x[MASK] y", "x  [MASK]  y", "hellohello hello-hello",
          "12 123-4567 ½ ②", "ﬁne CAFÉ café", "tab\there\t\tx", "a--b---c", "é ü ñ 中文 😀", "<s>hi</s> <s> </s>", "unk ~ ^ 中 z",
          "İstanbul ΣΑΣ", "the theme 'world' hello!", "<|end|>x  y   z", "12312", "aeiou-xyz-", "-a-", "\n\n a\r\nb"]
json.dump(inputs, open(out + "inputs.json", "w"), ensure_ascii=False, indent=1)
print(len(files))
