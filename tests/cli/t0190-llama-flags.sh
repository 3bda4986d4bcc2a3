#!/bin/sh
# llama.cpp's spellings (llama-cli, llama-server, llama-bench): each one
# either does what it means (the same as our option: same tokens, same
# text) or is refused with exit 2 and a sentence saying what to do
# instead; never read as a bundle of short options ("-ngl" as "-n gl").
# docs/llama-cpp-options.md is the table; cmd/opt.c cli_aliases_common and
# the commands' alias tables are the code.
. tests/cli/lib.sh
MODEL=${XDG_CACHE_HOME:-$HOME/.cache}/ruvllm/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$MODEL" ] || skip_all "no default model at $MODEL (make model)"
export RUVLLM_MODEL="$MODEL"
P="The capital of France is"
out_is() { if [ "$(cat "$OUT")" = "$1" ]; then ok "stdout is '$1'"; else not_ok "stdout is not '$1'"; fi; }
toks() { sed -n 's/.*"tokens":\[\([0-9,]*\)\].*/\1/p' "$OUT"; }

# --- what the issue saw, each gone ----------------------------------------
run 2 ruvllm run -ngl 99 "$P"
err_has "ruvllm run: -ngl: there are no layers to offload"
err_has "drop it"
assert "-ngl is not read as -n gl" "! grep -q 'not an integer' '$ERR'"
out_empty
run 2 ruvllm run --n-gpu-layers 99 "$P"
err_has "there are no layers to offload"
run 2 ruvllm run -sys "Be brief" "$P"
err_has "--system needs --chat"
assert "-sys is not read as -s ys" "! grep -q -e '--seed' '$ERR'"
run 2 ruvllm run -cnv
err_has "use 'ruvllm chat'"
assert "-cnv is not read as -c nv" "! grep -q -e '--ctx-size' '$ERR'"
run 0 ruvllm run --temp 0 -n 4 "$P"
cp "$OUT" "$TMP/plain"
run 0 ruvllm run -fa --temp 0 -n 4 "$P"
assert "-fa runs as without it" "cmp -s '$OUT' '$TMP/plain'"
err_empty
run 0 ruvllm run -fa on --temp 0 -n 4 "$P"
assert "-fa on: the same" "cmp -s '$OUT' '$TMP/plain'"
run 0 ruvllm run --flash-attn=auto --temp 0 -n 4 "$P"
assert "--flash-attn=auto: the same" "cmp -s '$OUT' '$TMP/plain'"
run 0 ruvllm run -fa off --temp 0 -n 4 "$P"
assert "-fa off: the same text" "cmp -s '$OUT' '$TMP/plain'"
err_has "note: -fa: ruvllm's attention is always the fused (flash) kernel"
run 0 ruvllm run -p "$P" --temp 0 -n 4
assert "-p PROMPT = the prompt as an argument" "cmp -s '$OUT' '$TMP/plain'"
run 0 ruvllm run --prompt "$P" --temp 0 -n 4
assert "--prompt PROMPT = the prompt as an argument" "cmp -s '$OUT' '$TMP/plain'"
run 0 ruvllm run -p Hello -n 2
run 2 ruvllm run --prompt
err_has "option '--prompt' needs a value"
assert "--prompt does not suggest --prompt-cache" "! grep -q -e '--prompt-cache' '$ERR'"
run 2 ruvllm run -p "$P" "and an argument"
err_has "give the prompt once"
run 0 ruvllm run --temp 0 -n 6 --json --kv-type q8 "$P"
q8=$(toks)
run 0 ruvllm run --temp 0 -n 6 --json --kv-type q8_0 "$P"
assert "--kv-type q8_0 = --kv-type q8" "[ '$(toks)' = '$q8' ]"
run 0 ruvllm run --tokenize --chat "$P"
cp "$OUT" "$TMP/model-template"
printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}' >"$TMP/t.jinja"
run 0 ruvllm run --tokenize --chat --chat-template "$TMP/t.jinja" "$P"
cp "$OUT" "$TMP/file"
run 0 ruvllm run --tokenize --chat --chat-template-file "$TMP/t.jinja" "$P"
assert "--chat-template-file FILE = --chat-template FILE" "cmp -s '$OUT' '$TMP/file'"
assert "... and the file was used (no system turn, unlike the model's template)" "! cmp -s '$OUT' '$TMP/model-template'"

# --- llama-cli's spellings of our options ---------------------------------
run 0 ruvllm run --tokenize --chat --system "Be brief" "$P"
cp "$OUT" "$TMP/sys"
for o in -sys --system-prompt; do
    run 0 ruvllm run --tokenize --chat $o "Be brief" "$P"
    assert "$o = --system" "cmp -s '$OUT' '$TMP/sys'"
done
for o in -r --reverse-prompt; do
    run 0 ruvllm run --temp 0 -n 30 $o "." "$P"
    out_is " Paris"
done
run 0 ruvllm run --temp 0 -n 30 -r "zzz" -r "." "$P"
out_is " Paris"
for o in --n-predict --predict; do
    run 0 ruvllm run --temp 0 $o 4 "$P"
    assert "$o 4 = -n 4" "cmp -s '$OUT' '$TMP/plain'"
done
run 0 ruvllm run --temp 0 --n-predict=0 "$P"
out_empty
run 0 ruvllm run -n 8 --seed 7 --temp 0.9 "$P"
cp "$OUT" "$TMP/t09"
run 0 ruvllm run -n 8 --seed 7 --temperature 0.9 "$P"
assert "--temperature = --temp" "cmp -s '$OUT' '$TMP/t09'"
run 0 ruvllm run --temp 0 -n 6 --json --kv-type-k q4 --kv-type-v q8 "$P"
k4v8=$(toks)
for k in -ctk --cache-type-k; do
    for v in -ctv --cache-type-v; do
        run 0 ruvllm run --temp 0 -n 6 --json $k q4_0 $v q8_0 "$P"
        assert "$k q4_0 $v q8_0 = --kv-type-k q4 --kv-type-v q8" "[ '$(toks)' = '$k4v8' ]"
    done
done
for t in bf16 q4_1 q5_0 q5_1 iq4_nl; do
    run 2 ruvllm run -ctk $t "$P"
    err_has "$t is not a KV cache format of ruvllm:"
done
run 2 ruvllm run --kv-type q3_k "$P"
err_has "is not one of f16|f32|q8|q4"
L=tests/data/lora/smol-r8.gguf
run 0 ruvllm run --temp 0 -n 8 --lora "$L:2" "$P"
cp "$OUT" "$TMP/lora"
assert "the adapter changes the text" "! cmp -s '$OUT' '$TMP/plain'"
run 0 ruvllm run --temp 0 -n 8 --lora-scaled "$L" 2 "$P"
assert "--lora-scaled FILE 2 = --lora FILE:2" "cmp -s '$OUT' '$TMP/lora'"
run 2 ruvllm run --lora-scaled "$L"
err_has "needs two values"
run 0 ruvllm run --tokenize --special "<|im_start|>"
cp "$OUT" "$TMP/special"
run 0 ruvllm run --tokenize -sp "<|im_start|>"
assert "-sp = --special" "cmp -s '$OUT' '$TMP/special'"
run 0 ruvllm run --log-verbose --temp 0 -n 1 "$P"
err_has "30 layers, dim 576"
run 2 ruvllm run -np 0 "$P"
err_has "-np: 0 is out of range"
# run's own: -st is one chat turn, -no-cnv raw text, --display-prompt --echo
run 0 ruvllm run --tokenize --chat "$P"
cp "$OUT" "$TMP/chat"
for o in -st --single-turn; do
    run 0 ruvllm run --tokenize $o "$P"
    assert "$o = --chat" "cmp -s '$OUT' '$TMP/chat'"
done
for o in -no-cnv --no-conversation --raw; do
    run 0 ruvllm run --temp 0 -n 4 $o "$P"
    assert "$o: raw completion" "cmp -s '$OUT' '$TMP/plain'"
done
run 0 ruvllm run --temp 0 -n 4 --display-prompt "$P"
assert "--display-prompt = --echo" "[ \"\$(cat '$OUT')\" = \"$P\$(cat '$TMP/plain')\" ]"
for o in -i --interactive -if --interactive-first -cnv --conversation; do
    run 2 ruvllm run $o "$P"
    err_has "$o: run answers once: for a conversation use 'ruvllm chat'"
done
# what ruvllm always does: accepted, nothing changes
for o in --jinja "-ngl 0" "--n-gpu-layers 0" --no-context-shift --no-display-prompt --no-warmup; do
    run 0 ruvllm run $o --temp 0 -n 4 "$P"
    assert "$o: accepted, the same text" "cmp -s '$OUT' '$TMP/plain'"
    err_empty
done
# short options still bundle; an unknown one-dash word is named whole
run 0 ruvllm run -n4 --temp 0 "$P"
assert "-n4 = -n 4" "cmp -s '$OUT' '$TMP/plain'"
printf '%s' "$P" >"$TMP/p.txt"
run 0 ruvllm run -jf "$TMP/p.txt" --temp 0 -n 2
out_has '"finish_reason":"length"'
run 2 ruvllm run -zqx "$P"
err_has "unknown option '-zqx'"
run 2 ruvllm run -nx "$P"
err_has "unknown option '-nx'"

# --- refused: a sentence each, exit 2, before any work ----------------------
refused() {   # PHRASE SPELLING...
    phrase=$1
    shift
    for o in "$@"; do
        run 2 ruvllm run $o 1 "$P"
        err_has "ruvllm run: $o: "
        err_has "$phrase"
    done
}
refused "there are no layers to offload" -ngl --gpu-layers -sm --split-mode -ts --tensor-split \
    -mg --main-gpu -dev --device -ot --override-tensor -nkvo --no-kv-offload -kvo --kv-offload \
    -nopo --no-op-offload
refused "on the CPU already; to keep fewer of them in memory, give --expert-budget MIB" \
    -cmoe --cpu-moe -ncmoe --n-cpu-moe
refused "no speculative decoding" -ngld --n-gpu-layers-draft --gpu-layers-draft -md --model-draft \
    --draft --draft-max --draft-n --draft-min -devd --device-draft
refused "download the model with 'ruvllm pull REPO[:QUANT]' once, then give -m NAME" \
    -hf -hfr --hf-repo -hff --hf-file -mu --model-url
refused "without a token" -hft --hf-token
refused "no locking" --mlock
refused "always maps the model file" --no-mmap --mmap -lm --load-mode
refused "numactl" --numa
refused "chooses its own batch sizes" -b --batch-size -ub --ubatch-size
refused "for the prompt and the generation alike" -tb --threads-batch
refused "taskset" -C --cpu-mask -Cr --cpu-range --prio --poll --cpu-strict
refused "ruvllm samples with --temp, --top-k, --top-p, --min-p" --mirostat --mirostat-lr \
    --mirostat-ent --typical --typical-p --top-nsigma --xtc-probability --xtc-threshold \
    --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n --dynatemp-range \
    --dynatemp-exp --samplers --sampling-seq -l --logit-bias
refused "no constrained decoding" --grammar --grammar-file --json-schema --json-schema-file
refused "text models only" -mm --mmproj -mmu --mmproj-url --image --audio
refused "text only" --embedding --embeddings --rerank --reranking
refused "--system \"\$(cat FILE)\"" -sysf --system-prompt-file
refused "--rope-scale 1/F" --rope-freq-scale
refused "--chat-template NAME" --no-jinja
refused "--prompt-cache FILE" --prompt-cache-all --prompt-cache-ro
refused "never needs defragmenting" -dt --defrag-thold

# --- chat, bench, serve -----------------------------------------------------
printf '[{"role":"user","content":"Hi"}]' >"$TMP/conv.json"
run 0 ruvllm chat --render "$TMP/conv.json"
cp "$OUT" "$TMP/render"
run 0 ruvllm chat -cnv -i -if --conversation --interactive --interactive-first --jinja -fa on \
    --render "$TMP/conv.json"
assert "chat: -cnv, -i, -if, --jinja, -fa accepted" "cmp -s '$OUT' '$TMP/render'"
run 0 ruvllm chat --system "Be brief" --render "$TMP/conv.json"
cp "$OUT" "$TMP/render-sys"
run 0 ruvllm chat -sys "Be brief" --render "$TMP/conv.json"
assert "chat: -sys = --system" "cmp -s '$OUT' '$TMP/render-sys'"
run 0 ruvllm chat --chat-template-file "$TMP/t.jinja" --render "$TMP/conv.json"
out_has "<|im_start|>user"
out_lacks "You are a helpful"
for o in -st --single-turn; do
    run 2 ruvllm chat $o
    err_has "ruvllm chat: $o: for one reply use 'ruvllm run --chat PROMPT'"
done
for o in -no-cnv --no-conversation; do
    run 2 ruvllm chat $o
    err_has "use 'ruvllm run PROMPT'"
done
for o in -p --prompt; do
    run 2 ruvllm chat $o Hello
    err_has "ruvllm chat: $o: chat reads its messages from the terminal or standard input"
done
run 2 ruvllm chat -r "x"
err_has "unknown option '-r' (llama.cpp's spelling of --stop, which ruvllm chat does not have)"
run 2 ruvllm chat -ngl 99
err_has "there are no layers to offload"
# bench (llama-bench): -fa changes nothing (said once), --n-depth is -d
run 0 ruvllm bench -fa 1 --help
err_has "note: -fa: ruvllm's attention is always the fused (flash) kernel"
run 2 ruvllm bench model --n-depth x
err_has "--depth: 'x' is not an integer"
run 2 ruvllm bench model -d x
err_has "'x' is not an integer"
run 2 ruvllm bench -pg 512,128
err_has "give those"
run 2 ruvllm bench model -ctk bf16
err_has "bf16 is not a KV cache format of ruvllm"
run 2 ruvllm bench model -ctk f16,q4_1
err_has "q4_1 is not a KV cache format of ruvllm"
run 0 ruvllm bench model -ctk q8_0 -ctv q8_0,f16 -p 0 -n 1 -r 1 -o csv
assert "bench model: llama.cpp's q8_0 in a list is our q8 (2 rows)" '[ "$(grep -c ",q8,q8\|,q8,f16" "$OUT")" = 2 ]'
run 2 ruvllm bench -ngl 99
err_has "there are no layers to offload"
# serve (llama-server)
run 0 ruvllm serve -cb --cont-batching --metrics --no-webui --jinja --help
run 2 ruvllm serve -a
err_has "option '-a' needs a value (NAME)"
run 2 ruvllm serve -np 0
err_has "-np: 0 is out of range"
for o in -nocb --no-cont-batching; do
    run 2 ruvllm serve $o
    err_has "serve always batches its sequences continuously"
done
run 2 ruvllm serve --api-key-file k
err_has "RUVLLM_API_KEY"
run 2 ruvllm serve --ssl-key-file k
err_has "TLS proxy"
# --help lists the spellings a command takes
run 0 ruvllm run --help
out_has "llama.cpp's spellings, also accepted:"
out_has "  -sys, --system-prompt TEXT   = --system TEXT"
out_has "= --lora FILE:SCALE"
finish
