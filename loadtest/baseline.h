/* loadtest/baseline.h: colo-server processes for the separate-process
 * baseline (`--baseline separate`).
 *
 * The baseline a team compares co-location with is one server process per
 * model on the same device. From one colo config this module writes the
 * derived configs (one per model, each with that model alone and its own
 * memory fraction, and one with every model), all listening on a free
 * port of 127.0.0.1, starts colo-server on each, waits until it answers
 * GET /health/ready, and stops it. It reads and writes YAML only; it knows
 * nothing of the server's internals.
 *
 * Ownership: lt_server holds a child process; lt_server_stop ends and
 * reaps it (and accepts a server that never started). */
#ifndef COLO_LOADTEST_BASELINE_H
#define COLO_LOADTEST_BASELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "loadtest/status.h"
#include "loadtest/workload.h"

#define LT_BASELINE_MAX_MODELS 32

/* The names of the models of a colo config, in order. LT_EFORMAT (with
 * file:line) when the file is not a colo config, LT_EIO when unreadable. */
lt_status lt_config_models(const char *path, char names[][128], size_t max, size_t *n, char *err, size_t errlen);
/* Whether the config at path lists a LoRA adapter named name under one of
 * its models (models[].adapters[].name): a name the server answers to like
 * a model's. */
bool lt_config_has_adapter(const char *path, const char *name);

/* Writes to out_path a copy of the colo config at path with server.listen
 * set to "127.0.0.1:0", relative model paths made absolute (they are taken
 * from the config's folder), and only the model named keep_model (NULL:
 * every model). Everything else (fractions, device, policy, SLAs) is kept
 * as written. */
lt_status lt_config_derive(const char *path, const char *keep_model, const char *out_path, char *err,
                           size_t errlen);

typedef struct lt_server {
    pid_t pid;                /* 0 when not running */
    int port;
    char url[64];             /* http://127.0.0.1:PORT */
    char log_path[512];       /* its stdout and stderr */
} lt_server;

/* Starts `server_bin --config config_path --port-file ...` with its output
 * in log_path, and waits (up to timeout_s) until its port is known and
 * GET /health/ready answers 200. On failure the process is stopped and err
 * holds the reason and the last lines of its log. */
lt_status lt_server_start(const char *server_bin, const char *config_path, const char *log_path, double timeout_s,
                          lt_server *s, char *err, size_t errlen);

/* SIGTERM, then SIGKILL after 15 s; reaps the process. */
void lt_server_stop(lt_server *s);

/* colo-server beside the running program (its /proc/self/exe folder), into
 * out. False when there is none. */
bool lt_server_beside_self(char *out, size_t outlen);

#endif
