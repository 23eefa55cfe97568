/* identities.h — the kernel identities the CUDA backend implements, as one X-macro that both the
 * CUDA table (exec/cuda/table.cu, which expands it into function pointers) and plain C code (the
 * list EXEC_CUDA_IDENTITIES, which tests/exec_cuda checks against every identity the compiler can
 * emit) expand. Keeping the list in a C header means the coverage test compiles and runs on a
 * machine without CUDA, and the table cannot list an identity the test does not see.
 *
 * EXEC_CUDA_REGIONS(X) calls X(family, family id, region kind name, exec_region_kind, F, BI, BW)
 * once per region kind a family has; each row stands for the six passes the compiler forms for
 * it ("<family>.<kind>.<pass>", sched/costs.c): F; B (BI then BW); BI; BW; R (F again, from the
 * region's input); UPD. The function names are the suffixes of the CUDA region functions
 * (exec_cuda_<name>); `noop` is "nothing to compute" (the embedding's BI, the combine's BW).
 * EXEC_CUDA_AUX(X) calls X(identity, function suffix) for the cross-group numerics. */
#ifndef PIPER_EXEC_CUDA_IDENTITIES_H
#define PIPER_EXEC_CUDA_IDENTITIES_H

#define EXEC_CUDA_REGIONS(X)                                                                   \
    X("gpt", 0, "embed", EXEC_EMBED, embed_f, noop, embed_bw)                                  \
    X("gpt", 0, "attn", EXEC_ATTN, attn_f, attn_bi, attn_bw)                                   \
    X("gpt", 0, "mlp", EXEC_MLP, mlp_f, mlp_bi, mlp_bw)                                        \
    X("gpt", 0, "head", EXEC_HEAD, head_f, head_bi, head_bw)                                   \
    X("llama", 1, "embed", EXEC_EMBED, embed_f, noop, embed_bw)                                \
    X("llama", 1, "attn", EXEC_ATTN, attn_f, attn_bi, attn_bw)                                 \
    X("llama", 1, "mlp", EXEC_MLP, mlp_f, mlp_bi, mlp_bw)                                      \
    X("llama", 1, "moe_gate", EXEC_MOE_GATE, moe_gate_f, moe_gate_bi, moe_gate_bw)             \
    X("llama", 1, "moe_experts", EXEC_MOE_EXPERTS, moe_experts_f, moe_experts_bi,              \
      moe_experts_bw)                                                                          \
    X("llama", 1, "moe_combine", EXEC_MOE_COMBINE, moe_combine_f, moe_combine_bi, noop)        \
    X("llama", 1, "head", EXEC_HEAD, head_f, head_bi, head_bw)

#define EXEC_CUDA_AUX(X)                                                                       \
    X("aux.grad_norm", aux_grad_norm)                                                          \
    X("aux.aux_loss", aux_aux_loss)

/* The six identities of one region row, in the table's order. */
#define EXEC_CUDA_ID_STRINGS_(fam, famid, kname, kind, f, bi, bw)                              \
    fam "." kname ".F", fam "." kname ".B", fam "." kname ".BI", fam "." kname ".BW",          \
        fam "." kname ".R", fam "." kname ".UPD",
#define EXEC_CUDA_AUX_STRING_(id, fn) id,

/* Every identity of the CUDA table, in table order. */
static const char *const EXEC_CUDA_IDENTITIES[] = {
    EXEC_CUDA_REGIONS(EXEC_CUDA_ID_STRINGS_) EXEC_CUDA_AUX(EXEC_CUDA_AUX_STRING_)};

#define EXEC_CUDA_NIDENTITIES ((int)(sizeof EXEC_CUDA_IDENTITIES / sizeof EXEC_CUDA_IDENTITIES[0]))

#endif
