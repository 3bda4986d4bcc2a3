#!/usr/bin/env python3
"""Reference data for `ruvllm info`, read with gguf-py (PyPI `gguf`).

    python3 tests/ref/gguf_info_ref.py [--check] [--model FILE] [--shared DIR]

For the default model and every $RVL_SHARED_DATA/tokenizers/*.gguf this
reads the file with gguf.GGUFReader and writes, under tests/ref/info/:

  <file>.json   what gguf-py sees, compactly: version, alignment, data
                offset, every metadata key (gguf-py type name, count,
                digest of the value, the value itself when short), every
                tensor (GGMLQuantizationType name and id, shape, element
                and byte counts, absolute data offset, digest of its data).
                tests/test_info_ref.c checks our reader against it.
  <file>.lines  the same facts as flat lines in the spelling of
                `ruvllm info --json --all` (values escaped as its JSON
                writer does, arrays by type and count only);
                tests/cli/t0010-info-ref.sh flattens the command's output
                the same way and diffs.

and tests/ref/ggml_types.json: gguf-py's tensor types with block size and
bytes per block (GGML_QUANT_SIZES), which test_info_ref.c checks against
rvl_type_get().

Digests are XXH3-64 (seed 0, 16 lowercase hex digits) of a canonical
serialization that C computes from rvl_kv without any text conversion:
  - a fixed-size value (u8..f64, bool) is its little-endian bytes in its
    GGUF type (bool: one byte, 0 or 1);
  - a string is its byte length as a little-endian u64, then its bytes;
  - an array is the concatenation of its elements' serializations (no
    count, no type: those are separate fields); a scalar is one element.
So the digest of a numeric array equals XXH3 of its bytes in the file; the
reader under test must find exactly that range. Tensor digests are XXH3 of
the n_bytes bytes at the tensor's data offset.

Shapes are ReaderTensor.shape, which is GGUF's ne order (innermost first),
the order `ruvllm info` prints for GGUF; no conversion is needed.

--check compares with the committed files instead of writing them (exit 1
on any difference). Needs numpy, gguf and xxhash (pip install gguf xxhash).
"""
import argparse
import glob
import json
import math
import os
import struct
import sys
from pathlib import Path

import numpy as np

import gguf
import xxhash
from gguf import GGUFValueType as V

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# ruvllm's spelling of the GGUF value types (rvl_gguf_vtype_name), by id.
RVL_VTYPE = {V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16",
             V.UINT32: "u32", V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool",
             V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64",
             V.INT64: "i64", V.FLOAT64: "f64"}
HEAD = 4             # array elements shown in the .json golden
MAX_STR_VALUE = 256  # longer strings: length and digest only


def default_model():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ruvllm", "models", DEFAULT_MODEL_FILE)


# ----------------------------------------------------------------------
# Values as gguf-py holds them
# ----------------------------------------------------------------------

def field_layout(f):
    """(main type, element type or None, list of element parts) of a
    metadata field, from gguf-py's raw parts. parts = [klen, key, vtype,
    (itype, count,) element parts...]; f.data indexes the element parts."""
    main = V(int(f.parts[2][0]))
    if main == V.ARRAY:
        elem = V(int(f.parts[3][0]))   # also right for empty arrays
        assert int(f.parts[4][0]) == len(f.data)
    else:
        elem = None
    return main, elem, [f.parts[i] for i in f.data]


def canon(vtype, parts):
    """Canonical serialization of elements of `vtype` (see the docstring)."""
    if vtype == V.STRING:
        return b"".join(struct.pack("<Q", p.nbytes) + p.tobytes() for p in parts)
    # raw bytes as in the file: the file is little-endian (checked in describe)
    return b"".join(p.tobytes() for p in parts)


def digest(b):
    return xxhash.xxh3_64_hexdigest(b)


def json_value(vtype, part):
    """One element as a JSON value for the .json golden."""
    if vtype == V.STRING:
        b = part.tobytes()
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return s if len(b) <= MAX_STR_VALUE else None
    v = part.tolist()[0]
    if vtype == V.BOOL:
        return bool(v)
    if vtype in (V.FLOAT32, V.FLOAT64):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v       # json writes repr(): the shortest exact double
    v = int(v)
    return v if abs(v) <= 2 ** 53 else str(v)   # cJSON holds doubles


# ----------------------------------------------------------------------
# ruvllm's JSON writer, mirrored (lib/base/jw.c) for the .lines golden
# ----------------------------------------------------------------------

ESC = {0x22: '\\"', 0x5c: "\\\\", 0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t",
       0x08: "\\b", 0x0c: "\\f"}


def utf8_len(b, i):
    """Length of the valid UTF-8 sequence at b[i], or -1 (as jsonw.c)."""
    c = b[i]
    if c < 0x80:
        return 1
    n = 2 if 0xc2 <= c <= 0xdf else 3 if 0xe0 <= c <= 0xef else 4 if 0xf0 <= c <= 0xf4 else 0
    if n == 0 or i + n > len(b):
        return -1
    try:
        b[i:i + n].decode("utf-8")   # rejects overlongs, surrogates, > U+10FFFF
    except UnicodeDecodeError:
        return -1
    return n


def jw_str(b):
    out = ['"']
    i = 0
    while i < len(b):
        c = b[i]
        if c < 0x80:
            out.append(ESC.get(c) or ("\\u%04x" % c if c < 0x20 or c == 0x7f else chr(c)))
            i += 1
            continue
        n = utf8_len(b, i)
        if n < 0:
            out.append("\\ufffd")
            i += 1
        else:
            out.append(b[i:i + n].decode("utf-8"))
            i += n
    out.append('"')
    return "".join(out)


def jw_scalar(vtype, part):
    if vtype == V.STRING:
        return jw_str(part.tobytes())
    v = part.tolist()[0]
    if vtype == V.BOOL:
        return "true" if v else "false"
    if vtype in (V.FLOAT32, V.FLOAT64):
        if not math.isfinite(v):
            return "null"
        return ("%.9g" if vtype == V.FLOAT32 else "%.17g") % v
    return str(int(v))


# ----------------------------------------------------------------------
# One file
# ----------------------------------------------------------------------

def describe(path, source):
    r = gguf.GGUFReader(path)
    if r.byte_order != "I" or sys.byteorder != "little":
        sys.exit("gguf_info_ref: %s: only little-endian files on little-endian hosts" % path)
    size = os.path.getsize(path)
    doc = {
        "file": os.path.basename(path),
        "source": source,
        "reader": "gguf-py %s (GGUFReader)" % gguf_version(),
        "size": size,
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "n_kv": int(r.fields["GGUF.kv_count"].parts[0][0]),
        "n_tensors": int(r.fields["GGUF.tensor_count"].parts[0][0]),
        "metadata": [],
        "tensors": [],
    }
    lines = ["version\t%d" % doc["version"], "alignment\t%d" % doc["alignment"],
             "data_offset\t%d" % doc["data_offset"], "size\t%d" % size]

    for name, f in r.fields.items():
        if name.startswith("GGUF."):   # gguf-py's pseudo-fields for the header
            continue
        main, elem, parts = field_layout(f)
        key_bytes = f.parts[1].tobytes()
        kv = {"key": name, "type": main.name}
        if main == V.ARRAY:
            kv["elem_type"] = elem.name
            kv["count"] = len(parts)
            kv["digest"] = digest(canon(elem, parts))
            kv["head"] = [json_value(elem, p) for p in parts[:HEAD]]
            lines.append("kv\t%s\tarray\t%s\t%d" % (jw_str(key_bytes), RVL_VTYPE[elem], len(parts)))
        else:
            assert len(parts) == 1
            kv["digest"] = digest(canon(main, parts))
            if main == V.STRING:
                kv["len"] = int(parts[0].nbytes)
            kv["value"] = json_value(main, parts[0])
            lines.append("kv\t%s\t%s\t%s" % (jw_str(key_bytes), RVL_VTYPE[main],
                                             jw_scalar(main, parts[0])))
        doc["metadata"].append(kv)
    assert len(doc["metadata"]) == doc["n_kv"]

    for t in r.tensors:
        raw = np.asarray(t.data).view(np.uint8).reshape(-1)
        assert raw.nbytes == t.n_bytes
        shape = [int(d) for d in t.shape]      # GGUF ne order
        doc["tensors"].append({
            "name": t.name,
            "type": t.tensor_type.name,
            "type_id": int(t.tensor_type),
            "shape": shape,
            "n_elements": int(t.n_elements),
            "n_bytes": int(t.n_bytes),
            "offset": int(t.data_offset),
            "digest": digest(raw.tobytes()),
        })
        lines.append("tensor\t%s\t%s\t%d\t%s\t%d\t%d\t%d" % (
            jw_str(t.name.encode("utf-8")), t.tensor_type.name, int(t.tensor_type),
            ",".join(map(str, shape)), t.n_elements, t.n_bytes, t.data_offset))
    return doc, lines


def gguf_version():
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:
        return "?"


def dump_doc(doc):
    """JSON with one metadata pair or tensor per line (small, diffable)."""
    head = {k: v for k, v in doc.items() if k not in ("metadata", "tensors")}
    out = ["{"]
    for k, v in head.items():
        out.append("  %s: %s," % (json.dumps(k), json.dumps(v)))
    for sect in ("metadata", "tensors"):
        items = doc[sect]
        out.append('  "%s": [' % sect)
        for i, it in enumerate(items):
            out.append("    " + json.dumps(it, ensure_ascii=True) + ("," if i + 1 < len(items) else ""))
        out.append("  ]" + ("," if sect == "metadata" else ""))
    out.append("}")
    return "\n".join(out) + "\n"


def types_doc():
    rows = []
    for t in gguf.GGMLQuantizationType:
        bs, ts = gguf.GGML_QUANT_SIZES[t]
        rows.append('  {"name": %s, "id": %d, "block_size": %d, "type_size": %d}'
                    % (json.dumps(t.name), int(t), bs, ts))
    return "[\n" + ",\n".join(rows) + "\n]\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("RVL_REF_MODEL") or default_model())
    ap.add_argument("--shared", default=os.environ.get("RVL_SHARED_DATA") or str(REPO / ".." / "shared" / "data"))
    ap.add_argument("--out", default=str(HERE / "info"))
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    args = ap.parse_args()

    inputs = [(args.model, "model")]
    toks = sorted(glob.glob(os.path.join(args.shared, "tokenizers", "*.gguf")))
    if not toks:
        sys.exit("gguf_info_ref: no %s/tokenizers/*.gguf" % args.shared)
    inputs += [(p, "tokenizers") for p in toks]

    outputs = {str(HERE / "ggml_types.json"): types_doc()}
    for path, source in inputs:
        if not os.path.exists(path):
            sys.exit("gguf_info_ref: %s: missing (run `make model`)" % path)
        doc, lines = describe(path, source)
        base = os.path.join(args.out, os.path.basename(path))
        outputs[base + ".json"] = dump_doc(doc)
        outputs[base + ".lines"] = "\n".join(lines) + "\n"
        print("%-40s %3d keys %4d tensors  alignment %d  data offset %d" % (
            os.path.basename(path), doc["n_kv"], doc["n_tensors"], doc["alignment"],
            doc["data_offset"]))

    bad = 0
    if not args.check:
        os.makedirs(args.out, exist_ok=True)
    for p, text in outputs.items():
        if args.check:
            try:
                old = Path(p).read_text(encoding="utf-8")
            except FileNotFoundError:
                old = None
            if old != text:
                print("differs: %s" % p)
                bad += 1
        else:
            Path(p).write_text(text, encoding="utf-8")
    if args.check:
        print("%d of %d reference files differ" % (bad, len(outputs)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
