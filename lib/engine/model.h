/*
 * model.h - the model and context internals shared by model.c, ctx.c,
 * forward.c and session.c; not installed.
 */
#ifndef RVL_MODEL_H
#define RVL_MODEL_H

#include "formats.h"
#include "format/format_int.h"

/* A weight matrix [ne1 rows x ne0 columns] (GGUF: ne0 innermost) or a
 * vector (ne1 == 1), borrowed from the mapped file. */
typedef struct {
    bool present;
    uint32_t type;
    const rvl_kformat *kf;
    uint64_t ne0, ne1;
    uint64_t row_bytes;
    const void *data;
    /* Rows 0..packed_rows-1 (whole groups of RVL_PACK16_ROWS) also in the
     * kernels' 16-row layout (formats.h gemm16), owned by the model;
     * NULL when the format or ISA has none or RUVLLM_REPACK=0. data
     * stays the file's row-major bytes (token lookups, other backends). */
    const void *packed;
    uint64_t packed_rows;
} rvl_weight;

typedef struct {
    rvl_weight attn_norm;             /* (dim) */
    rvl_weight wq, wk, wv;            /* (n_head*hd, dim), (n_kv*hd, dim) x2; fused_qkv:
                                         row views of attn_qkv */
    rvl_weight bq, bk, bv;            /* biases (qwen2) or absent */
    rvl_weight q_norm, k_norm;        /* (hd) per-head RMSNorm gains (qk_norm) or absent */
    rvl_weight wo;                    /* (dim, n_head*hd) */
    rvl_weight post_attn_norm;        /* (dim) norm_post_attn, or absent */
    rvl_weight ffn_norm;              /* (dim) */
    rvl_weight w_gate, w_up;          /* (ff, dim); fused_gate_up: row views of ffn_up */
    rvl_weight post_ffn_norm;         /* (dim) norm_post_ffn, or absent */
    /* mixture of experts (block.moe; then w_gate/w_up/w_down are absent) */
    rvl_weight router;                /* ffn_gate_inp (n_expert, dim) */
    rvl_weight *exps;                 /* (3 * n_expert): expert e's gate, up, down at
                                         3e, 3e+1, 3e+2: views of ffn_{gate,up,down}_exps
                                         (model-owned) */
    rvl_weight sh_gate, sh_up, sh_down; /* the shared expert (moe_shared) */
    rvl_weight sh_router;             /* ffn_gate_inp_shexp (dim): its sigmoid gate */
    rvl_weight router_b;              /* ffn_gate_inp.bias (n_expert) (moe_bias) */
    rvl_weight exps_b[3];             /* ffn_{gate,up,down}_exps.bias (moe_bias):
                                         (n_ff_exp or dim) x n_expert, expert e's row e */
    rvl_weight sel_bias;              /* exp_probs_b.bias (n_expert) (moe_sel_bias) */
    rvl_weight bo;                    /* attn_output.bias (dim) (attn_out_bias) */
    rvl_weight sinks;                 /* attn_sinks.weight (n_head) (attn_sinks) */
    /* multi-head latent attention (block.mla; then wq is attn_q of the
     * Lite models or absent, wk/wv absent) */
    rvl_weight wq_a, q_a_norm, wq_b;  /* (q_rank, dim), (q_rank), (n_head*k_dim, q_rank) */
    rvl_weight wkv_a;                 /* attn_kv_a_mqa (kv_rank + rope_dim, dim) */
    rvl_weight kv_a_norm;             /* (kv_rank) */
    rvl_weight *k_b, *v_b;            /* per head h: attn_k_b's (kv_rank, k_dim - rope_dim)
                                         and attn_v_b's (v_dim, kv_rank) matrix (views,
                                         model-owned) */
    rvl_weight w_down;                /* (dim, ff) */
} rvl_layer;

struct rvl_model {
    rvl_file *file;
    rvl_hparams hp;
    rvl_weight tok_embd;              /* (vocab, dim) */
    rvl_weight output_norm;           /* (dim) */
    rvl_weight output;                /* (vocab, dim); == tok_embd when tied */
    rvl_weight rope_freqs;            /* (rope_dim/2) f32, Llama 3.1; or absent */
    rvl_weight rope_long, rope_short; /* (rope_dim/2) f32 LongRoPE divisors (Phi-3) past
                                         and within rope_orig_ctx; or absent */
    rvl_layer *layers;                /* owned: n_layer */
    rvl_weight *experts;              /* owned: every layer's expert views */
    rvl_weight *mla_views;            /* owned: every layer's k_b and v_b head views */
    struct rvl_experts *xs;           /* owned: the expert store (engine/experts.h), or NULL */
    struct rvl_tokenizer *tok;        /* owned */
    void *packed;                     /* owned: every weight's packed rows */
    size_t packed_bytes;
    bool *used;                       /* owned while loading: the tensors the loader took */
    _Atomic uint64_t fingerprint;     /* 0: not computed yet (then set once;
                                         racing computations agree) */
};

/* Context internals for lib/engine/session.c (lib/engine/ctx.c): the CPU
 * backend's paged KV cache (lib/engine/kvcache.h; NULL when another
 * backend holds the cache: rvl_ctx_params.backend) and the position
 * setter (after loading the cache: pos = its length). */
struct rvl_kvcache *rvl_ctx_kvc(rvl_ctx *c);
/* The CPU backend's session of a context (lib/engine/batch.c), or NULL
 * for another backend. */
rvl_backend *rvl_ctx_cpu_session(rvl_ctx *c);
void rvl_ctx_set_pos(rvl_ctx *c, uint32_t pos);
/* After a pass over the row-major weights (the fingerprint): drop the file
 * pages of the packed ones from the page tables again. */
void rvl_model_release_packed_source(const rvl_model *m);

/* rvl_session_load from a buffer (the fuzz harness); path names it. */
int rvl_session_load_mem(rvl_ctx *c, const char *path, const void *buf, size_t size,
                         int32_t **ids, size_t *n_ids, char **extra_json);

/* The hyper-parameters' ranges, checked once for every producer (the GGUF
 * loader, the Hugging Face import): RVL_EFORMAT naming the GGUF key and
 * the value, with `path` first. Non-finite values are refused. */
int rvl_model_check_hparams(const rvl_hparams *hp, const char *path);

#endif
