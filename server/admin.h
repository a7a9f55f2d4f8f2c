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
 *                                    COLO_REGISTRY_MAX_MODELS slots are taken
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
 * POST /admin/models answers 503 until the registry is attached.
 *
 * Threads: create on the controlling thread before the loop runs; the
 * handlers run on the loop thread. */
#ifndef COLO_SERVER_ADMIN_H
#define COLO_SERVER_ADMIN_H

#include "config/config.h"
#include "server/api/api.h"
#include "server/core/registry.h"
#include "server/core/server.h"

typedef struct colo_admin colo_admin;

/* Adds the routes over the models of reg (their loads and unloads are
 * reg's; api renders a model for GET /admin/models). NULL with a message
 * (an admin key equal to the API key is refused). Free after the server. */
colo_admin *colo_admin_create(colo_server *srv, colo_registry *reg, colo_api *api, const colo_config *cfg, char *err,
                              size_t errlen);
/* Applies a config file read again (loop thread, SIGHUP): models in now
 * and not in was are loaded, models in was and not in now are drained and
 * unloaded, changed ones drained, unloaded and loaded with their new
 * config (keep_alive_ms and pinned alone apply in place); one log line per
 * change. Sections that cannot change at run time (server, scheduler,
 * tenants, usage, pricing) are named in a log line and left as they are. */
void colo_admin_reload(colo_admin *ad, const colo_config *was, const colo_config *now);
/* Accepts NULL. */
void colo_admin_free(colo_admin *ad);

#endif
