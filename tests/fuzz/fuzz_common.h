/* tests/fuzz/fuzz_common.h: helpers shared by the fuzz targets (each target
 * is one file that includes this; everything here is static). */
#ifndef COLO_TESTS_FUZZ_COMMON_H
#define COLO_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/log.h"

/* A file holding data[0..size), for readers that take a path: an anonymous
 * in-memory file reached through /proc/self/fd, so no input touches the
 * disk. Returns its descriptor (close it when done) and fills path, or -1. */
static inline int fuzz_memfile(const uint8_t *data, size_t size, char *path, size_t pathlen)
{
    int fd = memfd_create("colo-fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, pathlen, "/proc/self/fd/%d", fd);
    return fd;
}

/* Parsers log what they refuse; a fuzz run must not print per input. */
static inline void fuzz_quiet(void) { colo_log_set_level(COLO_LOG_ERROR); }

/* Once per process: quiets the logs, then runs build (may be NULL). */
static inline void fuzz_init_once(void (*build)(void))
{
    static int done;
    if (done)
        return;
    fuzz_quiet();
    if (build)
        build();
    done = 1;
}

#endif
