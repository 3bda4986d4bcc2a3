#!/usr/bin/env python3
"""MXFP4 goldens from llama.cpp itself, for tests/test_formats.c.

llama.cpp's C functions are called through ctypes from the shared libraries
bundled with llama-cpp-python (PyPI, 0.3.36): libggml-base.so exports
quantize_row_mxfp4_ref, dequantize_row_mxfp4 and quantize_row_q8_0_ref;
libggml-cpu.so's type traits give ggml's CPU vec_dot for MXFP4 . Q8_0
(the build's SIMD kernel). gguf-py's numpy MXFP4 quantizer is compared
too: the script stops if it disagrees with llama.cpp anywhere on the
finite inputs.

Writes tests/data/quant/ (run from the repository root):

  mxfp4_input.f32       float32 rows of 256: the rows of quant_input.f32
                        (gen_quant_goldens.py) then hard blocks (below)
  mxfp4_quant.bin       quantize_row_mxfp4_ref of every row
  mxfp4_dequant.f32     dequantize_row_mxfp4 of those bytes
  mxfp4_dot_act.bin     Q8_0 rows (quantize_row_q8_0_ref) of random heavy-
                        tailed activations, one per input row
  mxfp4_dot.f32         ggml's vec_dot(mxfp4 row r, q8_0 row r) per row
  README-mxfp4.md       versions and sizes

Hard blocks: amax one float below a power of two (where log2f rounds up
and the exponent moves), exact powers of two, values halfway between two
levels, tiny blocks (amax below 2^-125: ggml's uint8 conversion wraps on
x86), subnormals, huge values, +-0, an infinity, and NaNs (no gguf-py
comparison for the non-finite blocks).

Usage (repository root):
  /tmp/h22venv/bin/python tests/ref/gen_mxfp4_goldens.py
"""
import ctypes
import glob
import os
import platform
import sys
from importlib.metadata import version

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = "tests/data/quant"
ROW = 256
GGML_TYPE_MXFP4, GGML_TYPE_Q8_0 = 39, 8


def libs():
    import llama_cpp
    d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    base = ctypes.CDLL(glob.glob(os.path.join(d, "libggml-base.so*"))[0], mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(glob.glob(os.path.join(d, "libggml-cpu.so*"))[0])
    fp = ctypes.POINTER(ctypes.c_float)
    for name in ("quantize_row_mxfp4_ref", "quantize_row_q8_0_ref"):
        getattr(base, name).argtypes = [fp, ctypes.c_void_p, ctypes.c_int64]
    base.dequantize_row_mxfp4.argtypes = [ctypes.c_void_p, fp, ctypes.c_int64]
    cpu.ggml_cpu_init.argtypes = []
    cpu.ggml_cpu_init()

    class Traits(ctypes.Structure):
        _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                    ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(Traits)
    cpu.ggml_get_type_traits_cpu.argtypes = [ctypes.c_int]
    tr = cpu.ggml_get_type_traits_cpu(GGML_TYPE_MXFP4).contents
    if tr.vec_dot_type != GGML_TYPE_Q8_0:
        sys.exit("ggml pairs MXFP4 with type %d, not Q8_0" % tr.vec_dot_type)
    vec_dot = ctypes.CFUNCTYPE(None, ctypes.c_int, fp, ctypes.c_size_t, ctypes.c_void_p,
                               ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                               ctypes.c_int)(tr.vec_dot)
    return base, vec_dot


def fptr(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def hard_rows(rng):
    """Blocks of 32 that reach the corners of the quantizer, packed in rows
    of 256 (8 blocks)."""
    blocks = []
    f32 = np.float32
    for k in range(-20, 21, 3):
        p = f32(2.0) ** k
        below = np.nextafter(p, f32(0))
        for amax in (below, p, np.nextafter(p, f32(np.inf))):
            b = rng.standard_normal(32).astype(f32) * amax / f32(4)
            b = np.clip(b, -amax, amax)
            b[rng.integers(32)] = amax if rng.integers(2) else -amax
            blocks.append(b)
    # one float below 2^k for every k where float rounding of log2 decides
    for k in range(-126, 128, 7):
        blocks.append(np.full(32, np.nextafter(f32(2.0) ** k, f32(0)), f32) *
                      np.where(np.arange(32) % 2, 1, -1).astype(f32))
    # halfway between levels: with amax 6 the scale is 1 (levels 0 .5 1 1.5 2 3 4 6)
    mids = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], f32)
    for s in (1, -1):
        b = np.resize(np.concatenate([mids * s, -mids * s]), 32).astype(f32)
        b[0] = f32(6.0)
        blocks.append(b)
    # tiny, subnormal, zero, huge
    for amax in (2.0 ** -124, 2.0 ** -125, 2.0 ** -126, 2.0 ** -130, 1e-40, 1e-45):
        blocks.append((rng.uniform(-1, 1, 32) * amax).astype(f32))
    blocks.append(np.zeros(32, f32))
    blocks.append(np.where(np.arange(32) % 2, f32(0.0), f32(-0.0)).astype(f32))
    blocks.append((rng.standard_normal(32) * 1e38).astype(f32))
    blocks.append(np.full(32, f32(3.4028235e38)))
    nfinite = len(blocks)
    inf = rng.standard_normal(32).astype(f32)
    inf[5] = np.inf
    nan = rng.standard_normal(32).astype(f32)
    nan[0] = np.nan
    nan[9] = np.nan
    blocks += [inf, nan]
    while len(blocks) % 8:
        blocks.append(rng.standard_normal(32).astype(f32))
    return np.concatenate(blocks).reshape(-1, ROW), nfinite


def write(name, arr):
    path = os.path.join(OUT, name)
    arr = np.ascontiguousarray(arr)
    with open(path, "wb") as f:
        f.write(arr.tobytes())
    return path, arr.nbytes


def main():
    if not os.path.isdir("tests") or not os.path.isdir("kernels"):
        sys.exit("run from the repository root")
    base, vec_dot = libs()
    rng = np.random.Generator(np.random.PCG64(20261127))
    rows = np.fromfile(os.path.join(OUT, "quant_input.f32"), dtype=np.float32).reshape(-1, ROW)
    hard, nfinite = hard_rows(rng)
    x = np.ascontiguousarray(np.concatenate([rows, hard]).astype(np.float32))
    nrow = x.shape[0]
    rb = ROW // 32 * 17

    q = np.zeros(nrow * rb, np.uint8)
    for r in range(nrow):
        base.quantize_row_mxfp4_ref(fptr(x[r]), q[r * rb:].ctypes.data, ROW)
    y = np.zeros(nrow * ROW, np.float32)
    base.dequantize_row_mxfp4(q.ctypes.data, fptr(y), nrow * ROW)

    # gguf-py must agree on every finite block
    nfin = rows.size // 32 + nfinite
    with np.errstate(all="ignore"):
        g = quants.quantize(x.reshape(-1, 32)[:nfin].reshape(1, -1), T.MXFP4).view(np.uint8)
    bad = np.nonzero(g.reshape(-1) != q[:nfin * 17])[0]
    if bad.size:
        sys.exit("gguf-py and llama.cpp disagree at byte %d (block %d)" % (bad[0], bad[0] // 17))
    gd = quants.dequantize(q.reshape(1, -1), T.MXFP4).astype(np.float32).reshape(-1)
    if not np.array_equal(gd.view(np.uint32), y.view(np.uint32)):
        sys.exit("gguf-py and llama.cpp dequantize differently")

    # dots with ggml's CPU kernel (finite rows only)
    qrb = ROW // 32 * 34
    a = (rng.standard_normal((nrow, ROW)) * np.exp(rng.standard_normal((nrow, ROW)))).astype(np.float32)
    act = np.zeros(nrow * qrb, np.uint8)
    dots = np.zeros(nrow, np.float32)
    s = np.zeros(1, np.float32)
    for r in range(nrow):
        ar = np.ascontiguousarray(a[r])
        base.quantize_row_q8_0_ref(fptr(ar), act[r * qrb:].ctypes.data, ROW)
        vec_dot(ROW, fptr(s), 0, q[r * rb:].ctypes.data, 0, act[r * qrb:].ctypes.data, 0, 1)
        dots[r] = s[0]

    files = [write("mxfp4_input.f32", x), write("mxfp4_quant.bin", q),
             write("mxfp4_dequant.f32", y), write("mxfp4_dot_act.bin", act),
             write("mxfp4_dot.f32", dots)]
    with open(os.path.join(OUT, "README-mxfp4.md"), "w") as f:
        f.write("# MXFP4 goldens\n\n")
        f.write("Generated by `tests/ref/gen_mxfp4_goldens.py` (run from the repository\n"
                "root, after gen_quant_goldens.py); read by `tests/test_formats.c`.\n"
                "llama.cpp's C quantizer, dequantizer and CPU vec_dot through ctypes;\n"
                "gguf-py's numpy quantizer checked equal on the finite blocks. Do not edit.\n\n")
        f.write("Generated with:\n\n")
        f.write("- Python %s, %s\n- numpy %s\n- gguf (gguf-py) %s\n- llama-cpp-python %s "
                "(its bundled ggml)\n\n" % (platform.python_version(), platform.machine(),
                                            version("numpy"), version("gguf"),
                                            version("llama_cpp_python")))
        f.write("%d rows of %d: %d from quant_input.f32, then %d of hard blocks (the last\n"
                "finite block is block %d of the file; after it, one with an infinity\n"
                "and one with NaNs).\n\n" % (nrow, ROW, rows.shape[0], hard.shape[0], nfin - 1))
        f.write("| file | bytes |\n| --- | ---: |\n")
        for p, n in files:
            f.write("| %s | %d |\n" % (os.path.basename(p), n))
    print("wrote %d files to %s (%d rows)" % (len(files) + 1, OUT, nrow))


if __name__ == "__main__":
    main()
