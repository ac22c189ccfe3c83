/*
 * A file-system fault, injected into a process by LD_PRELOAD. The tests in faults.rs build
 * this file with the system C compiler and run `flumen` under it; it is not part of flumen.
 *
 * Environment:
 *   FLUMEN_FAULT        eio-read | enospc-write | eacces-open
 *   FLUMEN_FAULT_PATH   the fault applies to files whose path contains this string
 *   FLUMEN_FAULT_AFTER  eio-read: the file offset where the bad region starts (a read at or
 *                       past it fails; one that reaches into it is shortened to end there);
 *                       enospc-write: the bytes written across those files before the disk
 *                       is full (the write that crosses it is shortened to end on it).
 *
 * eio-read also refuses to map the files (ENODEV), so a reader that maps files has to read
 * them through read(2) and meet the fault.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum kind { NONE, EIO_READ, ENOSPC_WRITE, EACCES_OPEN };

static enum kind fault_kind(void) {
    const char *k = getenv("FLUMEN_FAULT");
    if (!k) return NONE;
    if (!strcmp(k, "eio-read")) return EIO_READ;
    if (!strcmp(k, "enospc-write")) return ENOSPC_WRITE;
    if (!strcmp(k, "eacces-open")) return EACCES_OPEN;
    return NONE;
}

static int path_matches(const char *path) {
    const char *want = getenv("FLUMEN_FAULT_PATH");
    return path && want && *want && strstr(path, want) != NULL;
}

static int fd_matches(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    return path_matches(path);
}

/* Bytes written to matching files so far. */
static long long written;

static long long bound(void) {
    const char *after = getenv("FLUMEN_FAULT_AFTER");
    return after ? atoll(after) : 0;
}

/* How much of a `len`-byte transfer may go through when `done` of the bound's bytes are
 * behind it: len, a shortened count, or -1 after setting errno to `error` (the fault). */
static ssize_t allowance(long long done, size_t len, int error) {
    if (len > 0 && done >= bound()) {
        errno = error;
        return -1;
    }
    long long room = bound() - done;
    return (long long)len > room ? (ssize_t)room : (ssize_t)len;
}

/* A read of `len` bytes at offset `at` of `fd` (-1: the file's current offset). */
static ssize_t read_allowance(int fd, size_t len, off_t at) {
    if (fault_kind() != EIO_READ || !fd_matches(fd)) return (ssize_t)len;
    if (at < 0) at = lseek(fd, 0, SEEK_CUR);
    return allowance(at, len, EIO);
}

static ssize_t write_allowance(int fd, size_t len) {
    if (fault_kind() != ENOSPC_WRITE || !fd_matches(fd)) return (ssize_t)len;
    return allowance(__atomic_load_n(&written, __ATOMIC_SEQ_CST), len, ENOSPC);
}

static void count_written(int fd, ssize_t n) {
    if (n > 0 && fault_kind() == ENOSPC_WRITE && fd_matches(fd)) __atomic_fetch_add(&written, n, __ATOMIC_SEQ_CST);
}

/* The next definition of the function being defined (libc's). */
#define REAL(name)                                                                            \
    static __typeof__(&name) real = NULL;                                                     \
    if (!real) real = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

ssize_t read(int fd, void *buf, size_t len) {
    REAL(read);
    ssize_t n = read_allowance(fd, len, -1);
    if (n < 0) return -1;
    return real(fd, buf, (size_t)n);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t at) {
    REAL(pread64);
    ssize_t n = read_allowance(fd, len, at);
    if (n < 0) return -1;
    return real(fd, buf, (size_t)n, at);
}

ssize_t readv(int fd, const struct iovec *iov, int count_) {
    REAL(readv);
    /* Rare in flumen's readers: fail it outright once past the bound, else pass it on. */
    if (read_allowance(fd, 1, -1) < 0) return -1;
    return real(fd, iov, count_);
}

ssize_t write(int fd, const void *buf, size_t len) {
    REAL(write);
    ssize_t n = write_allowance(fd, len);
    if (n < 0) return -1;
    ssize_t put = real(fd, buf, (size_t)n);
    count_written(fd, put);
    return put;
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t at) {
    REAL(pwrite64);
    ssize_t n = write_allowance(fd, len);
    if (n < 0) return -1;
    ssize_t put = real(fd, buf, (size_t)n, at);
    count_written(fd, put);
    return put;
}

ssize_t writev(int fd, const struct iovec *iov, int count_) {
    REAL(writev);
    if (write_allowance(fd, 1) < 0) return -1;
    ssize_t put = real(fd, iov, count_);
    count_written(fd, put);
    return put;
}

/* The real mmap is the system call itself: looking it up with dlsym could allocate, and an
 * allocator maps memory, which would come back here before the lookup ended. */
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t at) {
    if (fd >= 0 && fault_kind() == EIO_READ && fd_matches(fd)) {
        errno = ENODEV;
        return MAP_FAILED;
    }
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, at);
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return MAP_FAILED;
    }
    return (void *)r;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t at) {
    return mmap64(addr, len, prot, flags, fd, at);
}

#define OPEN_MODE(flags, mode)                                                                \
    mode_t mode = 0;                                                                          \
    if ((flags) & (O_CREAT | O_TMPFILE)) {                                                    \
        va_list args;                                                                         \
        va_start(args, flags);                                                                \
        mode = va_arg(args, mode_t);                                                          \
        va_end(args);                                                                         \
    }

static int refused(const char *path) {
    if (fault_kind() == EACCES_OPEN && path_matches(path)) {
        errno = EACCES;
        return 1;
    }
    return 0;
}

int open64(const char *path, int flags, ...) {
    REAL(open64);
    OPEN_MODE(flags, mode)
    if (refused(path)) return -1;
    return real(path, flags, mode);
}

int open(const char *path, int flags, ...) {
    REAL(open);
    OPEN_MODE(flags, mode)
    if (refused(path)) return -1;
    return real(path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...) {
    REAL(openat64);
    OPEN_MODE(flags, mode)
    if (refused(path)) return -1;
    return real(dir, path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...) {
    REAL(openat);
    OPEN_MODE(flags, mode)
    if (refused(path)) return -1;
    return real(dir, path, flags, mode);
}
