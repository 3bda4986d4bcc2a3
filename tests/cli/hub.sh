# tests/cli/hub.sh - start tests/cli/hubserver.py (a Hugging Face Hub on
# loopback over HTTPS, with a certificate made here by openssl) for the
# `ruvllm pull` tests. Source it after lib.sh:
#
#   . tests/cli/lib.sh
#   . tests/cli/hub.sh      HUB (its root: HUB/OWNER/REPO/FILE), HUB_LOG,
#                           RUVLLM_HF_ENDPOINT, RUVLLM_CA_BUNDLE and
#                           RUVLLM_MODELS ($TMP/store) set; killed at exit
command -v python3 >/dev/null || skip_all "no python3 (scripts/bootstrap.sh installs it)"
command -v openssl >/dev/null || skip_all "no openssl (scripts/bootstrap.sh installs it)"
HUB=$TMP/hub
HUB_LOG=$TMP/hub.log
mkdir -p "$HUB"
: >"$HUB_LOG"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
    -keyout "$TMP/hub.key" -out "$TMP/hub.crt" >/dev/null 2>&1 ||
    skip_all "openssl cannot make a test certificate"
python3 tests/cli/hubserver.py "$HUB" "$TMP/hub.port" "$HUB_LOG" \
    --cert "$TMP/hub.crt" --key "$TMP/hub.key" 2>"$TMP/hub.err" &
HUB_PID=$!
trap 'kill $HUB_PID 2>/dev/null; wait $HUB_PID 2>/dev/null; rm -rf "$TMP"' EXIT
i=0
while [ ! -s "$TMP/hub.port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$TMP/hub.port" ] || { cat "$TMP/hub.err" >&2; skip_all "the test hub did not start"; }
export RUVLLM_HF_ENDPOINT="https://127.0.0.1:$(cat "$TMP/hub.port")"
export RUVLLM_CA_BUNDLE="$TMP/hub.crt"
export RUVLLM_MODELS="$TMP/store"
unset HF_ENDPOINT HF_TOKEN CURL_CA_BUNDLE SSL_CERT_FILE RUVLLM_MODEL
# hub_count PATTERN: requests in the log whose line has PATTERN
hub_count() { grep -c -F -e "$1" "$HUB_LOG"; }
