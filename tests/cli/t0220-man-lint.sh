#!/bin/sh
# The man pages pass mandoc's lint without a warning (mandoc -Tlint -W warning:
# warnings, errors and unsupported requests; its style notes, such as long
# input lines, are checked too) and man-db renders them without a complaint.
# scripts/bootstrap.sh installs mandoc, so the test needs it rather than skipping.
. tests/cli/lib.sh

assert "mandoc is installed (scripts/bootstrap.sh)" "command -v mandoc >/dev/null"
for page in man/*.1; do
    mandoc -Tlint -W warning "$page" >"$TMP/lint" 2>&1
    rc=$?
    assert "mandoc -Tlint: no warning in $page" "[ $rc = 0 ] && [ ! -s '$TMP/lint' ]"
    sed 's/^/#   /' "$TMP/lint" | head -n 5
    mandoc -Tlint -W style "$page" >"$TMP/style" 2>&1
    assert "mandoc -Tlint -W style: nothing to say about $page" "[ ! -s '$TMP/style' ]"
    sed 's/^/#   /' "$TMP/style" | head -n 5
    if command -v man >/dev/null; then
        MANWIDTH=80 man --warnings -l "$page" >"$TMP/page" 2>"$TMP/man-err"
        assert "man -l renders $page without a warning" "[ -s '$TMP/page' ] && [ ! -s '$TMP/man-err' ]"
        sed 's/^/#   /' "$TMP/man-err" | head -n 5
    fi
done
finish
