/* rng.c — counter-based random numbers: every random value piper's executor uses (initial
 * parameters, dropout masks, synthetic tokens) is a pure function of a key and a counter, never
 * of a generator's state. That is what makes a tensor-parallel shard initialise to the exact slice
 * of the whole tensor, dropout masks identical under any split of the batch or of the heads, and a
 * recomputation rebuild exactly what the forward saved.
 *
 * The mixing function is splitmix64's finaliser (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", OOPSLA 2014), a bijection of 64-bit words with good
 * avalanche. bits(key, ctr) mixes the counter, xors the key and mixes again: distinct counters
 * give distinct pre-images under one key, and keys themselves come out of the mixer. */
#include <math.h>

#include "model.h"

#define GOLDEN 0x9e3779b97f4a7c15ULL

uint64_t exec_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t exec_rng_key(uint64_t seed, const char *name)
{
    /* FNV-1a over the name, then mixed with the seed: names differing by one byte get unrelated
     * streams. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; p && *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return exec_rng_mix(exec_rng_mix(seed + GOLDEN) ^ h);
}

uint64_t exec_rng_key4(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t k = exec_rng_mix(seed + GOLDEN);
    k = exec_rng_mix(k ^ (a + 1 * GOLDEN));
    k = exec_rng_mix(k ^ (b + 2 * GOLDEN));
    k = exec_rng_mix(k ^ (c + 3 * GOLDEN));
    return k;
}

uint64_t exec_rng_bits(uint64_t key, uint64_t ctr)
{
    return exec_rng_mix(exec_rng_mix(ctr * GOLDEN + 0x632be59bd9b4e019ULL) ^ key);
}

double exec_rng_uniform(uint64_t key, uint64_t ctr)
{
    /* the top 53 bits, centred in their interval: never 0 (log is safe) nor 1 */
    return ((double)(exec_rng_bits(key, ctr) >> 11) + 0.5) * 0x1.0p-53;
}

double exec_rng_normal(uint64_t key, uint64_t i)
{
    /* Box-Muller: sqrt(-2 ln u1) cos(2 pi u2) is N(0, 1) for independent uniforms u1, u2. */
    double u1 = exec_rng_uniform(key, 2 * i), u2 = exec_rng_uniform(key, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int32_t exec_synthetic_token(uint64_t seed, int64_t step, int64_t sample, int64_t pos,
                             int64_t vocab)
{
    uint64_t k = exec_rng_key4(seed, 0x746f6b656e73ULL /* "tokens" */, (uint64_t)step,
                               (uint64_t)sample);
    /* the modulo's bias is below vocab / 2^64, i.e. nothing for vocabularies of up to 2^24 */
    uint64_t r = exec_rng_bits(k, (uint64_t)pos);
    return (int32_t)(r % (uint64_t)(vocab > 0 ? vocab : 1));
}
