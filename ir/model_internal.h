/* model_internal.h — per-device dimensions shared by model.c (parameters) and cost.c (kernels,
 * activations), so that both sides shard a region the same way. Not part of the ir/ contract. */
#ifndef PIPER_IR_MODEL_INTERNAL_H
#define PIPER_IR_MODEL_INTERNAL_H

#include "model.h"

/* How one region's tensors look on one device under an ir_shape. */
typedef struct ir_dims {
    bool gpt;
    double e;            /* bytes per activation element */
    double pe;           /* bytes per parameter element */
    int64_t b, s, h, t;
    int64_t bs;          /* tokens of the micro-batch: rows of every GEMM (SP gathers them) */
    double tl;           /* tokens held outside the TP-split GEMMs: bs/t under SP, else bs */
    int64_t d;           /* head dimension */
    int64_t a_dev;       /* query heads on this device */
    int64_t kv_dev;      /* key/value heads on this device (replicated when tp > kv_heads) */
    int64_t qd, kvd;     /* a_dev*d and kv_dev*d: widths of Q and of K (= V) on this device */
    int64_t f_dev;       /* dense FFN width on this device */
    int64_t v_dev;       /* vocabulary slice on this device (vocab-parallel LM head/embedding) */
    int64_t e_dev;       /* experts on this device */
    int64_t ef_dev;      /* expert FFN width on this device (experts are TP-split too) */
    int64_t cap;         /* MoE capacity C per expert per source */
    int64_t ep;
    int64_t moe_buf;     /* tokens in the dispatched buffer: experts * C */
} ir_dims;

void ir_dims_init(const ir_model *m, const ir_shape *s, ir_dims *d);

/* Parameters of the norm layer in front of attention/MLP/head: LayerNorm has a scale and a bias,
 * RMSNorm a scale only. */
static inline int64_t ir_norm_params(const ir_model *m)
{
    return m->family == IR_FAMILY_GPT ? 2 * m->hidden : m->hidden;
}

#endif
