#!/bin/sh
# Build llama.cpp's llama-bench natively (scripts/build-llama.sh: from the
# llama-cpp-python 0.3.36 sdist, GGML_NATIVE=ON, into a cache directory);
# prints its path.
exec sh "$(dirname "$0")/build-llama.sh" llama-bench
