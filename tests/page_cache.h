/* For test programs that check what of a file the page cache holds.
 * Include after <cmocka.h>. */
#ifndef COLO_TESTS_PAGE_CACHE_H
#define COLO_TESTS_PAGE_CACHE_H

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Pages of path in the page cache. */
static size_t resident_pages(const char *path)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = ((size_t)sb.st_size + pg - 1) / pg, res = 0;
    unsigned char *v = malloc(n);
    assert_non_null(v);
    assert_int_equal(mincore(m, (size_t)sb.st_size, v), 0);
    for (size_t i = 0; i < n; i++)
        res += v[i] & 1;
    free(v);
    munmap(m, (size_t)sb.st_size);
    close(fd);
    return res;
}

#endif
