/* plan_text.c — the lexical rules and the name index that the plan's reader and writer share
 * (plan_text.h). */
#include "plan_text.h"

#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

/* ---------------------------------------------------------------- name index */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int plan_text_name_index_find(const plan_text_name_index *ix, const char *s, size_t n)
{
    for (size_t h = hash_bytes(s, n) & ix->mask;; h = (h + 1) & ix->mask) {
        int32_t i = ix->slot[h];
        if (i < 0) return -1;
        const char *nm = ix->names[i];
        if (strncmp(nm, s, n) == 0 && nm[n] == 0) return i;
    }
}

void plan_text_name_index_build(plan_text_name_index *ix, const char *const *names, int n)
{
    size_t cap = 16;
    while (cap < 2 * (size_t)(n > 0 ? n : 0)) cap <<= 1;
    ix->slot = base_xmalloc(cap * sizeof *ix->slot);
    memset(ix->slot, 0xff, cap * sizeof *ix->slot);
    ix->mask = cap - 1;
    ix->names = names;
    for (int i = 0; i < n; i++) {
        if (!names[i]) continue;
        size_t len = strlen(names[i]);
        size_t h = hash_bytes(names[i], len) & ix->mask;
        for (;; h = (h + 1) & ix->mask) {
            int32_t j = ix->slot[h];
            if (j < 0) {
                ix->slot[h] = i;
                break;
            }
            if (strcmp(names[j], names[i]) == 0) break; /* first one wins */
        }
    }
}

void plan_text_name_index_free(plan_text_name_index *ix)
{
    free(ix->slot);
    ix->slot = NULL;
}

/* ---------------------------------------------------------------- shared lexical rules */

int plan_text_is_key_start(int c) { return (c >= 'a' && c <= 'z') || c == '_'; }
int plan_text_is_key_char(int c) { return plan_text_is_key_start(c) || (c >= '0' && c <= '9'); }

/* A string may be written bare when reading it back cannot mistake it for something else: a
 * quoted string, a key=value pair, the NULL marker `~` or an index reference `#n`. */
int plan_text_str_is_bare(const char *s)
{
    if (!s[0] || s[0] == '#' || s[0] == '~') return 0;
    for (const unsigned char *q = (const unsigned char *)s; *q; q++)
        if (*q < 0x21 || *q > 0x7e || *q == '"' || *q == '\\') return 0;
    if (plan_text_is_key_start((unsigned char)s[0])) {
        const char *q = s + 1;
        while (plan_text_is_key_char((unsigned char)*q)) q++;
        if (*q == '=') return 0;
    }
    return 1;
}
