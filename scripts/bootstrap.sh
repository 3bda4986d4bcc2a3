#!/bin/sh
# Install the Debian packages ruvllm needs to build and test.
# As root: runs apt-get update (once, when something is missing) and apt-get install.
# Otherwise: prints the apt-get command to run.
set -eu

PKGS="build-essential pkg-config clang libclang-rt-14-dev clang-16 libclang-rt-16-dev
      libzstd-dev libxxhash-dev libreadline-dev libpcre2-dev libutf8proc-dev
      libcjson-dev libmicrohttpd-dev libcurl4-openssl-dev libssl-dev openssl
      libcmocka-dev python3 python3-pip python3-venv
      ca-certificates curl zsh fish
      mandoc man-db
      gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done

# pip may come from elsewhere (pyenv); then python3-pip is not needed.
if command -v pip >/dev/null 2>&1 || command -v pip3 >/dev/null 2>&1 || python3 -m pip --version >/dev/null 2>&1; then
    missing=$(echo "$missing" | tr ' ' '\n' | grep -v -x -e python3-pip -e python3 | tr '\n' ' ')
fi
# the same for venv (tests/cli/t0181-serve-openai.sh makes one with pip for the openai
# client): Debian's python3 has the venv module but not ensurepip, which python3-venv adds
if python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    missing=$(echo "$missing" | tr ' ' '\n' | grep -v -x -e python3-venv | tr '\n' ' ')
fi
missing=$(echo $missing)

if [ -z "$missing" ]; then
    echo "bootstrap: all packages present"
    exit 0
fi

if [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing: $missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
else
    echo "bootstrap: missing packages: $missing"
    echo "bootstrap: run as root:  apt-get update && apt-get install -y $missing"
    exit 1
fi
