/*
 * serve.h - ruvllm serve in two parts: the OpenAI API's requests and
 * answers as JSON (serve_api.c: parsing, validation, the bodies and the
 * server-sent-event chunks) and the HTTP server around the scheduler
 * (serve.c).
 */
#ifndef RVL_SERVE_H
#define RVL_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ruvllm.h"

typedef enum { API_CHAT, API_COMPLETIONS } api_kind;

/* An error as OpenAI answers it: HTTP status and
 * {"error": {"message", "type", "param", "code"}}. */
typedef struct {
    int status;                 /* 400, 401, 404, 405, 413, 429, 500, 503 */
    const char *type;           /* "invalid_request_error", "authentication_error", ... */
    const char *code;           /* NULL: null */
    char param[64];             /* "" : null */
    char message[512];
} api_error;
void api_error_set(api_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* A generation request (POST /v1/chat/completions or /v1/completions),
 * checked field by field. Unknown fields are ignored and "model" may name
 * anything (the loaded model answers), as llama-server does. */
typedef struct {
    api_kind kind;
    bool stream;
    bool include_usage;         /* stream_options.include_usage */
    rvl_chat_msg *msgs;         /* chat: strings borrowed from the parsed tree */
    size_t n_msgs;
    const char *prompt;         /* completions: the text, or NULL with ids */
    int32_t *ids;               /* completions: a prompt of token ids (owned) */
    size_t n_ids;
    int32_t max_tokens;         /* max_tokens / max_completion_tokens; -1: none */
    rvl_sampler_params sampling;/* the server's defaults, overridden by the request */
    const char **stops;         /* NULL-terminated (owned array, borrowed strings) */
    bool ignore_eos;            /* an extension, as llama-server's */
    int64_t t_max_predict_ms;   /* llama-server's: generation past this many ms after the
                                   first token ends at the next newline; 0: none */
    void *tree;                 /* the parsed body (cJSON), owner of the strings */
} api_request;

/* Parse and check body[0..n). 0, or -1 with *e filled (400). `defaults`:
 * the server's sampling; a request without "seed" gets `seed`. */
int api_parse(api_kind kind, const char *body, size_t n, const rvl_sampler_params *defaults,
              uint64_t seed, api_request *r, api_error *e);
void api_request_free(api_request *r);

/* What every answer of one request repeats. */
typedef struct {
    api_kind kind;
    char id[48];                /* "chatcmpl-<hex>" / "cmpl-<hex>" */
    int64_t created;            /* Unix seconds */
    const char *model;
} api_meta;

/* The bodies, written with rvl_jw to f. */
void api_write_error(FILE *f, const api_error *e);
/* A thinking model's reasoning (NULL: none) goes in reasoning_content
 * beside the answer, as llama-server and DeepSeek's API put it. */
void api_write_result(FILE *f, const api_meta *m, const char *text, size_t n,
                      const char *reasoning, size_t n_reasoning, const char *finish,
                      uint32_t n_prompt, uint32_t n_gen);
/* One streamed chunk: text (a chat's first chunk: role_first, the
 * assistant role with empty content; reasoning: the text is reasoning
 * (delta.reasoning_content)), or the last one with finish (text NULL);
 * usage: the include_usage chunk (empty choices). */
void api_write_chunk(FILE *f, const api_meta *m, bool role_first, const char *text, size_t n,
                     bool reasoning, const char *finish);
void api_write_usage_chunk(FILE *f, const api_meta *m, uint32_t n_prompt, uint32_t n_gen);
void api_write_models(FILE *f, const char *model, int64_t created);

#endif
