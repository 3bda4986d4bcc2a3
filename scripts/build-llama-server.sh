#!/bin/sh
# Build llama.cpp's llama-server natively (scripts/build-llama.sh: from the
# llama-cpp-python 0.3.36 sdist, GGML_NATIVE=ON, -DLLAMA_BUILD_SERVER=ON,
# into a cache directory); prints its path. scripts/bench-serve.py runs it
# beside `ruvllm serve`.
exec sh "$(dirname "$0")/build-llama.sh" llama-server
