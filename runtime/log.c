#include "runtime/log.h"
#include "runtime/status.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1;

static colo_log_level log_level_from_env(void)
{
    const char *s = getenv("COLO_LOG_LEVEL");
    if (!s)
        return COLO_LOG_INFO;
    if (!strcasecmp(s, "debug"))
        return COLO_LOG_DEBUG;
    if (!strcasecmp(s, "warn"))
        return COLO_LOG_WARN;
    if (!strcasecmp(s, "error"))
        return COLO_LOG_ERROR;
    return COLO_LOG_INFO;
}

void colo_log_set_level(colo_log_level level) { __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED); }

colo_log_level colo_log_get_level(void)
{
    int l = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (l < 0) {
        l = (int)log_level_from_env();
        __atomic_store_n(&log_level, l, __ATOMIC_RELAXED);
    }
    return (colo_log_level)l;
}

size_t colo_log_escape(char *out, size_t cap, const char *in)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (!cap)
        return 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        char e[5];
        size_t k = 0;
        if (*p == '\\') {
            e[k++] = '\\', e[k++] = '\\';
        } else if (*p == '\n') {
            e[k++] = '\\', e[k++] = 'n';
        } else if (*p == '\r') {
            e[k++] = '\\', e[k++] = 'r';
        } else if (*p == '\t') {
            e[k++] = '\\', e[k++] = 't';
        } else if (*p < 0x20 || *p == 0x7f) {
            e[k++] = '\\', e[k++] = 'x', e[k++] = hex[*p >> 4], e[k++] = hex[*p & 15];
        } else {
            e[k++] = (char)*p;
        }
        if (o + k >= cap) /* never half an escape */
            break;
        memcpy(out + o, e, k);
        o += k;
    }
    out[o] = 0;
    return o;
}

void colo_log(colo_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
    if (level < colo_log_get_level())
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[4096];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                     names[level]);
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    colo_log_escape(line + n, sizeof line - (size_t)n, msg);
    pthread_mutex_lock(&log_mutex);
    fputs(line, stderr);
    fputc('\n', stderr);
    pthread_mutex_unlock(&log_mutex);
}

const char *colo_status_str(colo_status st)
{
    switch (st) {
    case COLO_OK: return "OK";
    case COLO_ERR: return "ERR";
    case COLO_ENOMEM: return "ENOMEM";
    case COLO_EINVAL: return "EINVAL";
    case COLO_EAGAIN: return "EAGAIN";
    case COLO_EIO: return "EIO";
    case COLO_EFORMAT: return "EFORMAT";
    case COLO_EUNSUPPORTED: return "EUNSUPPORTED";
    case COLO_EDEVICE: return "EDEVICE";
    case COLO_EFATAL: return "EFATAL";
    case COLO_ECANCELED: return "ECANCELED";
    case COLO_ETIMEDOUT: return "ETIMEDOUT";
    case COLO_ETOOLONG: return "ETOOLONG";
    }
    return "UNKNOWN";
}

void colo_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
