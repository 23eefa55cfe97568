/* test_out.c — base_out (base.h, "output files"): an output is replaced whole or not at all,
 * written through symbolic links, never through a planted temporary, and a directory or device
 * is never replaced. Each case works in a fresh directory under the build tree. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "tests/testutil.h"

static char dir[1024];

/* A new empty directory for one case. */
static void fresh_dir(const char *name)
{
    const char *b = getenv("PIPER_BINARY_DIR");
    snprintf(dir, sizeof dir, "%s/tests/base/out_%s", b ? b : ".", name);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

static const char *in_dir(const char *name)
{
    static char p[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

/* The whole file as a string ("" when missing). */
static const char *read_text(const char *path)
{
    static char buf[4096];
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int entries(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void test_new_and_replaced_files(void)
{
    fresh_dir("new");
    base_error e;
    base_error_clear(&e);
    mode_t old = umask(027);
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("a.txt"), "the text", "one\n", 4, &e), 0);
    struct stat st;
    CU_ASSERT_EQUAL(stat(in_dir("a.txt"), &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0640); /* 0666 & ~umask, as a plain create */
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("a.txt")), "one\n");
    /* a replaced file keeps its permission bits */
    CU_ASSERT_EQUAL(chmod(in_dir("a.txt"), 0600), 0);
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("a.txt"), "the text", "two\n", 4, &e), 0);
    CU_ASSERT_EQUAL(stat(in_dir("a.txt"), &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("a.txt")), "two\n");
    umask(old);
    CU_ASSERT_EQUAL(entries(), 1); /* no temporary left */
    CU_ASSERT_FALSE(e.set);
}

static void test_symlink_written_through(void)
{
    fresh_dir("link");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(mkdir(in_dir("real"), 0777), 0);
    write_text(in_dir("real/t.txt"), "old\n");
    CU_ASSERT_EQUAL(symlink("real/t.txt", in_dir("l1")), 0);
    CU_ASSERT_EQUAL(symlink("l1", in_dir("l2")), 0); /* a chain, relative to each link's folder */
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("l2"), "the text", "new\n", 4, &e), 0);
    struct stat st;
    CU_ASSERT_EQUAL(lstat(in_dir("l2"), &st), 0);
    CU_ASSERT_TRUE(S_ISLNK(st.st_mode));
    CU_ASSERT_EQUAL(lstat(in_dir("l1"), &st), 0);
    CU_ASSERT_TRUE(S_ISLNK(st.st_mode));
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("real/t.txt")), "new\n");
    /* a dangling link creates the file it names */
    CU_ASSERT_EQUAL(symlink("real/made.txt", in_dir("dangling")), 0);
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("dangling"), "the text", "made\n", 5, &e), 0);
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("real/made.txt")), "made\n");
    /* a loop of links is refused */
    CU_ASSERT_EQUAL(symlink("loop_b", in_dir("loop_a")), 0);
    CU_ASSERT_EQUAL(symlink("loop_a", in_dir("loop_b")), 0);
    CU_ASSERT_FALSE(e.set);
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("loop_a"), "the text", "x", 1, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "loop_a: cannot write the text (Too many levels of symbolic links)");
}

static void test_planted_temporary_not_followed(void)
{
    fresh_dir("planted");
    base_error e;
    base_error_clear(&e);
    write_text(in_dir("victim"), "precious\n");
    CU_ASSERT_EQUAL(symlink("victim", in_dir("out.txt.tmp")), 0);
    CU_ASSERT_EQUAL(symlink("victim", in_dir(".out.txt.XXXXXX")), 0);
    CU_ASSERT_EQUAL(base_out_write_file(in_dir("out.txt"), "the text", "fresh\n", 6, &e), 0);
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("victim")), "precious\n");
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("out.txt")), "fresh\n");
    struct stat st;
    CU_ASSERT_EQUAL(lstat(in_dir("out.txt"), &st), 0);
    CU_ASSERT_TRUE(S_ISREG(st.st_mode));
    CU_ASSERT_EQUAL(entries(), 4);
}

static void test_refused_targets(void)
{
    fresh_dir("refused");
    base_error e;
    base_error_clear(&e);
    CU_ASSERT_EQUAL(base_out_write_file(dir, "the plan", "x", 1, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, ": is a directory; give a file name for the plan");
    struct stat st;
    CU_ASSERT_EQUAL(stat(dir, &st), 0);
    CU_ASSERT_TRUE(S_ISDIR(st.st_mode));
    base_error_clear(&e);
    CU_ASSERT_EQUAL(base_out_write_file("/nonexistent-dir/x.plan", "the plan", "x", 1, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "/nonexistent-dir/x.plan: cannot write the plan (No such file or directory); "
                                "check that the directory exists");
}

static void test_devices_written_directly(void)
{
    base_error e;
    base_error_clear(&e);
    struct stat st;
    /* a machine whose /dev/null something else replaced with a file: writing it would only
     * replace that file again */
    if (stat("/dev/null", &st) != 0 || !S_ISCHR(st.st_mode)) {
        fprintf(stderr, "\n  /dev/null is not a character device here: its case is not run\n");
        CU_FAIL("/dev/null is not a character device");
        return;
    }
    CU_ASSERT_EQUAL(base_out_write_file("/dev/null", "the plan", "x", 1, &e), 0);
    CU_ASSERT_EQUAL(stat("/dev/null", &st), 0);
    CU_ASSERT_TRUE(S_ISCHR(st.st_mode));
    if (access("/dev/full", W_OK) != 0) return; /* nothing to check without the device */
    base_error_clear(&e);
    CU_ASSERT_EQUAL(base_out_write_file("/dev/full", "the plan", "x", 1, &e), -1);
    TEST_ASSERT_CONTAINS(e.msg, "/dev/full: cannot write the plan (No space left on device); free some disk space");
    CU_ASSERT_EQUAL(stat("/dev/full", &st), 0);
    CU_ASSERT_TRUE(S_ISCHR(st.st_mode));
}

/* A write that fails half-way (the file size limit) and an abort leave the old file whole. */
static void test_failure_keeps_old_file(void)
{
    fresh_dir("fail");
    base_error e;
    base_error_clear(&e);
    write_text(in_dir("big.txt"), "old contents\n");
    struct rlimit was, small = {8192, 0};
    CU_ASSERT_EQUAL(getrlimit(RLIMIT_FSIZE, &was), 0);
    small.rlim_max = was.rlim_max;
    CU_ASSERT_EQUAL(setrlimit(RLIMIT_FSIZE, &small), 0);
    base_out o;
    CU_ASSERT_EQUAL_FATAL(base_out_open(&o, in_dir("big.txt"), "the text", &e), 0);
    for (int i = 0; i < 10000; i++) fputs("0123456789\n", o.f);
    CU_ASSERT_EQUAL(base_out_commit(&o, &e), -1);
    CU_ASSERT_EQUAL(setrlimit(RLIMIT_FSIZE, &was), 0);
    TEST_ASSERT_CONTAINS(e.msg, "big.txt: cannot write the text (File too large); the file size limit");
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("big.txt")), "old contents\n");
    CU_ASSERT_PTR_NULL(o.f);
    CU_ASSERT_EQUAL(entries(), 1);
    base_error_clear(&e);
    CU_ASSERT_EQUAL_FATAL(base_out_open(&o, in_dir("big.txt"), "the text", &e), 0);
    fputs("half", o.f);
    base_out_abort(&o);
    base_out_abort(&o);
    CU_ASSERT_STRING_EQUAL(read_text(in_dir("big.txt")), "old contents\n");
    CU_ASSERT_EQUAL(entries(), 1);
}

int piper_tests_register_out(void);
int piper_tests_register_out(void)
{
    static const test_case cases[] = {
        {"new and replaced files", test_new_and_replaced_files},
        {"symlinks written through", test_symlink_written_through},
        {"a planted temporary is not followed", test_planted_temporary_not_followed},
        {"directories and missing folders refused", test_refused_targets},
        {"devices written directly, /dev/full fails", test_devices_written_directly},
        {"a failed write keeps the old file", test_failure_keeps_old_file},
        {NULL, NULL}};
    return test_add_suite("base_out", cases);
}
