/* loadtest/baseline.c: derived colo configs and colo-server child processes. */
#include "loadtest/baseline.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "loadtest/clock.h"

/* ---- reading the config -------------------------------------------------------- */

static lt_status load_doc(const char *path, yaml_document_t *doc, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        fclose(f);
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    yaml_parser_set_input_file(&p, f);
    lt_status st = LT_OK;
    if (!yaml_parser_load(&p, doc)) {
        lt_set_err(err, errlen, "%s:%zu:%zu: %s", path, p.problem_mark.line + 1, p.problem_mark.column + 1,
                   p.problem ? p.problem : "bad YAML");
        st = LT_EFORMAT;
    } else if (!yaml_document_get_root_node(doc) ||
               yaml_document_get_root_node(doc)->type != YAML_MAPPING_NODE) {
        lt_set_err(err, errlen, "%s: not a colo config (the top level must be a mapping)", path);
        yaml_document_delete(doc);
        st = LT_EFORMAT;
    }
    yaml_parser_delete(&p);
    fclose(f);
    return st;
}

static bool scalar_is(const yaml_node_t *n, const char *s)
{
    return n && n->type == YAML_SCALAR_NODE && n->data.scalar.length == strlen(s) &&
           memcmp(n->data.scalar.value, s, n->data.scalar.length) == 0;
}

static yaml_node_t *map_get(yaml_document_t *doc, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++)
        if (scalar_is(yaml_document_get_node(doc, p->key), key))
            return yaml_document_get_node(doc, p->value);
    return NULL;
}

lt_status lt_config_models(const char *path, char names[][128], size_t max, size_t *n, char *err, size_t errlen)
{
    yaml_document_t doc;
    lt_status st = load_doc(path, &doc, err, errlen);
    if (st != LT_OK)
        return st;
    *n = 0;
    yaml_node_t *models = map_get(&doc, yaml_document_get_root_node(&doc), "models");
    if (!models || models->type != YAML_SEQUENCE_NODE) {
        lt_set_err(err, errlen, "%s: no models: list", path);
        st = LT_EFORMAT;
        goto out_delete;
    }
    for (yaml_node_item_t *it = models->data.sequence.items.start; it < models->data.sequence.items.top; it++) {
        yaml_node_t *m = yaml_document_get_node(&doc, *it);
        yaml_node_t *name = map_get(&doc, m, "name");
        if (!name || name->type != YAML_SCALAR_NODE || name->data.scalar.length == 0 ||
            name->data.scalar.length >= 128) {
            lt_set_err(err, errlen, "%s:%zu: models[%zu] has no name", path, m ? m->start_mark.line + 1 : 0, *n);
            st = LT_EFORMAT;
            goto out_delete;
        }
        if (*n == max) {
            lt_set_err(err, errlen, "%s: more than %zu models", path, max);
            st = LT_EFORMAT;
            goto out_delete;
        }
        memcpy(names[*n], name->data.scalar.value, name->data.scalar.length);
        names[*n][name->data.scalar.length] = '\0';
        (*n)++;
    }
    if (*n == 0) {
        lt_set_err(err, errlen, "%s: the models: list is empty", path);
        st = LT_EFORMAT;
    }
out_delete:
    yaml_document_delete(&doc);
    return st;
}

bool lt_config_has_adapter(const char *path, const char *name)
{
    yaml_document_t doc;
    char err[256];
    if (load_doc(path, &doc, err, sizeof err) != LT_OK)
        return false;
    bool found = false;
    yaml_node_t *models = map_get(&doc, yaml_document_get_root_node(&doc), "models");
    for (yaml_node_item_t *it = models && models->type == YAML_SEQUENCE_NODE ? models->data.sequence.items.start : NULL;
         it && it < models->data.sequence.items.top && !found; it++) {
        yaml_node_t *ads = map_get(&doc, yaml_document_get_node(&doc, *it), "adapters");
        if (!ads || ads->type != YAML_SEQUENCE_NODE)
            continue;
        for (yaml_node_item_t *a = ads->data.sequence.items.start; a < ads->data.sequence.items.top && !found; a++)
            found = scalar_is(map_get(&doc, yaml_document_get_node(&doc, *a), "name"), name);
    }
    yaml_document_delete(&doc);
    return found;
}

/* ---- writing a derived config -------------------------------------------------- */

typedef struct derive {
    yaml_document_t *in, *out;
    const char *keep_model;
    char dir[PATH_MAX];      /* the config's folder, absolute */
    bool failed;
} derive;

static int add_scalar(derive *d, const char *tag, const char *value, yaml_scalar_style_t style)
{
    int id = yaml_document_add_scalar(d->out, (yaml_char_t *)tag, (yaml_char_t *)value, (int)strlen(value), style);
    if (!id)
        d->failed = true;
    return id;
}

static int copy_node(derive *d, int in_id, int depth, const char *parent_key, bool in_model);

/* A copy of a mapping; at the top level it rewrites server.listen and
 * filters models, inside a model it makes a relative path absolute. */
static int copy_mapping(derive *d, yaml_node_t *n, int depth, const char *parent_key, bool in_model)
{
    int id = yaml_document_add_mapping(d->out, n->tag, n->data.mapping.style);
    if (!id) {
        d->failed = true;
        return 0;
    }
    bool is_server = depth == 1 && parent_key && strcmp(parent_key, "server") == 0;
    bool saw_listen = false, saw_server = false;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !d->failed; p++) {
        yaml_node_t *k = yaml_document_get_node(d->in, p->key);
        yaml_node_t *v = yaml_document_get_node(d->in, p->value);
        char key[64] = "";
        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length < sizeof key)
            memcpy(key, k->data.scalar.value, k->data.scalar.length);
        int kid = copy_node(d, p->key, depth + 1, NULL, false), vid;
        if (is_server && strcmp(key, "listen") == 0) {
            saw_listen = true;
            vid = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "127.0.0.1:0", YAML_DOUBLE_QUOTED_SCALAR_STYLE);
        } else if (in_model && depth == 2 && strcmp(key, "path") == 0 && v && v->type == YAML_SCALAR_NODE &&
                   v->data.scalar.value[0] != '/') {
            char abs[PATH_MAX * 2];
            snprintf(abs, sizeof abs, "%s/%s", d->dir, (const char *)v->data.scalar.value);
            vid = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, abs, YAML_DOUBLE_QUOTED_SCALAR_STYLE);
        } else {
            if (depth == 0 && strcmp(key, "server") == 0)
                saw_server = true;
            vid = copy_node(d, p->value, depth + 1, key, false);
        }
        if (kid && vid && !yaml_document_append_mapping_pair(d->out, id, kid, vid))
            d->failed = true;
    }
    if (is_server && !saw_listen) {
        int kid = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "listen", YAML_PLAIN_SCALAR_STYLE);
        int vid = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "127.0.0.1:0", YAML_DOUBLE_QUOTED_SCALAR_STYLE);
        if (kid && vid && !yaml_document_append_mapping_pair(d->out, id, kid, vid))
            d->failed = true;
    }
    if (depth == 0 && !saw_server) {
        int kid = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "server", YAML_PLAIN_SCALAR_STYLE);
        int sid = yaml_document_add_mapping(d->out, NULL, YAML_BLOCK_MAPPING_STYLE);
        int lk = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "listen", YAML_PLAIN_SCALAR_STYLE);
        int lv = add_scalar(d, YAML_DEFAULT_SCALAR_TAG, "127.0.0.1:0", YAML_DOUBLE_QUOTED_SCALAR_STYLE);
        if (!sid || !kid || !lk || !lv || !yaml_document_append_mapping_pair(d->out, sid, lk, lv) ||
            !yaml_document_append_mapping_pair(d->out, id, kid, sid))
            d->failed = true;
    }
    return id;
}

static int copy_node(derive *d, int in_id, int depth, const char *parent_key, bool in_model)
{
    yaml_node_t *n = yaml_document_get_node(d->in, in_id);
    if (!n || depth > 64) {
        d->failed = true;
        return 0;
    }
    switch (n->type) {
    case YAML_SCALAR_NODE: {
        int id = yaml_document_add_scalar(d->out, n->tag, n->data.scalar.value, (int)n->data.scalar.length,
                                          n->data.scalar.style);
        if (!id)
            d->failed = true;
        return id;
    }
    case YAML_SEQUENCE_NODE: {
        bool models = depth == 1 && parent_key && strcmp(parent_key, "models") == 0;
        int id = yaml_document_add_sequence(d->out, n->tag, n->data.sequence.style);
        if (!id) {
            d->failed = true;
            return 0;
        }
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top && !d->failed;
             it++) {
            if (models && d->keep_model) {
                yaml_node_t *name = map_get(d->in, yaml_document_get_node(d->in, *it), "name");
                if (!scalar_is(name, d->keep_model))
                    continue;
            }
            int item = copy_node(d, *it, depth + 1, NULL, models);
            if (item && !yaml_document_append_sequence_item(d->out, id, item))
                d->failed = true;
        }
        return id;
    }
    case YAML_MAPPING_NODE: return copy_mapping(d, n, depth, parent_key, in_model);
    default: d->failed = true; return 0;
    }
}

lt_status lt_config_derive(const char *path, const char *keep_model, const char *out_path, char *err,
                           size_t errlen)
{
    derive d = {.keep_model = keep_model};
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        lt_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return LT_EIO;
    }
    snprintf(d.dir, sizeof d.dir, "%s", dirname(real));
    yaml_document_t in, out;
    lt_status st = load_doc(path, &in, err, errlen);
    if (st != LT_OK)
        return st;
    if (!yaml_document_initialize(&out, NULL, NULL, NULL, 1, 1)) {
        yaml_document_delete(&in);
        lt_set_err(err, errlen, "out of memory");
        return LT_ENOMEM;
    }
    d.in = &in;
    d.out = &out;
    copy_node(&d, 1, 0, NULL, false); /* the root is node 1 */
    yaml_document_delete(&in);
    if (d.failed) {
        yaml_document_delete(&out);
        lt_set_err(err, errlen, "%s: cannot copy the config", path);
        return LT_EFORMAT;
    }
    FILE *f = fopen(out_path, "wb");
    if (!f) {
        yaml_document_delete(&out);
        lt_set_err(err, errlen, "%s: %s", out_path, strerror(errno));
        return LT_EIO;
    }
    yaml_emitter_t em;
    bool ok = yaml_emitter_initialize(&em);
    if (ok) {
        yaml_emitter_set_output_file(&em, f);
        yaml_emitter_set_unicode(&em, 1);
        ok = yaml_emitter_open(&em) && yaml_emitter_dump(&em, &out) && yaml_emitter_close(&em) &&
             yaml_emitter_flush(&em);
        yaml_emitter_delete(&em);
    } else {
        yaml_document_delete(&out);
    }
    /* yaml_emitter_dump deletes the document, even when it fails */
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        lt_set_err(err, errlen, "%s: cannot write the derived config", out_path);
        return LT_EIO;
    }
    return LT_OK;
}

/* ---- server processes ------------------------------------------------------------ */

/* The last lines of a log, for an error message. */
static void log_tail(const char *path, char *out, size_t outlen)
{
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char buf[1024];
    long size = 0;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    size_t n = 0;
    if (fseek(f, from, SEEK_SET) == 0)
        n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    snprintf(out, outlen, "%s", buf);
}

/* GET path from 127.0.0.1:port; the status, or 0 when nothing answered. */
static int http_get_status(int port, const char *path, double timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sin = {0};
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(0x7f000001);
    int status = 0;
    char req[256], resp[64];
    int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
                       path, port);
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) == 0 && write(fd, req, (size_t)len) == len) {
        ssize_t r = read(fd, resp, sizeof resp - 1);
        if (r > 12) {
            resp[r] = '\0';
            if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
                status = 0;
        }
    }
    close(fd);
    return status;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

lt_status lt_server_start(const char *server_bin, const char *config_path, const char *log_path, double timeout_s,
                          lt_server *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    snprintf(s->log_path, sizeof s->log_path, "%s", log_path);
    char port_file[PATH_MAX];
    snprintf(port_file, sizeof port_file, "%s.port", config_path);
    unlink(port_file);
    if (access(server_bin, X_OK) != 0) {
        lt_set_err(err, errlen, "cannot run %s: %s (set --server)", server_bin, strerror(errno));
        return LT_EIO;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        lt_set_err(err, errlen, "fork: %s", strerror(errno));
        return LT_EIO;
    }
    if (pid == 0) {
        /* the child: dies with colo-loadtest, writes into its log */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execl(server_bin, server_bin, "--config", config_path, "--port-file", port_file, (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", server_bin, strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    uint64_t deadline = lt_now_ns() + (uint64_t)(timeout_s * 1e9);
    char tail[1024];
    while (lt_now_ns() < deadline) {
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid) {
            s->pid = 0;
            log_tail(log_path, tail, sizeof tail);
            lt_set_err(err, errlen, "colo-server --config %s exited (%s %d) before serving; its log ends:\n%s",
                       config_path, WIFEXITED(wst) ? "status" : "signal",
                       WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst), tail);
            return LT_ERR;
        }
        if (!s->port) {
            FILE *f = fopen(port_file, "r");
            int port = 0;
            char nl = 0;
            if (f && fscanf(f, "%d%c", &port, &nl) == 2 && nl == '\n' && port > 0 && port < 65536) {
                s->port = port;
                snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", port);
            }
            if (f)
                fclose(f);
        }
        if (s->port && http_get_status(s->port, "/health/ready", 2.0) == 200) {
            unlink(port_file);
            return LT_OK;
        }
        sleep_ms(100);
    }
    lt_server_stop(s);
    log_tail(log_path, tail, sizeof tail);
    lt_set_err(err, errlen, "colo-server --config %s was not ready within %g s; its log ends:\n%s", config_path,
               timeout_s, tail);
    return LT_ERR;
}

void lt_server_stop(lt_server *s)
{
    if (!s || s->pid <= 0)
        return;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 1500; i++) {
        if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
            s->pid = 0;
            return;
        }
        sleep_ms(10);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

bool lt_server_beside_self(char *out, size_t outlen)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return false;
    self[n] = '\0';
    int len = snprintf(out, outlen, "%s/colo-server", dirname(self));
    return len > 0 && (size_t)len < outlen && access(out, X_OK) == 0;
}
