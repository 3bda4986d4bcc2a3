#!/usr/bin/env python3
"""Tokenizer goldens for real model vocabularies, made with llama.cpp.

    python3 tests/ref/gen_tok_goldens.py [--check] [--model FILE] [--name NAME]

llama.cpp comes from PyPI (llama-cpp-python 0.3.36, which builds the
llama.cpp it vendors); the model is opened with vocab_only=True. The cases
are every string of the shared tokenizer tests ($RVL_SHARED_DATA/tokenizers/
ggml-vocab-*.gguf.inp, llama.cpp's test-tokenizer-0 inputs, in file order,
duplicates dropped) followed by EXTRA below: what a SentencePiece vocabulary
with byte fallback and Gemma's added tokens must get right (runs of spaces,
newlines and tabs, which Gemma has as user-defined tokens; emoji, CJK and
characters only byte fallback can spell; digits; HTML tags, user-defined
too; the control tokens of its chat format).

Writes, under tests/ref/tok/:

  NAME.inp          the cases, separated by lines "__ggml_vocab_test__" (the
                    format of the shared .inp files)
  NAME.out          per case one line of token ids as `ruvllm run` tokenizes
                    a prompt: add_special (BOS when the model's
                    add_bos_token says so), special tokens not parsed
  NAME.special.out  the same with special tokens parsed (`--special`)
  NAME.detok        per case llama.cpp's pieces (llama_token_to_piece) of NAME.out's ids
                    without the BOS (control tokens not rendered), in the
                    .inp format; NAME.special.detok: of NAME.special.out's,
                    control tokens rendered
  NAME.versions     the versions used and the model file's sha256

Checked in `make check` (no Python) by tests/test_tok_real.c, which skips
when the model file is absent. The script also checks that llama.cpp's own
detokenizer gives each case back and reports (in NAME.versions) those that
do not: test_tok_real requires our detokenizer to give llama.cpp's text.

--check compares with the committed files instead of writing; exit 1 on a
difference.
"""
import argparse
import hashlib
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "tok"
SEP = b"\n__ggml_vocab_test__\n"
SHARED = ["gpt-2", "llama-spm", "deepseek-coder", "falcon", "starcoder", "mpt"]

MODELS = {
    # name -> file name in ${XDG_CACHE_HOME:-~/.cache}/ruvllm/models, or a
    # zstd-compressed vocabulary in tests/ref/tok/ (tests/ref/gen_tok_vocab19.py)
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gpt-oss": "gpt-oss.vocab.gguf.zst",
    "deepseek-v3": "deepseek-v3.vocab.gguf.zst",
}

EXTRA = [
    # whitespace: Gemma has user-defined tokens for runs of 2..31 spaces,
    # of newlines and of tabs
    "a  b", "a   b", "a    b", " " * 31, " " * 32, " " * 70, "  leading", "trailing   ",
    "\n", "\n\n", "\n\n\n", "line1\nline2\n\nline4\n\n\n\n", "\n" * 40,
    "\t", "\tx", "\t\t\tindented", "\t" * 40, "a \t \n b", " \n \n ", "\r\n\r\n",
    "def f(x):\n    return x\n\n\nclass A:\n\tpass\n",
    # emoji, CJK, other scripts, combining marks
    "🦙", "🦙🦙 llamas 🐪", "👨‍👩‍👧‍👦 family", "🇫🇷🇩🇪", "😀😃😄😁😆😅🤣😂",
    "日本語のテキスト", "中文分词测试，标点。", "한국어 문장입니다", "Привет, мир!",
    "مرحبا بالعالم", "שלום עולם", "ελληνικά", "हिन्दी पाठ", "ภาษาไทย",
    "e\u0301 vs \u00e9", "Z\u0351\u036b\u0343a\u0310l\u0352go",
    # characters spelled by byte fallback: private use, rare planes,
    # controls, noncharacters
    "\ue000\uf8ff", "\U000f0000\U0010fffd", "\U0001d11e\U0001f9ff",
    "\x01\x02\x1b[0m\x7f", "\ufeffBOM", "\u2028\u2029", "\U00020000\U0002a6d6",
    "mixed \U000e0041 tag", "\u0000nul",
    # digits: Gemma splits numbers into single digits
    "0", "42", "3.14159", "1234567890", "2024-07-26 12:00:00", "1e-10 -7 +8",
    "$1,000,000.00", "٠١٢٣٤٥", "①②③",
    # user-defined tokens (matched without --special too) and control ones
    "<h1>Title</h1>", "<table><tr><td>1</td></tr></table>", "a<b>b</b>c",
    "[multimodal]", "x<start_of_image>y<end_of_image>z",
    "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\nSure:<end_of_turn>",
    "<bos><start_of_turn>user\nhi<end_of_turn>", "<eos>", "<pad><unk><mask>",
    "<unused0><unused6241>", "<start_of_turn", "<end_of_turn >", "<<start_of_turn>>",
    "text<start_of_turn>", "<start_of_turn>  spaced  <end_of_turn>",
    # SentencePiece odds and ends
    "\u2581", "\u2581\u2581x", " \u2581 ", "Hello world", " Hello world", "Hello World!",
    "   ", "", "a", "Ё", "\u00a0nbsp\u00a0", "ﬁ ligature", "ＡＢＣ full width",
    "don't can't won't", "https://example.com/path?q=1&r=2#frag", "user@example.org",
    "It's 5°C — not 41°F…", "«quotes» „low“ “curly”",
]


# cases aimed at one vocabulary, after EXTRA
EXTRA_BY_NAME = {
    # o200k: the regex's case-aware words and contractions, digit triples,
    # slashes kept with punctuation; harmony's special tokens (control)
    "gpt-oss": [
        "HTTPServer XMLHttpRequest camelCaseWord ALLCAPS iPhone", "I'M you'RE they'Ve WE'LL",
        "Straße ÜBER über ÉCOLE école ǅungla", "ΑΘΗΝΑ Αθήνα", "МОСКВА Москва",
        "12345678 1,234,567.891 v2.0.1", "a/b/c //x// path/to/file.txt\n", "!!!\n\n???///",
        "<|start|>user<|message|>Hi<|end|><|start|>assistant",
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{\"a\":1}<|call|>",
        "<|startoftext|><|endoftext|><|endofprompt|><|reserved_200017|><|reserved_201087|>",
        "<|channel|", "<|end|>>", "text<|message|>text",
    ],
    # DeepSeek-V3: digit triples, CJK and kana runs, punctuation+letters,
    # its full-width-bar special tokens
    "deepseek-v3": [
        "1234567 12.3456 2024年7月26日", "ひらがなカタカナ漢字 mixed", "中文，标点。English!",
        ".NET #include @user $var 'quoted'", "a.b.c (x) [y] {z}",
        "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜>Hello<｜end▁of▁sentence｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<think>\nreasoning\n</think>\n\nanswer", "<｜User｜", "｜>", "<｜place▁holder▁no▁0｜>",
    ],
}


def detokenize(llama_cpp, llm, ids, special):
    """llama.cpp's text of ids as its CLI streams it: llama_token_to_piece
    per token, concatenated (common_token_to_piece). Not Llama.detokenize,
    whose 32-byte buffer drops longer pieces (SmolLM2 has a token of 64
    spaces)."""
    out = b""
    buf = (llama_cpp.ctypes.c_char * 4096)()
    for t in ids:
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, t, buf, len(buf), 0, special)
        assert 0 <= n <= len(buf)
        out += bytes(buf[:n])
    return out


def model_path(name):
    if MODELS[name].endswith(".zst"):
        return str(OUT / MODELS[name])
    d = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(d, "ruvllm", "models", MODELS[name])


def shared_cases(shared):
    out, seen = [], set()
    for v in SHARED:
        p = os.path.join(shared, "tokenizers", "ggml-vocab-%s.gguf.inp" % v)
        data = open(p, "rb").read()
        if data.endswith(SEP):
            data = data[: -len(SEP)]
        for c in data.split(SEP):
            if c not in seen:
                seen.add(c)
                out.append(c)
    return out, seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", default="gemma3", choices=sorted(MODELS))
    ap.add_argument("--model", help="model file (default: the cached one)")
    ap.add_argument("--shared", default=os.environ.get("RVL_SHARED_DATA")
                    or str(HERE.parent / "data" / "shared"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    path = a.model or model_path(a.name)
    cases, seen = shared_cases(a.shared)
    n_shared = len(cases)
    for s in EXTRA + EXTRA_BY_NAME.get(a.name, []):
        b = s.encode("utf-8")
        if b not in seen:
            seen.add(b)
            cases.append(b)

    load = path
    if path.endswith(".zst"):   # a vocabulary of tests/ref/tok: decompressed for llama.cpp
        import subprocess, tempfile
        tmpdir = tempfile.mkdtemp()
        load = os.path.join(tmpdir, os.path.basename(path)[:-4])
        subprocess.run(["zstd", "-d", "-q", "-f", path, "-o", load], check=True)
    llm = Llama(model_path=load, vocab_only=True, verbose=False)
    plain, special, bad, detok, sdetok = [], [], [], [], []
    for i, c in enumerate(cases):
        ids = llm.tokenize(c, add_bos=True, special=False)
        sids = llm.tokenize(c, add_bos=True, special=True)
        plain.append(ids)
        special.append(sids)
        bos = llm.token_bos()
        body = ids[1:] if ids and ids[0] == bos else ids
        sbody = sids[1:] if sids and sids[0] == bos else sids
        detok.append(detokenize(llama_cpp, llm, body, False))
        sdetok.append(detokenize(llama_cpp, llm, sbody, True))
        if detok[-1] != c or sdetok[-1] != c:
            bad.append(i)

    sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
    files = {
        a.name + ".inp": SEP.join(cases) + SEP,
        a.name + ".out": b"".join((" ".join(map(str, x)) + "\n").encode() for x in plain),
        a.name + ".special.out": b"".join((" ".join(map(str, x)) + "\n").encode() for x in special),
        a.name + ".detok": SEP.join(detok) + SEP,
        a.name + ".special.detok": SEP.join(sdetok) + SEP,
        a.name + ".versions": (
            "# made by tests/ref/gen_tok_goldens.py --name %s\n"
            "model %s\nsha256 %s\nllama-cpp-python %s\npython %s\n"
            "cases %d (%d shared, %d extra)\n"
            "llama.cpp does not detokenize back to the text: %s\n"
            % (a.name, os.path.basename(path), sha, llama_cpp.__version__,
               platform.python_version(), len(cases), n_shared, len(cases) - n_shared,
               " ".join(map(str, bad)) or "none")).encode(),
    }
    OUT.mkdir(exist_ok=True)
    diff = 0
    for fn, data in files.items():
        p = OUT / fn
        if a.check:
            if not p.exists() or p.read_bytes() != data:
                print("differs:", p)
                diff += 1
        else:
            p.write_bytes(data)
    print("%d cases (%d shared), llama.cpp round trip fails on %d: %s"
          % (len(cases), n_shared, len(bad), bad))
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
