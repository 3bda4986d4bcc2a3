#!/bin/sh
# `ruvllm info` agrees with gguf-py. tests/ref/gguf_info_ref.py read the
# default model and every tokenizer GGUF with gguf-py and committed what it
# saw as flat lines (tests/ref/info/*.lines); here the same lines are cut
# out of `ruvllm info --json --all` (and the tensor table of the text
# output) with awk and must match exactly. No Python needed. Array values
# are compared by type and count here; their contents are checked through
# digests by tests/test_info_ref.c.
. tests/cli/lib.sh

MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
SHARED=${RVL_SHARED_DATA:-../shared/data}
REF=tests/ref/info

# Flatten the pretty JSON of one file (lib/base/jw.c: one member per line,
# two spaces per level) into the golden's lines:
#   version|alignment|data_offset|size TAB value
#   kv TAB "key" TAB type TAB value          (scalars, value as in the JSON)
#   kv TAB "key" TAB array TAB elem_type TAB count
#   tensor TAB "name" TAB type TAB type_id TAB ne0,ne1,.. TAB n_elements TAB bytes TAB offset
flatten_json() {
    awk '
    function val(line) {            # the value after "member": , minus the separator
        sub(/^ *"[a-z_]*": /, "", line)
        sub(/,$/, "", line)
        return line
    }
    /^  "(version|alignment|data_offset|size)": / {
        m = $1; gsub(/[":]/, "", m); print m "\t" val($0); next
    }
    /^  "metadata": \[/ { sect = "kv"; next }
    /^  "tensors": \[/  { sect = "t"; next }
    /^  "/              { sect = ""; next }
    sect == "" { next }
    /^    \{/ { key = type = et = cnt = value = name = tid = ne = nel = nb = off = ""; inshape = 0; next }
    /^    \}/ {
        if (sect == "kv") {
            if (type == "array") printf "kv\t%s\tarray\t%s\t%s\n", key, et, cnt
            else printf "kv\t%s\t%s\t%s\n", key, type, value
        } else {
            printf "tensor\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, type, tid, ne, nel, nb, off
        }
        next
    }
    sect == "kv" && /^      "key": /       { key = val($0); next }
    sect == "kv" && /^      "type": /      { type = val($0); gsub(/"/, "", type); next }
    sect == "kv" && /^      "elem_type": / { et = val($0); gsub(/"/, "", et); next }
    sect == "kv" && /^      "count": /     { cnt = val($0); next }
    sect == "kv" && /^      "value": /     { value = val($0); next }
    sect == "kv" { next }
    /^      "name": /       { name = val($0); next }
    /^      "type": /       { type = val($0); gsub(/"/, "", type); next }
    /^      "type_id": /    { tid = val($0); next }
    /^      "shape": \[/    { inshape = 1; next }
    inshape && /^      \]/  { inshape = 0; next }
    inshape                 { d = $0; gsub(/[ ,]/, "", d); ne = ne (ne == "" ? "" : ",") d; next }
    /^      "n_elements": / { nel = val($0); next }
    /^      "bytes": /      { nb = val($0); next }
    /^      "offset": /     { off = val($0); next }
    ' "$1"
}

# The tensor table of the text output as the golden's tensor lines (names
# quoted, no type id): "  #  name type d0 x d1 ... elements bytes offset".
flatten_text_tensors() {
    awk '
    /^tensors: / { on = 1; getline; next }
    on && NF == 0 { exit }
    on {
        ne = $4
        for (i = 5; i <= NF - 3; i++) if ($i != "x") ne = ne "," $i
        printf "tensor\t\"%s\"\t%s\t%s\t%s\t%s\t%s\n", $2, $3, ne, $(NF-2), $(NF-1), $NF
    }' "$1"
}

compare() { # DESCRIPTION EXPECTED GOT
    if cmp -s "$2" "$3"; then
        ok "$1"
    else
        # show the diff, not the last command's output
        cp "$OUT" "$TMP/out.save"
        cp "$ERR" "$TMP/err.save"
        last="diff $2 $3"
        diff "$2" "$3" | head -n 15 >"$OUT"
        : >"$ERR"
        not_ok "$1"
        cp "$TMP/out.save" "$OUT"
        cp "$TMP/err.save" "$ERR"
    fi
}

# Every input the issue names has a golden, and every golden an input.
assert "default model present (make model)" '[ -f "$MODEL" ]'
for f in "$SHARED"/tokenizers/*.gguf; do
    b=$(basename "$f")
    assert "golden for tokenizers/$b" '[ -f "$REF/$b.lines" ] && [ -f "$REF/$b.json" ]'
done

for g in "$REF"/*.lines; do
    b=$(basename "$g" .lines)
    if [ "$b" = "$(basename "$MODEL")" ]; then f=$MODEL; else f=$SHARED/tokenizers/$b; fi
    if [ ! -f "$f" ]; then
        not_ok "$b: input $f missing"
        continue
    fi

    run 0 ruvllm info --json --all "$f"
    cp "$OUT" "$TMP/$b.json"
    flatten_json "$TMP/$b.json" >"$TMP/$b.got"
    compare "$b: info --json --all agrees with gguf-py" "$g" "$TMP/$b.got"

    run 0 ruvllm info --all "$f"
    cp "$OUT" "$TMP/$b.txt"
    grep '^tensor' "$g" | cut -f 1-3,5- >"$TMP/$b.want-t"
    flatten_text_tensors "$TMP/$b.txt" >"$TMP/$b.got-t"
    compare "$b: text tensor table agrees with gguf-py" "$TMP/$b.want-t" "$TMP/$b.got-t"
    al=$(awk -F '\t' '$1 == "alignment" { print $2 }' "$g")
    doff=$(awk -F '\t' '$1 == "data_offset" { print $2 }' "$g")
    nk=$(grep -c '^kv' "$g")
    nt=$(grep -c '^tensor' "$g")
    out_has "alignment $al, tensor data at offset $doff"
    out_has "metadata: $nk keys"
    out_has "tensors: $nt"
done

# Several files in one call: a JSON array holding the same objects.
run 0 ruvllm info --json --no-metadata "$MODEL" "$SHARED"/tokenizers/ggml-vocab-gpt-2.gguf
assert "two files give a JSON array" 'head -n 1 "$OUT" | grep -qx "\[" && tail -n 1 "$OUT" | grep -qx "\]"'

finish
