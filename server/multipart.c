/* multipart/form-data (server/multipart.h). */
#include "server/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The boundary parameter of content_type into out (without quotes); false when none. */
static bool boundary_of(const char *content_type, char *out, size_t cap)
{
    const char *type = "multipart/form-data";
    if (!content_type || strncasecmp(content_type, type, strlen(type)))
        return false;
    const char *p = content_type;
    while ((p = strchr(p, ';'))) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "boundary=", 9))
            continue;
        p += 9;
        bool quoted = *p == '"';
        p += quoted;
        size_t n = quoted ? strcspn(p, "\"") : strcspn(p, "; \t");
        if (n == 0 || n > 70 || n >= cap)
            return false;
        memcpy(out, p, n);
        out[n] = 0;
        return true;
    }
    return false;
}

/* A parameter's value (key="value" or key=value) in a header line [h, end). */
static bool param_of(const char *h, const char *end, const char *key, const char **v, size_t *vl)
{
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 1 < end; p++) {
        if ((p == h || p[-1] == ';' || p[-1] == ' ') && !strncasecmp(p, key, kl) && p[kl] == '=') {
            p += kl + 1;
            if (*p == '"') {
                const char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
                if (!q)
                    return false;
                *v = p + 1;
                *vl = (size_t)(q - p - 1);
            } else {
                const char *q = p;
                while (q < end && *q != ';' && *q != ' ' && *q != '\r')
                    q++;
                *v = p;
                *vl = (size_t)(q - p);
            }
            return true;
        }
    }
    return false;
}

/* Reads the headers of a part [h, end) into part. */
static void part_headers(const char *h, const char *end, colo_multipart_part *part)
{
    static const char cd[] = "content-disposition:";
    for (const char *line = h; line < end;) {
        const char *eol = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!eol)
            eol = end;
        if ((size_t)(eol - line) > sizeof cd - 1 && !strncasecmp(line, cd, sizeof cd - 1)) {
            const char *v;
            size_t vl;
            if (param_of(line + sizeof cd - 1, eol, "name", &v, &vl)) {
                part->name = v;
                part->name_len = vl;
            }
            if (param_of(line + sizeof cd - 1, eol, "filename", &v, &vl)) {
                part->filename = v;
                part->filename_len = vl;
            }
        }
        line = eol + 2;
    }
}

int colo_multipart_parse(const char *content_type, const char *body, size_t len, colo_multipart_part *parts, int max,
                         char *err, size_t errlen)
{
    char b[80], delim[84];
    if (!boundary_of(content_type, b, sizeof b)) {
        snprintf(err, errlen, "the body must be multipart/form-data with a boundary (Content-Type)");
        return -1;
    }
    int dl = snprintf(delim, sizeof delim, "\r\n--%s", b);
    /* the first delimiter may open the body (without its CRLF) */
    const char *p = len >= (size_t)dl - 2 && !memcmp(body, delim + 2, (size_t)dl - 2) ? body + dl - 2
                                                                                      : memmem(body, len, delim, (size_t)dl);
    if (p && p != body + dl - 2)
        p += dl;
    const char *end = body + len;
    int n = 0;
    while (p) {
        if (end - p >= 2 && !memcmp(p, "--", 2))
            return n; /* the closing delimiter */
        if (end - p < 2 || memcmp(p, "\r\n", 2))
            break;
        p += 2;
        const char *he = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!he)
            break;
        if (n == max) {
            snprintf(err, errlen, "more than %d parts in the form", max);
            return -1;
        }
        colo_multipart_part *part = &parts[n];
        memset(part, 0, sizeof *part);
        part->name = "";
        part_headers(p, he + 2, part);
        part->data = he + 4;
        const char *next = memmem(part->data, (size_t)(end - part->data), delim, (size_t)dl);
        if (!next)
            break;
        part->len = (size_t)(next - part->data);
        n++;
        p = next + dl;
    }
    snprintf(err, errlen, "the multipart/form-data body is malformed (a part or the closing boundary is missing)");
    return -1;
}

const colo_multipart_part *colo_multipart_find(const colo_multipart_part *parts, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (parts[i].name_len == strlen(name) && !memcmp(parts[i].name, name, parts[i].name_len))
            return &parts[i];
    return NULL;
}
