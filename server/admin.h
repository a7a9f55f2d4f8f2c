/* server/admin.h: the model lifecycle routes of colo-server (docs/API.md,
 * "Admin").
 *
 *   GET  /admin/models               every model: state and memory
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

/* Adds the routes. NULL with a message (an admin key equal to the API key
 * is refused). Free after the server. */
colo_admin *colo_admin_create(colo_server *srv, colo_api *api, const colo_config *cfg, char *err, size_t errlen);
void colo_admin_free(colo_admin *ad); /* accepts NULL */

#endif
