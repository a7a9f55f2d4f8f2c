/* The model cache folder that scripts/fetch-models.sh fills. */
#include "models/format/model_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

colo_status colo_model_cache_dir(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg)
        n = snprintf(buf, len, "%s/colo/models", xdg);
    else if (home && *home)
        n = snprintf(buf, len, "%s/.cache/colo/models", home);
    else
        return COLO_EINVAL;
    return n < 0 || (size_t)n >= len ? COLO_ENOMEM : COLO_OK;
}

bool colo_model_cache_path(const char *file, char *buf, size_t len)
{
    char dir[4096];
    if (colo_model_cache_dir(dir, sizeof dir) != COLO_OK)
        return false;
    int n = snprintf(buf, len, "%s/%s", dir, file);
    return n >= 0 && (size_t)n < len && access(buf, R_OK) == 0;
}
