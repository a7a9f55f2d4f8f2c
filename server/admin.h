/* server/admin.h: the model lifecycle routes of colo-server (docs/API.md,
 * "Admin").
 *
 *   GET  /admin/models               every model: state and memory
 *   POST /admin/models               202: loads the model whose config is
 *                                    the body (JSON, the keys of one entry
 *                                    of models:), off the loop: state
 *                                    loading, then ready or failed; 400
 *                                    naming the key, 409 for a name in use
 *                                    (also while it drains), 507 with the
 *                                    bytes when its guarantee cannot fit,
 *                                    503 when the model table's
 *                                    COLO_API_MAX_MODELS slots are taken
 *   POST /admin/models/{name}/sleep  202: the model drops its KV cache and
 *                                    weights once what it runs has finished
 *   POST /admin/models/{name}/wake   202: it loads its weights again
 *   DELETE /admin/models/{name}      202: it refuses new requests (503 with
 *                                    Retry-After), finishes what it has, is
 *                                    unloaded (memory freed) and leaves the API
 *
 * Guarded by an admin key distinct from the API key, read at start from
 * the variable server.admin_key_env names (default COLO_ADMIN_KEY):
 * "Authorization: Bearer <admin key>", else 401. Without an admin key the
 * routes answer only when colo-server listens on a loopback address (403
 * otherwise). The API key never opens them.
 *
 * Threads: register on the controlling thread before the loop runs; the
 * handlers run on the loop thread. */
#ifndef COLO_SERVER_ADMIN_H
#define COLO_SERVER_ADMIN_H

#include "config/config.h"
#include "server/api.h"
#include "server/server.h"

typedef struct colo_admin colo_admin;
struct colo_evictor;

/* What models loaded at run time are made with (as colo-server makes the
 * configured ones). */
typedef struct colo_admin_env {
    colo_device *dev;
    colo_cosched *cs;
    colo_mem_pool *pool;           /* NULL: fixed arenas */
    struct colo_evictor *evictor;  /* NULL: no eviction */
    colo_sched_policy policy;
    char config_dir[1024];         /* anchors relative paths in POST /admin/models; "" = working directory */
} colo_admin_env;

/* Adds the routes. NULL with a message (an admin key equal to the API key
 * is refused). Free after the server. */
colo_admin *colo_admin_create(colo_server *srv, colo_api *api, const colo_config *cfg, char *err, size_t errlen);
/* Before the loop runs: POST /admin/models answers 503 until then. */
void colo_admin_attach(colo_admin *ad, const colo_admin_env *env);
/* Applies a config file read again (loop thread, SIGHUP): models in now
 * and not in was are loaded, models in was and not in now are drained and
 * unloaded, changed ones drained, unloaded and loaded with their new
 * config (keep_alive_ms and pinned alone apply in place); one log line per
 * change. Sections that cannot change at run time (server, scheduler,
 * tenants, usage, pricing) are named in a log line and left as they are. */
void colo_admin_reload(colo_admin *ad, const colo_config *was, const colo_config *now);
/* Whether every model the config file names (as last applied, less those
 * deleted through DELETE /admin/models since) is listed and serving:
 * ready, sleeping or waking (loop thread; /health/ready). */
bool colo_admin_file_served(colo_admin *ad);
/* Joins loads under way, waiting for them at most the config's
 * server.shutdown_timeout_ms in all, and stops the models loaded at run
 * time (before the server is freed: their last answers go to the loop).
 * False when a load still runs after that: what it uses (the admin, the
 * server, the device) must then not be freed. */
bool colo_admin_stop(colo_admin *ad);
/* Accepts NULL. Frees nothing when colo_admin_stop is false. */
void colo_admin_free(colo_admin *ad);

#endif
