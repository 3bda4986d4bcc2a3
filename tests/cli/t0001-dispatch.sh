#!/bin/sh
# The multi-call binary: command table, help, version, errors, links.
. tests/cli/lib.sh

run 0 ruvllm --help
for c in $(ruvllm __commands); do
    out_has "  $c "
done
out_has "help CMD"

run 2 ruvllm
err_has "usage: ruvllm COMMAND"

run 0 ruvllm --version
out_has "ruvllm 0."
out_has "compiler:"
out_has "backends: cpu"
out_lacks "cuda"
out_has "isa: "

run 2 ruvllm infoo
err_has "ruvllm: 'infoo' is not a command; did you mean 'info'?"
out_empty
run 2 ruvllm lora-merg
err_has "did you mean 'lora-merge'?"
run 2 ruvllm zzzzzzzz
err_has "'zzzzzzzz' is not a command"
run 2 ruvllm --verison
err_has "did you mean '--version'?"

# unknown options name themselves and suggest the closest
run 2 ruvllm info --jsn x.gguf
err_has "ruvllm info: unknown option '--jsn'; did you mean '--json'?"
run 2 ruvllm info -Z x.gguf
err_has "unknown option '-Z'"
run 2 ruvllm info --json=yes x.gguf
err_has "takes no value"
run 2 ruvllm info
err_has "missing argument"

# every command answers --help, help CMD, and the table's options appear
for c in $(ruvllm __commands); do
    run 0 ruvllm "$c" --help
    out_has "usage: ruvllm $c "
    run 0 ruvllm help "$c"
    out_has "usage: ruvllm $c "
done
run 2 ruvllm help nosuch

# every command is implemented: no help text or man page says otherwise
for c in info run chat quantize dequant bench lora-merge kv-inspect; do
    assert "ruvllm $c --help does not say 'not implemented'" \
        "! '$RUVLLM' $c --help | grep -qi 'not implemented'"
    assert "man/ruvllm-$c.1 does not say 'not implemented'" "! grep -qi 'not implemented' man/ruvllm-$c.1"
done

# busybox-style links dispatch by argv[0]
ln -s "$RUVLLM" "$TMP/ruvllm-info"
ln -s "$RUVLLM" "$TMP/ruvllm-nosuch"
run 0 "$TMP/ruvllm-info" --help
out_has "usage: ruvllm info"
run 2 "$TMP/ruvllm-nosuch"
err_has "'nosuch' is not a command"

# RUVLLM_ISA: an unknown or unavailable variant is an error
RUVLLM_ISA=bogus run 2 ruvllm info --help
err_has "unknown instruction set"
RUVLLM_ISA=ref run 0 ruvllm info --help

finish
