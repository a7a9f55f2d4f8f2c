/* models/format/model_cache.h: where scripts/fetch-models.sh puts model weights:
 * ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models (an empty XDG_CACHE_HOME counts
 * as unset, as the XDG spec says). Reads the environment only; thread-safe
 * as long as nobody changes the environment meanwhile. */
#ifndef COLO_MODELS_MODEL_CACHE_H
#define COLO_MODELS_MODEL_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/status.h"

/* The cache folder into buf (len bytes, NUL-terminated). COLO_EINVAL when
 * neither XDG_CACHE_HOME nor HOME is set, COLO_ENOMEM when buf is too small. */
colo_status colo_model_cache_dir(char *buf, size_t len);
/* The path of file (e.g. "SmolLM2-135M-Instruct.Q4_1.gguf" or
 * "all-minilm-l6-v2/vocab.txt") in the cache into buf. True when the path
 * fits and names a readable file or folder; false otherwise (buf then holds the path
 * it looked at, when it fits). */
bool colo_model_cache_path(const char *file, char *buf, size_t len);

#endif
