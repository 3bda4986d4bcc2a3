/*
 * fuzz_jinja.c - libFuzzer harness for the chat-template engine.
 *
 * Input: a template, optionally followed by a line "#--context--#" and a
 * JSON object used as the render context (without one, a small
 * conversation with a system message and non-ASCII text is used). The
 * template is parsed and rendered with small limits, so that loops,
 * recursion and large outputs end in errors quickly; family detection and
 * the built-in formatter also run on it. Checks, beyond "no crash, no
 * hang, no leak": a successful render has the length it reports and a
 * NUL after it; a failure leaves a message and no output.
 * Corpus: tests/fuzz/corpus/jinja/ (the real templates and small nasty ones).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ruvllm.h"

static const char DEFAULT_CTX[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Gr\\u00fc\\u00dfe, \\u4e16\\u754c\"},"
    " {\"role\": \"assistant\", \"content\": \" ok \"},"
    " {\"role\": \"user\", \"content\": \"again\"}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"a\": [1, 2.5, null]}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char SEP[] = "\n#--context--#\n";
    if (size > 200000) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    size_t tlen = size;
    const char *ctx = DEFAULT_CTX;
    char *sep = memmem(buf, size, SEP, sizeof SEP - 1);
    if (sep) {
        tlen = (size_t)(sep - buf);
        ctx = sep + sizeof SEP - 1;
    }
    rvl_chat_tmpl *t = NULL;
    if (rvl_chat_tmpl_open(&t, buf, tlen, "fuzz") == 0) {
        rvl_chat_render_opts o = {
            .context_json = ctx, .use_now = true, .now = 1721995200,
            .limit_ops = 200000, .limit_output = 1 << 20, .limit_memory = 64 << 20,
        };
        char *out = (char *)1;
        size_t len = 12345;
        int rc = rvl_chat_tmpl_render_ex(t, &o, &out, &len);
        if (rc == 0) {
            if (!out || out[len] != 0) abort();
            free(out);
        } else if (out != NULL || len != 0 || !rvl_errmsg()[0]) {
            abort();
        }
        rvl_chat_tmpl_close(t);
    } else if (!rvl_errmsg()[0]) {
        abort();
    }
    /* detection and the built-in formatter on whatever the input says */
    char save = buf[tlen];
    buf[tlen] = 0;
    rvl_chat_family f = rvl_chat_detect(buf);
    buf[tlen] = save;
    rvl_chat_msg msgs[2] = {{"system", buf + tlen}, {"user", buf}};
    char *out = NULL;
    if (f != RVL_CHAT_UNKNOWN && rvl_chat_builtin_render(f, msgs, 2, true, "<s>", "</s>", &out) == 0) free(out);
    free(buf);
    return 0;
}
