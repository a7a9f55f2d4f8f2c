/* Replays inputs through a fuzz target's LLVMFuzzerTestOneInput, without
 * libFuzzer: every file named on the command line, and every regular file
 * of every folder named (in name order). Built with every compiler, so
 * the normal and the sanitizer test runs check the seed corpus and each
 * regression input. Exits non-zero when nothing was replayed (a wrong
 * path must not pass) or a file cannot be read; a crash fails by itself. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    int rc = -1;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0)
        goto out_close;
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        goto out_close;
    /* Exactly size bytes, as libFuzzer passes them, so that AddressSanitizer
     * catches a read past the end. */
    buf = malloc(size ? (size_t)size : 1);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size)
        goto out_free;
    LLVMFuzzerTestOneInput(buf, (size_t)size);
    rc = 0;
out_free:
    free(buf);
out_close:
    fclose(f);
    if (rc)
        fprintf(stderr, "replay: cannot read %s\n", path);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays the regular files of dir in name order; returns the count or -1. */
static int replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open folder %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int count = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown)
                goto out_free;
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name)))
            goto out_free;
        n++;
    }
    qsort(names, n, sizeof *names, by_name);
    count = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (replay_file(path)) {
            count = -1;
            break;
        }
        count++;
    }
out_free:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return count;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or folder: %s\n", argv[i]);
            return 1;
        }
        int n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? -1 : 1);
        if (n < 0)
            return 1;
        total += n;
    }
    printf("replay: %d input(s) ran\n", total);
    return total > 0 ? 0 : 1;
}
