/* Opening model files without blocking on what is not a regular file
 * (runtime/file.h). */
#include "runtime/file.h"
#include "runtime/status.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a plain file";
}

int colo_file_open_regular(const char *path, size_t *size_bytes, char *err, size_t errlen)
{
    /* O_NONBLOCK: open() of a FIFO without a writer returns at once;
     * O_NOCTTY: a terminal never becomes ours. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        colo_set_err(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        colo_set_err(err, errlen, "%s: not a regular file (%s)", path, kind_of(sb.st_mode));
        goto out_close;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        colo_set_err(err, errlen, "%s: cannot set blocking: %s", path, strerror(errno));
        goto out_close;
    }
    if (size_bytes)
        *size_bytes = (size_t)sb.st_size;
    return fd;

out_close:
    close(fd);
    return -1;
}

FILE *colo_file_fopen_regular(const char *path, char *err, size_t errlen)
{
    int fd = colo_file_open_regular(path, NULL, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        colo_set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}
