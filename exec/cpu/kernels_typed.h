/* kernels_typed.h — the typed kernels, declared once for each element type. kernels.h includes
 * this file twice, with EXEC_REAL float / EXEC_T(x) x##_f32 and EXEC_REAL double /
 * EXEC_T(x) x##_f64; the sources are likewise compiled twice (exec/cpu/real.h). No include
 * guard on purpose. Include kernels.h, not this file. */

/* ---------------------------------------------------------------- building blocks */

/* Row-major C = alpha * op(A) op(B) + beta * C through BLAS (op = transpose when ta / tb);
 * op(A) is m x k, op(B) k x n. beta = 0 does not read C. */
void EXEC_T(exec_gemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, EXEC_REAL alpha,
                       const EXEC_REAL *a, int64_t lda, const EXEC_REAL *b, int64_t ldb,
                       EXEC_REAL beta, EXEC_REAL *c, int64_t ldc);

/* LayerNorm over rows of n: y = (x - mean) * rstd * g + b, saving mean and rstd per row. */
void EXEC_T(exec_layernorm_f)(const EXEC_REAL *x, const EXEC_REAL *g, const EXEC_REAL *b,
                              EXEC_REAL *y, EXEC_REAL *mean, EXEC_REAL *rstd, int64_t rows,
                              int64_t n, double eps);
/* dx (= or += with accumulate) from dy: with xhat = (x - mean) * rstd and dxhat = dy * g,
 * dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)). */
void EXEC_T(exec_layernorm_bi)(const EXEC_REAL *dy, const EXEC_REAL *x, const EXEC_REAL *g,
                               const EXEC_REAL *mean, const EXEC_REAL *rstd, EXEC_REAL *dx,
                               int64_t rows, int64_t n, bool accumulate);
/* dg += sum_rows dy * xhat, db += sum_rows dy (db may be NULL). */
void EXEC_T(exec_layernorm_bw)(const EXEC_REAL *dy, const EXEC_REAL *x, const EXEC_REAL *mean,
                               const EXEC_REAL *rstd, EXEC_REAL *dg, EXEC_REAL *db, int64_t rows,
                               int64_t n);
/* RMSNorm: y = x * rstd * g with rstd = 1 / sqrt(mean(x^2) + eps). */
void EXEC_T(exec_rmsnorm_f)(const EXEC_REAL *x, const EXEC_REAL *g, EXEC_REAL *y,
                            EXEC_REAL *rstd, int64_t rows, int64_t n, double eps);
/* dx = rstd * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dy * g, xhat = x * rstd. */
void EXEC_T(exec_rmsnorm_bi)(const EXEC_REAL *dy, const EXEC_REAL *x, const EXEC_REAL *g,
                             const EXEC_REAL *rstd, EXEC_REAL *dx, int64_t rows, int64_t n,
                             bool accumulate);
/* dg += sum_rows dy * xhat. */
void EXEC_T(exec_rmsnorm_bw)(const EXEC_REAL *dy, const EXEC_REAL *x, const EXEC_REAL *rstd,
                             EXEC_REAL *dg, int64_t rows, int64_t n);

/* GELU, tanh form (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void EXEC_T(exec_gelu_f)(const EXEC_REAL *x, EXEC_REAL *y, int64_t n);
void EXEC_T(exec_gelu_bi)(const EXEC_REAL *dy, const EXEC_REAL *x, EXEC_REAL *dx, int64_t n);
/* SwiGLU: a = silu(g) * u, silu(g) = g * sigmoid(g). */
void EXEC_T(exec_swiglu_f)(const EXEC_REAL *g, const EXEC_REAL *u, EXEC_REAL *a, int64_t n);
void EXEC_T(exec_swiglu_bi)(const EXEC_REAL *da, const EXEC_REAL *g, const EXEC_REAL *u,
                            EXEC_REAL *dg, EXEC_REAL *du, int64_t n);

/* RoPE ("rotate half", as Llama): cs holds cos and sin of pos * theta^(-2i/d) for pos < s,
 * i < d/2 ([s][d/2][2]). exec_rope_apply rotates every head of every token of x ([tokens][heads]
 * [d], token t at position t mod s) in place; inverse rotates back, which is also the backward
 * (a rotation's Jacobian is the rotation). */
void EXEC_T(exec_rope_table)(EXEC_REAL *cs, int64_t s, int64_t d, double theta);
void EXEC_T(exec_rope_apply)(EXEC_REAL *x, int64_t tokens, int64_t heads, int64_t d, int64_t s,
                             const EXEC_REAL *cs, bool inverse);

/* Optimizers over n elements; g is multiplied by o->grad_scale first; decay applies the
 * (decoupled, AdamW) weight decay. */
void EXEC_T(exec_adamw)(EXEC_REAL *p, const EXEC_REAL *g, EXEC_REAL *m, EXEC_REAL *v, int64_t n,
                        const exec_optim *o, bool decay);
void EXEC_T(exec_sgd)(EXEC_REAL *p, const EXEC_REAL *g, int64_t n, const exec_optim *o,
                      bool decay);
/* Sum of squares, accumulated in double. */
double EXEC_T(exec_sumsq)(const EXEC_REAL *x, int64_t n);

/* ---------------------------------------------------------------- regions (see kernels.h) */

int EXEC_T(exec_noop)(const exec_call *c, base_error *e);
int EXEC_T(exec_embed_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_embed_bw)(const exec_call *c, base_error *e);
int EXEC_T(exec_attn_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_attn_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_attn_bw)(const exec_call *c, base_error *e);
int EXEC_T(exec_mlp_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_mlp_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_mlp_bw)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_gate_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_gate_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_gate_bw)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_experts_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_experts_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_experts_bw)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_combine_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_moe_combine_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_head_f)(const exec_call *c, base_error *e);
int EXEC_T(exec_head_bi)(const exec_call *c, base_error *e);
int EXEC_T(exec_head_bw)(const exec_call *c, base_error *e);

/* The head's forward in three phases, for executors that reduce the vocab-parallel statistics
 * themselves. stats holds 3*b*s elements: [max | sum of exp | target logit] per token.
 * begin: norm, logits of the slice, local max into stats[0, T). The caller reduces stats[0, T)
 * with MAX over the TP group. sums: with the global max, the slice's sum of exp(logit - max)
 * into stats[T, 2T) and the target's logit (0 unless the slice owns it) into stats[2T, 3T); the
 * caller reduces stats[T, 3T) with SUM. end: the loss and the logits' gradient
 * loss_scale * (softmax - onehot(target)), which is what the act buffer keeps for BI and BW (the
 * fused cross-entropy of Megatron and Liger: the V-wide tensor is the only one kept). */
int EXEC_T(exec_head_f_begin)(const exec_call *c, EXEC_REAL *stats, base_error *e);
int EXEC_T(exec_head_f_sums)(const exec_call *c, EXEC_REAL *stats, base_error *e);
int EXEC_T(exec_head_f_end)(const exec_call *c, const EXEC_REAL *stats, base_error *e);

/* The MoE route tensor (gate F's y2, combine F's x2, and their gradients): the residual [T][h],
 * the routing weights [T][k] and the slots [T][k] (int32, -1 = dropped), packed. The gradient uses the same layout (its slots are left as the forward's). */
int64_t EXEC_T(exec_route_bytes)(const exec_cfg *c);
void EXEC_T(exec_route_view)(const exec_cfg *c, void *route, EXEC_REAL **resid, EXEC_REAL **w,
                             int32_t **slot);

/* UPD of a region (AdamW or SGD over the call's range; weight decay on tensors of ndim >= 2). */
int EXEC_T(exec_region_upd)(const exec_call *c, base_error *e);
int EXEC_T(exec_aux_grad_norm)(const exec_call *c, base_error *e);
int EXEC_T(exec_aux_aux_loss)(const exec_call *c, base_error *e);

/* Bytes of a region's act and work buffers (pass_f: the part of the work buffer F and R use,
 * a prefix of it). */
int64_t EXEC_T(exec_embed_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_attn_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_mlp_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_moe_gate_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_moe_experts_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_moe_combine_act_bytes)(const exec_cfg *c, const exec_shard *s);
int64_t EXEC_T(exec_head_act_bytes)(const exec_cfg *c, const exec_shard *s);
/* Under a recompute mode (exec_act_mode): the kept bytes, and the rebuilt ones in *rebuilt. */
int64_t EXEC_T(exec_attn_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t EXEC_T(exec_mlp_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t EXEC_T(exec_moe_gate_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t EXEC_T(exec_moe_experts_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t EXEC_T(exec_moe_combine_act_split)(const exec_cfg *c, const exec_shard *s, int mode, int64_t *rebuilt);
int64_t EXEC_T(exec_embed_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_attn_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_mlp_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_moe_gate_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_moe_experts_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_moe_combine_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
int64_t EXEC_T(exec_head_work_bytes)(const exec_cfg *c, const exec_shard *s, bool pass_f);
