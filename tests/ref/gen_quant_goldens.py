#!/usr/bin/env python3
"""Golden data for tests/test_formats.c, produced by gguf-py (PyPI `gguf`),
llama.cpp's own Python reference for its tensor formats.

Writes tests/data/quant/ (run from the repository root):

  quant_input.f32        float32 rows of 256 (see ROWS below): the input
  quant_<T>.bin          gguf.quants.quantize(input, T) for the types gguf-py
                         quantizes the way llama.cpp's reference does:
                         Q4_0 Q4_1 Q5_0 Q5_1 Q8_0, plus F16 and BF16
  dequant_<T>.bin        random *valid* blocks of type T (f16 scale fields are
                         finite: no NaN/Inf patterns)
  dequant_<T>.f32        gguf.quants.dequantize of those blocks
  f16_cases.f32/.f16     hard float32 -> float16 conversions (numpy astype)
  README.md              what is here and the package versions used

All data is little-endian, headerless; sizes follow from the file lengths
and each type's block geometry. Deterministic: numpy's PCG64 with a fixed
seed, so re-running gives identical bytes with the same package versions.

Notes on gguf-py 0.19 that shape the data:
  * IQ1_M: gguf-py always applies -delta (`qh & 0x08 == 0` parses as
    `qh & (0x08 == 0)`), llama.cpp applies it only where bit 3 of the qh
    nibble is set. The IQ1_M blocks here set that bit everywhere, so both
    readings agree; tests/test_formats.c follows llama.cpp.
  * Q8_1: gguf-py's size table says 40 bytes per block (an old layout);
    llama.cpp's block_q8_1 is 36. Not dequantized here.
"""
import os
import platform
import sys
import warnings
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

OUT = "tests/data/quant"
rng = np.random.Generator(np.random.PCG64(20240611))

# ---------------------------------------------------------------------------
# Quantizer input: rows of 256 float32 from several distributions, chosen to
# reach every branch of the reference quantizers (zero blocks, f16 subnormal
# and overflowing scales, exact halfway cases, ties for the absolute max).
# ---------------------------------------------------------------------------

def rows_normal():
    return [rng.standard_normal(256) for _ in range(4)]

def rows_weights():            # typical trained-weight magnitudes
    return [rng.standard_normal(256) * 0.02 for _ in range(4)]

def rows_uniform():
    return [rng.uniform(-1, 1, 256) for _ in range(2)] + [rng.uniform(0, 1, 256)]

def rows_heavy():              # Student t, df 2: outliers
    return [rng.standard_t(2, 256) for _ in range(3)]

def rows_outliers():
    r = rng.standard_normal(256) * 0.05
    r[rng.choice(256, 6, replace=False)] *= 400
    return [r]

def rows_zero_and_const():
    r = np.zeros(256)
    r[32:64] = 0.37            # all-equal blocks
    r[64:96] = -2.5
    r[96:128] = 1e-3
    r[128:160] = 0.0           # zero block in the middle
    r[160:192] = rng.standard_normal(32)
    r[192:224] = 65504.0
    r[224:256] = -1.0
    return [r]

def rows_tiny():               # f16 subnormal / zero scales
    return [rng.standard_normal(256) * 1e-6, rng.standard_normal(256) * 1e-9,
            rng.standard_normal(256) * 3e-8]

def rows_huge():               # f16 overflow of scales (d -> inf)
    r = rng.standard_normal(256) * 1e3
    r[:32] = rng.uniform(-6e5, 6e5, 32)
    return [r]

def rows_grid():               # exact multiples: halfway cases after scaling
    return [rng.integers(-16, 17, 256) / 8.0, rng.integers(-127, 128, 256) / 127.0,
            rng.integers(0, 32, 256) / 31.0]

def rows_ties():               # +a and -a both reach the absolute max
    r = rng.standard_normal(256)
    for b in range(8):
        i, j = rng.choice(32, 2, replace=False)
        m = np.abs(r[32 * b:32 * b + 32]).max() + 1
        r[32 * b + i], r[32 * b + j] = (m, -m) if b % 2 else (-m, m)
    return [r]

def rows_sparse():
    r = np.zeros(256)
    idx = rng.choice(256, 12, replace=False)
    r[idx] = rng.standard_normal(12)
    return [r]

ROWS = [rows_normal, rows_weights, rows_uniform, rows_heavy, rows_outliers,
        rows_zero_and_const, rows_tiny, rows_huge, rows_grid, rows_ties, rows_sparse]

QUANTIZED = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.F16, T.BF16]

# ---------------------------------------------------------------------------
# Random valid blocks for the dequantizers.
# ---------------------------------------------------------------------------

def rand_f16(n):
    """n finite float16 bit patterns: mostly normal of moderate magnitude,
    some subnormal, zero and large, either sign."""
    kind = rng.choice(4, n, p=[0.8, 0.08, 0.04, 0.08])
    exp = np.where(kind == 0, rng.integers(1, 20, n),           # 2^-14 .. 2^4
          np.where(kind == 1, 0,                                # subnormal
          np.where(kind == 2, 0, rng.integers(20, 31, n))))     # large, finite
    mant = np.where(kind == 2, 0, rng.integers(0, 1024, n))
    mant = np.where((kind == 1) & (mant == 0), 1, mant)
    sign = rng.integers(0, 2, n)
    return ((sign << 15) | (exp << 10) | mant).astype(np.uint16)

# byte offsets of the f16 fields within each block type
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
    T.MXFP4: [], T.NVFP4: [], T.IQ1_M: [],
}

def rand_blocks(qtype, nblocks):
    bs, ts = GGML_QUANT_SIZES[qtype]
    if qtype == T.F16:
        return rand_f16(nblocks * bs).view(np.uint8)
    if qtype == T.BF16:
        f = (rng.standard_normal(nblocks * bs) * np.exp(rng.uniform(-20, 20, nblocks * bs)))
        bits = f.astype(np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8)
    b = rng.integers(0, 256, (nblocks, ts), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        b[:, off:off + 2] = rand_f16(nblocks).view(np.uint8).reshape(nblocks, 2)
    if qtype == T.IQ1_M:
        b[:, 32:48] |= 0x88    # see the IQ1_M note above
        d = rand_f16(nblocks).astype(np.uint16)
        sc = b[:, 48:56].copy().view(np.uint16)             # (nblocks, 4)
        for k in range(4):
            sc[:, k] = (sc[:, k] & 0x0FFF) | (((d >> (4 * k)) & 0xF) << 12)
        b[:, 48:56] = sc.view(np.uint8)
    return b.reshape(-1)

DEQUANTIZED = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
               T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
               T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M,
               T.IQ4_NL, T.IQ4_XS, T.TQ1_0, T.TQ2_0, T.MXFP4, T.NVFP4]

def n_blocks_for(qtype):
    bs, _ = GGML_QUANT_SIZES[qtype]
    return max(4096 // bs, 16) if bs > 1 else 4096   # ~4096 values each

# ---------------------------------------------------------------------------
# float32 -> float16 edge cases
# ---------------------------------------------------------------------------

def f16_cases():
    vals = []
    # every halfway point between adjacent f16 values, for a spread of
    # binades (normal and subnormal), and its neighbours one ulp away
    h = np.arange(0, 0x7c00, dtype=np.uint32)
    lo = h.astype(np.uint16).view(np.float16).astype(np.float64)
    hi = (h + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)           # exact in float32
    pick = rng.choice(len(mid), 6000, replace=False)
    m = mid[pick]
    vals += [m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(-np.inf))]
    vals.append(np.array([0.0, 65504.0, 65519.996, 65520.0, 65536.0, 1e10, 2.0**-24,
                          2.0**-25, 2.0**-25 * 1.0000001, 2.0**-26, 1e-30, 6.1e-5,
                          2.0**-14, 2.0**-14 * (1 - 2.0**-11), 3.4e38], dtype=np.float32))
    vals.append(rng.standard_normal(2000).astype(np.float32) *
                np.exp2(rng.uniform(-30, 20, 2000)).astype(np.float32))
    v = np.concatenate(vals).astype(np.float32)
    v = np.concatenate([v, -v])
    return v

# ---------------------------------------------------------------------------

def write(name, arr):
    path = os.path.join(OUT, name)
    arr = np.ascontiguousarray(arr)
    with open(path, "wb") as f:
        f.write(arr.tobytes())
    return path, arr.nbytes

def main():
    if not os.path.isdir("tests") or not os.path.isdir("kernels"):
        sys.exit("run from the repository root")
    os.makedirs(OUT, exist_ok=True)
    warnings.simplefilter("ignore", RuntimeWarning)   # f16 overflow to inf is intended
    files = []

    rows = np.concatenate([np.stack(f()) for _ in range(3) for f in ROWS]).astype(np.float32)
    rows[rows == 0] = 0.0      # no -0.0: numpy's min/max may pick either zero
    files.append(write("quant_input.f32", rows))
    for qt in QUANTIZED:
        q = quants.quantize(rows, qt)
        files.append(write("quant_%s.bin" % qt.name, q.view(np.uint8)))

    for qt in DEQUANTIZED:
        blocks = rand_blocks(qt, n_blocks_for(qt))
        y = quants.dequantize(blocks.reshape(1, -1), qt).astype(np.float32, copy=False)
        files.append(write("dequant_%s.bin" % qt.name, blocks))
        files.append(write("dequant_%s.f32" % qt.name, y))

    c = f16_cases()
    files.append(write("f16_cases.f32", c))
    files.append(write("f16_cases.f16", c.astype(np.float16).view(np.uint16)))

    total = sum(n for _, n in files)
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# Quantization goldens\n\n")
        f.write("Generated by `python3 tests/ref/gen_quant_goldens.py` (run from the\n"
                "repository root); read by `tests/test_formats.c`, which compares\n"
                "ruvllm's reference kernels with them bit for bit. Do not edit.\n\n")
        f.write("Generated with:\n\n")
        f.write("- Python %s\n- numpy %s\n- gguf (gguf-py) %s\n\n" %
                (platform.python_version(), version("numpy"), version("gguf")))
        f.write("| file | bytes |\n| --- | ---: |\n")
        for p, n in files:
            f.write("| %s | %d |\n" % (os.path.basename(p), n))
        f.write("\nTotal %d bytes. Formats and notes: see the docstring of\n"
                "tests/ref/gen_quant_goldens.py.\n" % total)
    print("wrote %d files, %d bytes, to %s" % (len(files) + 1, total, OUT))

if __name__ == "__main__":
    main()
