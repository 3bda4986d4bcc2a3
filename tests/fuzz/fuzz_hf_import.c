/*
 * fuzz_hf_import.c - libFuzzer harness for the metadata half of the
 * Hugging Face import (lib/convert/convert_hf.c): config.json, tokenizer.json
 * and tokenizer_config.json, given as one input split at the first two
 * NUL bytes (missing parts are empty). Hostile JSON must give an error,
 * never a crash, a leak or a huge allocation. Corpus:
 * tests/fuzz/corpus/hf_import/ (seeds written by hand: SmolLM2-like,
 * Qwen2-like and Llama-3-like directories cut down to a few tokens).
 */
#include <stdint.h>
#include <string.h>

#include "convert/convert_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p[3] = {data, NULL, NULL};
    size_t n[3] = {size, 0, 0};
    for (int k = 1; k < 3; k++) {
        const uint8_t *z = n[k - 1] ? memchr(p[k - 1], 0, n[k - 1]) : NULL;
        if (!z) {
            p[k] = (const uint8_t *)"";
            break;
        }
        p[k] = z + 1;
        n[k] = n[k - 1] - (size_t)(p[k] - p[k - 1]);
        n[k - 1] = (size_t)(z - p[k - 1]);
    }
    if (!p[2])
        p[2] = (const uint8_t *)"";
    rvl_convert_hf_parse(p[0], n[0], p[1], n[1], p[2], n[2]);
    return 0;
}
