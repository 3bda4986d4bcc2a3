#!/usr/bin/env python3
"""Render every chat template x every conversation with Python's jinja2
under transformers' exact settings and write the expected outputs that
tests/test_jinja.c compares with byte for byte.

    pip install jinja2==3.1.6
    python3 tests/ref/gen_template_goldens.py           # rewrites golden/
    python3 tests/ref/gen_template_goldens.py --check   # compares only

Inputs (tests/data/templates/):
  templates.json         name -> bos/eos tokens, family, source; optional
                         "file" (the template is FILE.jinja, not NAME.jinja)
                         and "context" (more variables, e.g. Qwen3's
                         enable_thinking, passed as transformers passes
                         apply_chat_template's extra keyword arguments)
  NAME.jinja             the template text, as in the model's tokenizer_config
  conv/CONV.json         {"messages": [...], "add_generation_prompt": bool}
  features.json          {"context": {...}, "cases": [template, ...]}: one
                         template per engine feature, all rendered with the
                         same context
Outputs (tests/data/templates/golden/):
  NAME.CONV.txt          the rendered text, exactly
  NAME.CONV.err          when jinja2 raises: "ExceptionType: message"
  features.json          [{"out": text} or {"err": "ExceptionType: message"}, ...]

The environment replicates transformers' (chat_template_utils.py,
_compile_jinja_template / render_jinja_template, transformers 4.4x-4.5x):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]) (transformers' AssistantTracker extension only
adds {% generation %}, unused by these templates), tojson replaced by
json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
sort_keys=sort_keys), globals raise_exception (TemplateError) and
strftime_now, here fixed to 2024-07-26 12:00:00 for reproducibility (the C
test passes the same instant). The context is messages, tools=None,
documents=None, add_generation_prompt and the model's special tokens
(bos_token / eos_token; a token that is null is not passed).
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

JINJA2_VERSION = "3.1.6"
NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)   # = 1721995200 UTC seconds

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "templates")


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, src, conv, meta):
    ctx = {"messages": conv["messages"], "tools": conv.get("tools"), "documents": None,
           "add_generation_prompt": conv["add_generation_prompt"]}
    for k in ("bos", "eos"):
        if meta.get(k) is not None:
            ctx[k + "_token"] = meta[k]
    ctx.update(meta.get("context", {}))
    try:
        return "txt", env.from_string(src).render(**ctx)
    except Exception as e:   # the C engine must fail too
        return "err", "%s: %s" % (type(e).__name__, e)


def main():
    check = "--check" in sys.argv
    if jinja2.__version__ != JINJA2_VERSION:
        print("warning: jinja2 %s, goldens were made with %s" % (jinja2.__version__, JINJA2_VERSION))
    env = make_env()
    meta = json.load(open(os.path.join(DATA, "templates.json"), encoding="utf-8"))
    convs = sorted(f[:-5] for f in os.listdir(os.path.join(DATA, "conv")) if f.endswith(".json"))
    gold = os.path.join(DATA, "golden")
    os.makedirs(gold, exist_ok=True)
    bad = 0
    n = 0
    for name in sorted(meta):
        src = open(os.path.join(DATA, meta[name].get("file", name) + ".jinja"), encoding="utf-8",
                   newline="").read()
        for c in convs:
            conv = json.load(open(os.path.join(DATA, "conv", c + ".json"), encoding="utf-8"))
            kind, text = render(env, src, conv, meta[name])
            path = os.path.join(gold, "%s.%s.%s" % (name, c, kind))
            other = os.path.join(gold, "%s.%s.%s" % (name, c, "err" if kind == "txt" else "txt"))
            n += 1
            if check:
                try:
                    old = open(path, encoding="utf-8", newline="").read()
                except OSError:
                    old = None
                if old != text or os.path.exists(other):
                    print("differs:", path)
                    bad += 1
                continue
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            if os.path.exists(other):
                os.remove(other)
    feat = json.load(open(os.path.join(DATA, "features.json"), encoding="utf-8"))
    res = []
    for src in feat["cases"]:
        try:
            res.append({"out": env.from_string(src).render(**feat["context"])})
        except Exception as e:
            res.append({"err": "%s: %s" % (type(e).__name__, e)})
    text = json.dumps(res, ensure_ascii=False, indent=0) + "\n"
    fpath = os.path.join(gold, "features.json")
    if check:
        old = open(fpath, encoding="utf-8").read() if os.path.exists(fpath) else None
        if old != text:
            print("differs:", fpath)
            bad += 1
    else:
        with open(fpath, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    print("%d renders, %d differ" % (n, bad) if check else "%d goldens written" % n)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
