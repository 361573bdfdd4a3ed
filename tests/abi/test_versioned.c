/*
 * test_versioned.c -- the rule every versioned struct is read by
 * (base/versioned.c), on a struct with three versions: an older struct
 * passed in is read up to its own last field, the rest defaults; one
 * filled in gets only its own version's fields; arrays of an older
 * version are read at their own stride; version 0 and newer versions are
 * refused.
 */
#include <criterion/criterion.h>
#include <stdalign.h>
#include <stdlib.h>

#include "util.h"

/* Version 1: a, b.  Version 2: c.  Version 3: d, e. */
typedef struct v1 {
    unsigned version;
    uint64_t a;
    char b;
} v1;
typedef struct v3 {
    unsigned version;
    uint64_t a;
    char b;
    char c; /* in version 1's padding */
    void *d;
    int e;
} v3;

#define END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))
static const size_t sizes[] = {END(v3, b), END(v3, c), sizeof(v3)};
static const v3 defaults = {3, 1, 'B', 'C', (void *)&defaults, 5};
static const pl__layout layout = {"v3",  "V3_INIT",   3,
                                  sizes, alignof(v3), &defaults};

Test(versioned, an_older_struct_is_read_to_its_last_field)
{
    cr_assert_eq(sizeof(v1), 24, "version 1 ends in padding");
    struct {
        v1 s;
        char after[sizeof(v3)];
    } in;
    memset(&in, 0xab, sizeof in); /* padding and past: not to be read */
    in.s.version = 1;
    in.s.a = 42;
    in.s.b = 'x';
    v3 out;
    cr_assert_eq(pl__struct_in(&out, &in, &layout, "f"), PL_OK);
    cr_expect_eq(out.version, 3);
    cr_expect_eq(out.a, 42);
    cr_expect_eq(out.b, 'x');
    cr_expect_eq(out.c, 'C', "in version 1's padding: the default");
    cr_expect_eq(out.d, (void *)&defaults);
    cr_expect_eq(out.e, 5);
}

Test(versioned, null_is_the_defaults_and_current_is_copied_whole)
{
    v3 out;
    cr_assert_eq(pl__struct_in(&out, NULL, &layout, "f"), PL_OK);
    cr_expect_eq(memcmp(&out, &defaults, sizeof out), 0);
    v3 in = {3, 7, 'b', 'c', NULL, -1};
    cr_assert_eq(pl__struct_in(&out, &in, &layout, "f"), PL_OK);
    cr_expect(out.a == 7 && out.c == 'c' && !out.d && out.e == -1);
}

Test(versioned, version_0_and_newer_versions_are_refused)
{
    v3 in = defaults, out;
    in.version = 0;
    cr_expect_eq(pl__struct_in(&out, &in, &layout, "my_fn"), PL_EINVAL);
    cr_expect_str_eq(pl_errmsg(),
                     "my_fn: v3 version 0: it was not made with V3_INIT");
    in.version = 4;
    cr_expect_eq(pl__struct_in(&out, &in, &layout, "my_fn"), PL_EINVAL);
    cr_expect_str_eq(pl_errmsg(), "my_fn: v3 version 4 is newer than this "
                                  "library's (it takes 1..3): built against "
                                  "a newer header");
    cr_expect_eq(pl__struct_version_ok(3, &layout, "f"), PL_OK);
    cr_expect_eq(pl__struct_version_ok(1, &layout, "f"), PL_OK);
    cr_expect_eq(pl__struct_version_ok(4, &layout, "f"), PL_EINVAL);
}

Test(versioned, a_struct_filled_in_gets_its_own_versions_fields)
{
    struct {
        v1 s;
        char after[sizeof(v3)];
    } out, before;
    memset(&out, 0xab, sizeof out);
    out.s.version = 1;
    before = out;
    v3 full = {3, 9, 'z', 'y', NULL, 77};
    pl__struct_out(&out, &full, &layout);
    cr_expect_eq(out.s.version, 1, "the caller's version stays");
    cr_expect_eq(out.s.a, 9);
    cr_expect_eq(out.s.b, 'z');
    size_t end = END(v3, b);
    cr_expect_eq(memcmp((char *)&out + end, (char *)&before + end,
                        sizeof out - end),
                 0, "nothing past version 1 is written");
}

Test(versioned, an_array_of_an_older_version_is_read_at_its_stride)
{
    v1 in[3];
    memset(in, 0xab, sizeof in);
    for (unsigned i = 0; i < 3; i++) {
        in[i].version = 1;
        in[i].a = 100 + i;
        in[i].b = (char)('a' + i);
    }
    const void *cur;
    void *owned;
    cr_assert_eq(pl__struct_array_in(&cur, &owned, in, 3, &layout, "f"), PL_OK);
    cr_assert(owned && cur == owned);
    const v3 *v = cur;
    for (unsigned i = 0; i < 3; i++) {
        cr_expect_eq(v[i].version, 3);
        cr_expect_eq(v[i].a, 100 + i);
        cr_expect_eq(v[i].b, (char)('a' + i));
        cr_expect_eq(v[i].c, 'C');
        cr_expect_eq(v[i].e, 5);
    }
    free(owned);

    in[2].version = 2; /* one array, one version */
    cr_expect_eq(pl__struct_array_in(&cur, &owned, in, 3, &layout, "f"),
                 PL_EINVAL);
    cr_expect_str_eq(pl_errmsg(), "f: v3 2 has version 2, the first has 1: "
                                  "an array's elements are of one version");
    cr_expect_null(owned);
}

Test(versioned, an_array_of_the_current_version_is_used_as_it_is)
{
    v3 in[2] = {defaults, defaults};
    const void *cur;
    void *owned;
    cr_assert_eq(pl__struct_array_in(&cur, &owned, in, 2, &layout, "f"), PL_OK);
    cr_expect_eq(cur, in);
    cr_expect_null(owned);
    cr_assert_eq(pl__struct_array_in(&cur, &owned, NULL, 0, &layout, "f"),
                 PL_OK);
    cr_expect_null(cur);
}
