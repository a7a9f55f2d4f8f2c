#include "models/tokenizer/unicode.h"

bool colo_cp_in_ranges(const colo_cp_range *r, int n, uint32_t cp)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid - 1;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

bool colo_is_letter(uint32_t cp)
{
    if (cp < 0x80)
        return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
    return cp != UINT32_MAX && colo_cp_in_ranges(colo_unicode_letter, colo_unicode_letter_n, cp);
}

bool colo_is_number(uint32_t cp)
{
    if (cp < 0x80)
        return cp >= '0' && cp <= '9';
    return cp != UINT32_MAX && colo_cp_in_ranges(colo_unicode_number, colo_unicode_number_n, cp);
}

bool colo_is_space(uint32_t cp)
{
    return cp != UINT32_MAX && colo_cp_in_ranges(colo_unicode_space, colo_unicode_space_n, cp);
}
