/* Fuzz target: the safetensors reader (models/format/safetensors.h) on arbitrary
 * bytes; every tensor it accepts is found by name and its bytes read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/format/safetensors.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(NULL);
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    colo_safetensors *f = NULL;
    if (colo_safetensors_open(path, &f, err, sizeof err) == COLO_OK) {
        int n = colo_safetensors_n_tensors(f);
        uint64_t prev_end = 0;
        for (int i = 0; i < n; i++) {
            const colo_safetensors_tensor *t = colo_safetensors_tensor_at(f, i);
            if (colo_safetensors_find(f, t->name) != t)
                abort(); /* names are unique */
            if (t->offset < prev_end || t->n_dims < 0 || t->n_dims > COLO_SAFETENSORS_MAX_DIMS ||
                t->bytes != (size_t)t->n_elements * t->elem_bytes)
                abort(); /* the header's promises */
            prev_end = t->offset + t->bytes;
            if (t->bytes) {
                const volatile uint8_t *p = t->data;
                uint8_t c = p[0];
                c ^= p[t->bytes - 1];
                (void)c;
            }
        }
        if (prev_end > colo_safetensors_file_size(f))
            abort();
        (void)colo_safetensors_path(f);
        (void)colo_safetensors_find(f, "");
        colo_safetensors_close(f);
    } else if (f) {
        abort(); /* *out is NULL on failure */
    }
    close(fd);
    return 0;
}
