/*
 * family.h - model families as descriptions (lib/engine/family.c), for
 * the loader (lib/engine/model.c); not installed.
 */
#ifndef RVL_FAMILY_H
#define RVL_FAMILY_H

#include "format/format_int.h"

/* Q/K/V biases: what a family's files carry. */
typedef enum {
    RVL_FAMILY_BIAS_NONE,      /* none: bias tensors in the file are refused */
    RVL_FAMILY_BIAS_OPTIONAL,  /* taken when every layer has all three (llama.cpp) */
    RVL_FAMILY_BIAS_REQUIRED,  /* every layer has all three */
} rvl_family_bias;

/* One architecture (general.architecture), described. The hyper-parameter
 * keys (<arch>.block_count, ...) and tensor names (blk.N.attn_q.weight,
 * ...) are llama.cpp's, the same for every family: the recipe says which
 * tensors a layer has. */
typedef struct {
    const char *name;          /* general.architecture */
    rvl_rope_type rope_type;   /* which dimensions RoPE pairs */
    rvl_family_bias bias;
    rvl_block block;           /* the recipe before the file's keys */
    rvl_block may;             /* what its files may switch on besides (a
                                  nonzero field: the feature) */
    bool moe_renorm;           /* with experts: their weights renormalized */
    const char *ffn_norm;      /* the FFN norm's tensor (blk.N.<this>.weight), or NULL:
                                  ffn_norm (gpt-oss: post_attention_norm) */
    /* where the family is truly different: fills in what llama.cpp derives
     * rather than reads (Gemma's embedding scale), after the file's keys;
     * or NULL */
    void (*finish)(rvl_hparams *hp);
} rvl_family;

/* borrowed (static); NULL for an unknown architecture */
const rvl_family *rvl_family_find(const char *arch);
/* "llama, qwen2, ...": the architectures rvl_family_find knows */
const char *rvl_family_names(void);

/* Complete hp->block from the family and the file's feature keys and
 * tensors (hp's hyper-parameters already read), and refuse what `have`
 * (the CPU forward pass's recipe, rvl_forward_block) lacks: RVL_EUNSUPPORTED
 * naming the key or tensor that asked for it, or the architecture whose
 * description has it; and a feature the file asks for that the family
 * does not have: RVL_EFORMAT naming the key or tensor. */
int rvl_family_recipe(const rvl_family *fam, const rvl_file *f, rvl_hparams *hp,
                      const rvl_block *have);

#endif
