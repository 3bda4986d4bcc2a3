#!/usr/bin/env python3
"""Write an F32 copy of a GGUF model: every tensor dequantized with gguf-py
(gguf 0.19.0, numpy 2.4.6), all metadata copied, general.file_type = 0
(ALL_F32). Used to make the F32 goldens of tests/ref/llamacpp-f32/: with
F32 weights neither llama.cpp nor ruvllm quantizes activations, so the two
can be compared far below the noise that Q8 activation rounding adds (see
tests/ref/README.md, "Why the Q4_1 comparisons have a noise floor").

`ruvllm dequant IN OUT --type f32` writes the same tensor data; make check
makes its F32 model that way.

    python3 tests/ref/make_f32_model.py IN.gguf OUT.gguf
"""
import sys

import numpy as np
import gguf


def main(src, dst):
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"]
    arch = bytes(arch.parts[arch.data[0]]).decode()
    w = gguf.GGUFWriter(dst, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_uint32(name, 0)
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(f.parts[f.data[0]]).decode("utf-8"))
        elif t == gguf.GGUFValueType.ARRAY:
            st = f.types[1]
            if st == gguf.GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, vals, t, sub_type=st)
        else:
            w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t)
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = [int(d) for d in reversed(t.shape)]
        w.add_tensor(t.name, x.reshape(shape), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
