/* out.c — the one way piper writes an output file (base.h, "output files"): a temporary beside
 * the target, renamed over it only once everything is on disk, so that an interrupted or failed
 * write leaves the old file as it was, and a device, directory or planted link is never replaced. */
#define _GNU_SOURCE /* fopencookie: a stream whose writes keep their errno */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Symbolic links followed before giving up, as the kernel's own limit (ELOOP) does. */
#define OUT_MAX_LINKS 40

/* The descriptor under a base_out's stream, and the errno of its first failed write: stdio keeps
 * only an error flag, and a message must say whether the disk was full or failing. */
struct base_out_sink {
    int fd;
    int err;
};

static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
    struct base_out_sink *s = cookie;
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(s->fd, buf + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (!s->err) s->err = w < 0 ? errno : ENOSPC;
            return off ? (ssize_t)off : -1;
        }
        off += (size_t)w;
    }
    return (ssize_t)off;
}

static int sink_close(void *cookie)
{
    struct base_out_sink *s = cookie;
    int rc = close(s->fd);
    if (rc != 0 && !s->err) s->err = errno;
    return rc;
}

/* A stream on fd that records its errors in o->sink; closes fd on failure. */
static FILE *sink_open(base_out *o, int fd)
{
    o->sink = base_xcalloc(1, sizeof *o->sink);
    o->sink->fd = fd;
    cookie_io_functions_t io = {.write = sink_write, .close = sink_close};
    FILE *f = fopencookie(o->sink, "w", io);
    if (!f) close(fd);
    return f;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = base_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* The directory part of a path ("." for a bare name), malloc'd. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return dup_n(".", 1);
    if (slash == path) return dup_n("/", 1);
    return dup_n(path, (size_t)(slash - path));
}

/* What to do about a failed system call, by its errno: the part of a message after the ';'. */
static const char *advice(int err)
{
    switch (err) {
    case ENOSPC:
#ifdef EDQUOT
    case EDQUOT:
#endif
        return "free some disk space or choose another path";
    case EFBIG: return "the file size limit (ulimit -f) is too small for it; raise the limit or choose another path";
    case EIO: return "the device reported an I/O error; check the disk and write elsewhere";
    case EACCES:
    case EPERM:
    case EROFS: return "choose a path you may write";
    case ENOENT:
    case ENOTDIR: return "check that the directory exists";
    default: return "check the path";
    }
}

static int fail(base_error *e, const char *path, const char *what, const char *doing, int err)
{
    return base_errorf(e, "%s: cannot %s %s (%s); %s", path, doing, what, err ? strerror(err) : "write error",
                       advice(err));
}

/* The file that writing `path` means, following a chain of symbolic links whose end may not exist
 * yet; relative links are read against the directory of the link. */
static char *resolve(const char *path, const char *what, base_error *e)
{
    char *p = dup_n(path, strlen(path));
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(p, &st) != 0) {
            if (errno == ENOENT) return p; /* a new file (perhaps the end of a dangling link) */
            fail(e, p, what, "write", errno);
            free(p);
            return NULL;
        }
        if (!S_ISLNK(st.st_mode)) return p;
        if (hops == OUT_MAX_LINKS) {
            fail(e, path, what, "write", ELOOP);
            free(p);
            return NULL;
        }
        char target[4096];
        ssize_t n = readlink(p, target, sizeof target - 1);
        if (n < 0) {
            fail(e, p, what, "write", errno);
            free(p);
            return NULL;
        }
        target[n] = 0;
        char *next;
        if (target[0] == '/') {
            next = dup_n(target, (size_t)n);
        } else {
            char *d = dir_of(p);
            next = base_xmalloc(strlen(d) + (size_t)n + 2);
            sprintf(next, "%s/%s", d, target);
            free(d);
        }
        free(p);
        p = next;
    }
}

static int current_umask(void)
{
    mode_t m = umask(022);
    umask(m);
    return (int)m;
}

int base_out_open(base_out *o, const char *path, const char *what, base_error *e)
{
    memset(o, 0, sizeof *o);
    snprintf(o->what, sizeof o->what, "%s", what);
    /* Past a size limit (ulimit -f) a write then fails with EFBIG, which is reported and cleaned
     * up, instead of SIGXFSZ killing the process with a temporary left behind. */
    signal(SIGXFSZ, SIG_IGN);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode))
            return base_errorf(e, "%s: is a directory; give a file name for %s", path, what);
        if (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))
            return base_errorf(e, "%s: is neither a regular file nor a character device or pipe; give a file "
                                  "name for %s", path, what);
        /* /dev/null, /dev/stdout, a pipe: written where it is, never replaced */
        int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 || !(o->f = sink_open(o, fd))) {
            fail(e, path, what, "write", errno);
            base_out_abort(o);
            return -1;
        }
        o->path = dup_n(path, strlen(path));
        return 0;
    }
    if (!(o->path = resolve(path, what, e))) return -1;
    if (stat(o->path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) { /* the link's end changed since the first look */
            base_errorf(e, "%s: is not a regular file; give a file name for %s", o->path, what);
            base_out_abort(o);
            return -1;
        }
        o->mode = (int)(st.st_mode & 07777);
    } else {
        o->mode = 0666 & ~current_umask();
    }
    char *dir = dir_of(o->path);
    const char *base = strrchr(o->path, '/');
    base = base ? base + 1 : o->path;
    o->tmp = base_xmalloc(strlen(dir) + strlen(base) + 16);
    sprintf(o->tmp, "%s/.%s.XXXXXX", dir, base);
    free(dir);
    /* mkstemp creates a name of its own with O_EXCL: a planted file or link is never opened */
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int err = errno;
        free(o->tmp);
        o->tmp = NULL;
        fail(e, o->path, what, "write", err);
        base_out_abort(o);
        return -1;
    }
    if (fchmod(fd, (mode_t)o->mode) != 0) {
        int err = errno;
        close(fd);
        fail(e, o->path, what, "write", err);
        base_out_abort(o);
        return -1;
    }
    if (!(o->f = sink_open(o, fd))) {
        fail(e, o->path, what, "write", errno);
        base_out_abort(o);
        return -1;
    }
    return 0;
}

void base_out_abort(base_out *o)
{
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    free(o->sink);
    o->tmp = o->path = NULL;
    o->sink = NULL;
}

int base_fsync_dir(const char *dir, base_error *e)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return base_errorf(e, "%s: cannot open the directory to sync it (%s); %s", dir, strerror(errno),
                                   advice(errno));
    int rc = 0;
    /* some file systems cannot sync a directory (EINVAL): their renames are as durable as they get */
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        rc = base_errorf(e, "%s: cannot sync the directory (%s); %s", dir, strerror(errno), advice(errno));
    close(fd);
    return rc;
}

int base_out_commit(base_out *o, base_error *e)
{
    if (!o->f) return base_errorf(e, "%s: %s was not open for writing; this is a bug in piper",
                                  o->path ? o->path : "(no path)", o->what);
    int err = 0;
    if (ferror(o->f) || fflush(o->f) != 0) err = o->sink->err ? o->sink->err : EIO;
    /* the data reaches the disk before the name does, so a crash never leaves a short file */
    if (!err && o->tmp && fsync(o->sink->fd) != 0) err = errno;
    int closed = fclose(o->f);
    o->f = NULL;
    if (!err && closed != 0) err = o->sink->err ? o->sink->err : EIO;
    if (err) {
        fail(e, o->path, o->what, "write", err);
        base_out_abort(o);
        return -1;
    }
    int rc = 0;
    if (o->tmp) {
        if (rename(o->tmp, o->path) != 0) {
            fail(e, o->path, o->what, "move the finished file into place as", errno);
            base_out_abort(o);
            return -1;
        }
        free(o->tmp);
        o->tmp = NULL;
        char *dir = dir_of(o->path);
        rc = base_fsync_dir(dir, e);
        free(dir);
    }
    base_out_abort(o); /* frees the path; nothing is left to remove */
    return rc;
}

int base_out_fail(base_out *o, base_error *e)
{
    if (o->f) fflush(o->f); /* a failure still in the buffer shows now */
    if (o->sink && o->sink->err) fail(e, o->path, o->what, "write", o->sink->err);
    base_out_abort(o);
    return -1;
}

int base_out_write_file(const char *path, const char *what, const void *data, size_t n, base_error *e)
{
    base_out o;
    if (base_out_open(&o, path, what, e)) return -1;
    fwrite(data, 1, n, o.f); /* a failed write is reported by the commit, with its errno */
    return base_out_commit(&o, e);
}
