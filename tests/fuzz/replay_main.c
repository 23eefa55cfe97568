/* replay_main.c — turns a fuzz target into an ordinary test: feeds every file of the directories
 * named on the command line (a target's regressions, then its seed corpus) to the target's
 * LLVMFuzzerTestOneInput, in name order. A crash, a sanitizer report or a broken promise ends
 * the process, so ctest fails; a missing directory counts as empty (no crash was ever found). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        printf("%s: no such directory, nothing to replay\n", dir);
        return 0;
    }
    BASE_VEC(char *) names = {0};
    for (struct dirent *ent; (ent = readdir(d)) != NULL;) {
        if (ent->d_name[0] == '.' || strncmp(ent->d_name, "README", 6) == 0) continue;
        char *name = base_xmalloc(strlen(ent->d_name) + 1);
        strcpy(name, ent->d_name);
        BASE_VEC_PUSH(names, name);
    }
    closedir(d);
    if (names.n) qsort(names.v, names.n, sizeof *names.v, cmp_names);
    int n = 0, bad = 0;
    for (size_t i = 0; i < names.n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names.v[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            base_buf buf = {0};
            base_error e;
            base_error_clear(&e);
            if (base_read_file(path, &buf, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                bad = 1;
            } else {
                printf("  %s (%zu bytes)\n", names.v[i], buf.n);
                fflush(stdout);
                LLVMFuzzerTestOneInput((const uint8_t *)buf.s, buf.n);
                n++;
            }
            base_buf_free(&buf);
        }
        free(names.v[i]);
    }
    free(names.v);
    printf("%s: replayed %d inputs\n", dir, n);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR...\n", argv[0]);
        return 2;
    }
    int bad = 0;
    for (int i = 1; i < argc; i++) bad |= replay_dir(argv[i]);
    return bad;
}
