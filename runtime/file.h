/* runtime/file.h: opening the files a model is read from (weights, a
 * folder's JSON and vocabulary) without ever blocking on one that is not
 * a regular file. A FIFO with no writer, a character device or a socket
 * named as a model's path would otherwise hold open() (or the first read)
 * forever, and with it the thread loading the model and every shutdown
 * that waits for that thread. */
#ifndef COLO_RUNTIME_FILE_H
#define COLO_RUNTIME_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Opens path read-only (close-on-exec) if it is a regular file: opened
 * with O_NONBLOCK, checked with fstat, then set blocking again. Returns
 * the descriptor (the caller closes it) and its size in *size_bytes
 * (may be NULL), or -1 with "PATH: cannot open: REASON" or "PATH: not a
 * regular file (a FIFO)" in err. */
int colo_file_open_regular(const char *path, size_t *size_bytes, char *err, size_t errlen);

/* The same as a stdio stream ("rb"); NULL with the message. The caller
 * fcloses it. */
FILE *colo_file_fopen_regular(const char *path, char *err, size_t errlen);

/* Makes bytes [p, p + bytes) of a read-only file mapping resident
 * (page-aligned; MADV_POPULATE_READ) under MADV_RANDOM, so that the
 * page cache reads what it lacks one fault at a time, each of a whole
 * folio (2 MiB under MADV_HUGEPAGE), not in the small folios of the
 * kernel's readahead; ranges of 16 MiB are populated by up to 4 threads
 * at once when the first range took over a millisecond (the file is not
 * cached), so that several reads are in flight. 0, or the errno of the first populate that failed (EINVAL or
 * ENOSYS: a kernel without MADV_POPULATE_READ, the pages then come on
 * first touch). */
int colo_file_populate(const void *p, size_t bytes);

/* Of the file mapping that holds p: its resident bytes and those mapped in
 * huge pages (/proc/self/smaps: Rss, FilePmdMapped). False when unknown. */
bool colo_file_huge_mapped(const void *p, size_t *resident_bytes, size_t *huge_bytes);

/* Makes [p, p + bytes) of path's read-only mapping resident in 2 MiB folios
 * where the page cache held it in small ones (read before by another
 * program, `cat` say): those pages are dropped from the process and from
 * the page cache (POSIX_FADV_DONTNEED: pages another process maps stay)
 * and read again (colo_file_populate). Costs one read of the file from the
 * disk, once, at load; every later wake then maps a few hundred entries
 * per GB and decode reads through 2 MiB pages. Does nothing when at least
 * nine tenths are in huge pages already, for a mapping under 8 MiB, or when the
 * kernel does not say. 0 or an errno as colo_file_populate. */
int colo_file_refold(const char *path, const void *p, size_t bytes);

#endif
