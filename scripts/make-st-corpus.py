#!/usr/bin/env python3
"""Generate the safetensors fuzz seed corpus (tests/fuzz/corpus/safetensors/).

Deterministic: the same files, byte for byte, on every run. Valid files of
each dtype and shape kind, truncations, bit flips and hostile headers; the
libFuzzer harness is tests/fuzz/fuzz_safetensors.c and `make check` replays
every file under ASan/UBSan. Files this script writes are named gen-*;
other files in the directory are left alone: fuzz-* are inputs libFuzzer
found that add coverage (`fuzz_safetensors -merge=1`), crash-* would be
fixed crashers.

usage: scripts/make-st-corpus.py [OUTDIR]
"""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fuzz", "corpus", "safetensors"))

DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
          "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def pattern(n, seed=1):
    return bytes((seed * 17 + i * 7) & 0xFF for i in range(n))


def image(header, data=b"", hlen=None, pad=True):
    """u64 LE header length, header (str or bytes), data."""
    if isinstance(header, str):
        header = header.encode()
    if pad:
        header += b" " * ((8 - len(header) % 8) % 8)
    n = len(header) if hlen is None else hlen
    return struct.pack("<Q", n) + header + data


def st(tensors, metadata=None):
    """A valid file from [(name, dtype, shape)] in order."""
    hdr, off = {}, 0
    if metadata is not None:
        hdr["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = DTYPES[dtype]
        for d in shape:
            n *= d
        hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    return image(json.dumps(hdr, separators=(",", ":"), ensure_ascii=False), pattern(off))


def one(entry, data=b""):
    return image('{"w":' + entry + "}", data)


files = {}

# ---- valid files -------------------------------------------------------------
for dt in DTYPES:
    files["valid-%s" % dt.lower()] = st([("w", dt, [2, 3])])
files["valid-all-dtypes"] = st([("t%d" % i, dt, [3]) for i, dt in enumerate(DTYPES)],
                               {"format": "pt"})
files["valid-scalar"] = st([("s", "F32", [])])
files["valid-zero-dims"] = st([("z", "F32", [0, 4]), ("a", "U8", [2]), ("y", "I64", [3, 0])])
files["valid-8-dims"] = st([("w", "I8", [1, 2, 1, 2, 1, 2, 1, 2])])
files["valid-metadata"] = st([("w", "F16", [4])], {"format": "pt", "note": "h\u00e9llo \"q\""})
files["valid-empty"] = image("{}")
files["valid-empty-metadata"] = image('{"__metadata__":{}}')
files["valid-unsorted"] = image(
    '{"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},'
    '"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}', pattern(5))
files["valid-unicode-name"] = st([("\u00fcber.\u6f22\u5b57.weight", "BF16", [2, 2])])
files["valid-unknown-field"] = one(
    '{"dtype":"U8","extra":{"k":[1,2]},"shape":[1],"data_offsets":[0,1]}', b"\x01")
files["valid-many"] = st([("layers.%d.w" % i, "F16", [2, i % 3 + 1]) for i in range(24)],
                         {"format": "pt", "a": "b"})
files["valid-zero-first-huge"] = one(
    '{"dtype":"F64","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}')
files["valid-unpadded"] = image('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
                                b"\x07", pad=False)

# ---- truncations and bit flips of a valid file --------------------------------
base = st([("a", "F32", [2]), ("b", "I8", [3])], {"format": "pt"})
for n in (0, 1, 7, 8, 9, 20, len(base) - 12, len(base) - 11, len(base) - 1):
    files["trunc-%03d" % n] = base[:n]
state = 12345
for k in range(16):
    state = (state * 1103515245 + 12345) & 0x7FFFFFFF
    pos = state % len(base)
    b = bytearray(base)
    b[pos] ^= 1 << (k % 8)
    files["flip-%02d" % k] = bytes(b)

# ---- hostile headers ------------------------------------------------------------
H = {}
H["hlen-past-eof"] = image("{}", hlen=1000)
H["hlen-huge"] = image("{}", hlen=10 ** 15)
H["hlen-max"] = image("{}", hlen=2 ** 64 - 1)
H["hlen-zero"] = image("", hlen=0)
H["short"] = b"\x02\x00\x00"
H["not-object"] = image("[]")
H["string-root"] = image('"x"')
H["bom"] = image(b"\xef\xbb\xbf{}")
H["invalid-json"] = image('{"w": }')
H["unterminated"] = image('{"w":{"dtype":"U8"', pad=False)
H["trailing-json"] = image("{} {}")
H["missing-dtype"] = one('{"shape":[1],"data_offsets":[0,1]}', b"\x00")
H["missing-shape"] = one('{"dtype":"U8","data_offsets":[0,1]}', b"\x00")
H["missing-offsets"] = one('{"dtype":"U8","shape":[1]}', b"\x00")
H["entry-number"] = one("1")
H["dtype-number"] = one('{"dtype":5,"shape":[1],"data_offsets":[0,1]}', b"\x00")
H["shape-string"] = one('{"dtype":"U8","shape":"1","data_offsets":[0,1]}', b"\x00")
H["offsets-one"] = one('{"dtype":"U8","shape":[1],"data_offsets":[1]}', b"\x00")
H["offsets-three"] = one('{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}', b"\x00")
H["shape-negative"] = one('{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}', b"\x00")
H["shape-float"] = one('{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}', b"\x00")
H["shape-exp"] = one('{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}', b"\x00")
H["shape-huge"] = one('{"dtype":"U8","shape":[18446744073709551617],"data_offsets":[0,1]}')
H["shape-2p53"] = one('{"dtype":"U8","shape":[9007199254740993],"data_offsets":[0,1]}')
H["shape-overflow"] = one(
    '{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}', b"\x00" * 4)
H["shape-zero-then-overflow"] = one(
    '{"dtype":"F64","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}')
H["end-before-begin"] = one('{"dtype":"U8","shape":[0],"data_offsets":[4,2]}', b"\x00" * 4)
H["size-mismatch"] = one('{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}', b"\x00" * 20)
H["past-data"] = one('{"dtype":"U8","shape":[10],"data_offsets":[10,20]}', b"\x00" * 12)
H["past-data-2p53"] = one(
    '{"dtype":"U8","shape":[1],"data_offsets":[9007199254740991,9007199254740992]}', b"\x00")
H["overlap"] = image('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                     '"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}', b"\x00" * 6)
H["same-range"] = image('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                        '"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', b"\x00" * 4)
H["hole"] = image('{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                  '"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}}', b"\x00" * 10)
H["trailing-data"] = one('{"dtype":"U8","shape":[4],"data_offsets":[0,4]}', b"\x00" * 7)
H["dtype-f8"] = one('{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}', b"\x00")
H["dtype-u32"] = one('{"dtype":"U32","shape":[1],"data_offsets":[0,4]}', b"\x00" * 4)
H["dtype-unknown"] = one('{"dtype":"Q4_0","shape":[1],"data_offsets":[0,1]}', b"\x00")
H["nine-dims"] = one('{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}', b"\x00")
H["dup-tensor"] = image('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                        '"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\x00" * 2)
H["dup-field"] = one('{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}', b"\x00")
H["dup-metadata-key"] = image('{"__metadata__":{"a":"1","a":"2"}}')
H["dup-metadata"] = image('{"__metadata__":{},"__metadata__":{}}')
H["metadata-number"] = image('{"__metadata__":{"n":1}}')
H["metadata-array"] = image('{"__metadata__":[]}')
H["nul-escape"] = image('{"a\\u0000b":{}}')
H["control-char"] = image(b'{"a\x01":{}}')
H["bad-utf8"] = image(b'{"a\xff":{}}')
H["overlong-utf8"] = image(b'{"a\xc0\xaf":{}}')
H["lone-surrogate"] = image('{"\\ud800":{}}')
H["deep-nesting"] = image('{"a":' + "[" * 5000 + "]" * 5000 + "}")
H["deep-unclosed"] = image("{" + '"a":{' * 3000)
for k, v in H.items():
    files["bad-" + k] = v

os.makedirs(OUT, exist_ok=True)
for old in os.listdir(OUT):
    if old.startswith("gen-"):
        os.unlink(os.path.join(OUT, old))
for name, data in sorted(files.items()):
    with open(os.path.join(OUT, "gen-%s.safetensors" % name), "wb") as f:
        f.write(data)
print("%s: %d files" % (OUT, len(files)))
