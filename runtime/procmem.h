/* runtime/procmem.h: this process's memory as the kernel counts it
 * (/proc/self/status), what a container's memory limit holds it to. */
#ifndef COLO_RUNTIME_PROCMEM_H
#define COLO_RUNTIME_PROCMEM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct colo_proc_memory {
    size_t rss_bytes;      /* VmRSS: resident now */
    size_t peak_rss_bytes; /* VmHWM: the most ever resident */
    size_t anon_bytes;     /* RssAnon: of rss, anonymous (heap, arenas, stacks) */
    size_t file_bytes;     /* RssFile: of rss, file pages mapped (weights read in place, code) */
} colo_proc_memory;

/* Reads the figures of the calling process; false (and *out zeroed) where
 * /proc/self/status cannot be read or lacks VmRSS. Any thread. */
bool colo_proc_memory_get(colo_proc_memory *out);

#endif
