/* rng.h — the executor's counter-based random numbers (exec/rng.c, model.h) as inline functions
 * that compile for the host and, under nvcc, for the device. Dropout masks and initial values on
 * the GPU must be bit-identical to the CPU's, so that a CUDA run trains the same model as a CPU
 * run and a kernel can be checked against the CPU kernel element for element; the integer mixing
 * is exact and the uniform's conversion to double is exact, so equality holds on any device.
 * tests/exec_cuda checks these functions against exec_rng_* on the host, without a GPU.
 *
 * Only what kernels need per element is here (bits, uniform, normal, dropout keep); keys are
 * formed on the host with exec_rng_key / exec_rng_key4 and passed to kernels. */
#ifndef PIPER_EXEC_CUDA_RNG_H
#define PIPER_EXEC_CUDA_RNG_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define EXEC_HD __host__ __device__ __forceinline__
#else
#define EXEC_HD static inline
#endif

#define EXEC_RNG_GOLDEN 0x9e3779b97f4a7c15ULL

EXEC_HD uint64_t exec_cuda_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

EXEC_HD uint64_t exec_cuda_rng_bits(uint64_t key, uint64_t ctr)
{
    return exec_cuda_rng_mix(exec_cuda_rng_mix(ctr * EXEC_RNG_GOLDEN + 0x632be59bd9b4e019ULL) ^ key);
}

/* (0, 1) from the top 53 bits, as exec_rng_uniform. */
EXEC_HD double exec_cuda_rng_uniform(uint64_t key, uint64_t ctr)
{
    return ((double)(exec_cuda_rng_bits(key, ctr) >> 11) + 0.5) * 0x1.0p-53;
}

/* Keep element `idx` of dropout stream `key` (probability p of dropping), as exec_dropout_keep. */
EXEC_HD bool exec_cuda_dropout_keep(uint64_t key, uint64_t idx, double p)
{
    return p <= 0 || exec_cuda_rng_uniform(key, idx) >= p;
}

/* Standard normal from counters 2i and 2i+1, as exec_rng_normal (initial parameters). The
 * device's log/cos/sqrt may differ from the host's by an ulp of a double, which the rounding to
 * fp32 or bf16 hides almost always. */
EXEC_HD double exec_cuda_rng_normal(uint64_t key, uint64_t i)
{
    double u1 = exec_cuda_rng_uniform(key, 2 * i), u2 = exec_cuda_rng_uniform(key, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
