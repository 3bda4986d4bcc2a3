#!/bin/sh
# Build one of llama.cpp's programs natively from the llama.cpp tree vendored
# in the llama-cpp-python 0.3.36 sdist (PyPI), the same llama.cpp the goldens
# in tests/ref/ come from. Prints the path of the binary on stdout; builds
# only when it is not there yet. scripts/build-llama-bench.sh and
# scripts/build-llama-server.sh call this with their target.
#
#   scripts/build-llama.sh llama-bench   -> .../llama.cpp-0.3.36/build/bin/llama-bench
#   scripts/build-llama.sh llama-server  -> .../llama.cpp-0.3.36/build-server/bin/llama-server
#
# Where: ${RVL_LLAMA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/llama.cpp-0.3.36}
# (never in the repository): the source in src/, each target in its own
# build directory (llama-server needs -DLLAMA_BUILD_SERVER=ON, which would
# reconfigure llama-bench's). Built with -DGGML_NATIVE=ON and llama.cpp's
# defaults otherwise (its CPU repack path on, AMX on where the CPU has it);
# extra cmake arguments in RVL_LLAMA_CMAKE_ARGS (e.g. "-DGGML_AMX=OFF").
# Only the target and the libraries it links are built, under nice: about
# 10 minutes for llama-bench and 15 for llama-server on 2 cores.
set -eu

VERSION=0.3.36
SDIST=llama_cpp_python-$VERSION.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

target=${1:-}
case $target in
    llama-bench) build=build; server=OFF ;;
    llama-server) build="build-server"; server=ON ;;
    *) echo "usage: build-llama.sh llama-bench|llama-server" >&2; exit 2 ;;
esac
me=build-$target
dir=${RVL_LLAMA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/llama.cpp-$VERSION}
bin=$dir/$build/bin/$target
src=$dir/src
jobs=${RVL_LLAMA_JOBS:-2}

if [ -x "$bin" ]; then
    echo "$bin"
    exit 0
fi

for tool in cmake c++ python3; do
    command -v $tool >/dev/null 2>&1 || { echo "$me: $tool not found" >&2; exit 1; }
done

mkdir -p "$dir"
if [ ! -f "$src/CMakeLists.txt" ]; then
    tmp=$(mktemp -d "$dir/.sdist.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT INT TERM
    echo "$me: downloading llama-cpp-python==$VERSION (sdist) from PyPI" >&2
    # pip prepares the sdist's metadata (an isolated scikit-build-core) before
    # it saves the file; that is the ordinary client's way to get an sdist.
    python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
        -d "$tmp" "llama-cpp-python==$VERSION" >&2
    if [ "$(sha256sum "$tmp/$SDIST" | cut -d' ' -f1)" != "$SDIST_SHA256" ]; then
        echo "$me: sha256 mismatch for $SDIST (expected $SDIST_SHA256)" >&2
        exit 1
    fi
    tar -xzf "$tmp/$SDIST" -C "$tmp" "llama_cpp_python-$VERSION/vendor/llama.cpp"
    rm -rf "$src"
    mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$src"
    rm -rf "$tmp"
    trap - EXIT INT TERM
fi

echo "$me: building $target in $dir/$build (-j$jobs, GGML_NATIVE=ON)" >&2
# shellcheck disable=SC2086 # RVL_LLAMA_CMAKE_ARGS is a list of arguments
nice cmake -S "$src" -B "$dir/$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=$server -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
    ${RVL_LLAMA_CMAKE_ARGS:-} >&2
nice cmake --build "$dir/$build" --target "$target" -j "$jobs" >&2
[ -x "$bin" ] || { echo "$me: $bin was not built" >&2; exit 1; }
echo "$bin"
