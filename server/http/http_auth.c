/* server/http/http_auth.c: the credentials a request carries (server/http/http.h,
 * "credentials"): one parser of Authorization and x-api-key for the
 * tenants' keys and the admin key alike. */
#include "server/http/http.h"

#include <string.h>
#include <strings.h>

const char *colo_http_bearer(const char *authorization)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7))
        return NULL;
    const char *token = authorization + 7;
    while (*token == ' ')
        token++;
    return token;
}

/* RFC 4648 base64 of src into out (NUL-terminated); -1 when it is not
 * base64, does not fit, or holds a NUL byte. */
static int b64_decode(const char *src, char *out, size_t cap)
{
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (const char *c = src; *c && *c != '='; c++) {
        int v = *c >= 'A' && *c <= 'Z' ? *c - 'A' : *c >= 'a' && *c <= 'z' ? *c - 'a' + 26
                : *c >= '0' && *c <= '9' ? *c - '0' + 52 : *c == '+' ? 62 : *c == '/' ? 63 : -1;
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o + 1 >= cap)
                return -1;
            out[o] = (char)((acc >> bits) & 0xff);
            if (!out[o++]) /* a NUL would cut the password short: u:key\0junk is not key */
                return -1;
        }
    }
    out[o] = 0;
    return (int)o;
}

/* The password of "Basic BASE64(user:password)" decoded into buf; NULL when
 * it is not such credentials. */
static const char *basic_password(const char *v, char *buf, size_t cap)
{
    const char *b64 = v + 6, *colon;
    while (*b64 == ' ')
        b64++;
    if (strlen(b64) > 4 * (cap / 3) || b64_decode(b64, buf, cap) < 0 || !(colon = strchr(buf, ':')))
        return NULL;
    return colon + 1;
}

colo_status colo_http_req_credential(const colo_http_req *r, char *buf, size_t cap, const char **key, size_t *len,
                                     const char **why)
{
    int n = colo_http_req_known_count(r, COLO_HDR_AUTHORIZATION) + colo_http_req_known_count(r, COLO_HDR_X_API_KEY);
    if (n == 0) {
        *why = "a valid API key is required (Authorization: Bearer <key>, or x-api-key: <key>)";
        return COLO_EINVAL;
    }
    if (n > 1) {
        *why = "give exactly one Authorization or x-api-key header";
        return COLO_EINVAL;
    }
    const char *k = colo_http_req_known(r, COLO_HDR_X_API_KEY), *auth = colo_http_req_known(r, COLO_HDR_AUTHORIZATION);
    if (auth) {
        k = colo_http_bearer(auth);
        if (!k && !strncasecmp(auth, "Basic ", 6))
            k = basic_password(auth, buf, cap);
        if (!k) {
            *why = "the Authorization header must be 'Bearer <key>' (or Basic credentials with the key as the "
                   "password)";
            return COLO_EINVAL;
        }
    }
    while (*k == ' ')
        k++;
    size_t l = strlen(k);
    while (l && k[l - 1] == ' ')
        l--;
    *key = k;
    *len = l;
    return COLO_OK;
}
