/* plan_text.h — what the plan's reader (plan_read.c) and writer (plan_write.c) share: the
 * lexical rules of the file form (docs/plan-format.md) and an index from names to the first
 * index with that name. Internal to plan/. */
#ifndef PIPER_PLAN_TEXT_H
#define PIPER_PLAN_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* name -> first index with that name. Lets the writer print a stream, region or kernel identity by
 * name only when the name leads back to the same index, and lets the reader resolve it in O(1). */
typedef struct plan_text_name_index {
    int32_t *slot;
    size_t mask;
    const char *const *names;
} plan_text_name_index;

void plan_text_name_index_build(plan_text_name_index *ix, const char *const *names, int n);
/* The first index named exactly s[0..n), or -1. */
int plan_text_name_index_find(const plan_text_name_index *ix, const char *s, size_t n);
void plan_text_name_index_free(plan_text_name_index *ix);

/* A key is [a-z_][a-z0-9_]*. */
int plan_text_is_key_start(int c);
int plan_text_is_key_char(int c);
/* Whether a string may be written without quotes (see plan_text.c). */
int plan_text_str_is_bare(const char *s);

#endif
