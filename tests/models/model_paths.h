/* Where tests find the model cache that scripts/fetch-models.sh fills. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *colo_test_model_path(const char *file, char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && *xdg)
        snprintf(buf, len, "%s/colo/models/%s", xdg, file);
    else
        snprintf(buf, len, "%s/.cache/colo/models/%s", home ? home : ".", file);
    return access(buf, R_OK) == 0 ? buf : NULL;
}
