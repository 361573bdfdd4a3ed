/*
 * registry.c -- policies by name.
 *
 * Registrations are kept in order (for catalogs) and indexed by an
 * open-addressing hash table (FNV-1a, linear probing, at most half full), so
 * a call's lookup is one hash and usually one probe.
 */
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"
#include "registry.h"

typedef struct owned {
    void *resource;
    void (*release)(void *);
} owned;

struct pl_registry {
    pl_policy_def **defs; /* registration order; each owns its strings */
    size_t n, cap;
    uint32_t *slots; /* index + 1 into defs; 0 = empty */
    size_t n_slots;  /* power of two */
    owned *owned;    /* loaded plugins, released last to first */
    size_t n_owned, cap_owned;
    char **reserved; /* names of servers registered (pl__registry_reserve) */
    size_t n_reserved, cap_reserved;
};

static uint32_t fnv1a(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 16777619u;
    }
    return h;
}

int pl_registry_new(pl_registry **out)
{
    if (!out)
        return pl__err(PL_EINVAL, "pl_registry_new: out is NULL");
    *out = calloc(1, sizeof **out);
    return *out ? PL_OK : pl__err(PL_ENOMEM, "out of memory");
}

static void def_free(pl_policy_def *d)
{
    if (!d)
        return;
    free((char *)d->name);
    free((char *)d->description);
    free((char *)d->input_schema);
    free((char *)d->code_version);
    free((char *)d->output_schema);
    free(d);
}

void pl_registry_free(pl_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n; i++)
        def_free(reg->defs[i]);
    free(reg->defs);
    free(reg->slots);
    for (size_t i = reg->n_owned; i-- > 0;)
        reg->owned[i].release(reg->owned[i].resource);
    free(reg->owned);
    for (size_t i = 0; i < reg->n_reserved; i++)
        free(reg->reserved[i]);
    free(reg->reserved);
    free(reg);
}

const pl_policy_def *pl__registry_find_n(const pl_registry *reg,
                                         const char *name, size_t len)
{
    if (!reg || !reg->n_slots)
        return NULL;
    size_t mask = reg->n_slots - 1;
    for (size_t i = fnv1a(name, len) & mask;; i = (i + 1) & mask) {
        uint32_t slot = reg->slots[i];
        if (!slot)
            return NULL;
        const pl_policy_def *d = reg->defs[slot - 1];
        if (strncmp(d->name, name, len) == 0 && d->name[len] == '\0')
            return d;
    }
}

int pl_registry_add_fn(pl_registry *reg, const char *name, pl_policy_fn fn,
                       void *user)
{
    pl_policy_def d = PL_POLICY_DEF_INIT;
    d.name = name;
    d.fn = fn;
    d.user = user;
    return pl_registry_add(reg, &d);
}

const pl_policy_def *pl_registry_find(const pl_registry *reg, const char *name)
{
    return name ? pl__registry_find_n(reg, name, strlen(name)) : NULL;
}

size_t pl_registry_count(const pl_registry *reg) { return reg ? reg->n : 0; }

const pl_policy_def *pl_registry_at(const pl_registry *reg, size_t i)
{
    return reg && i < reg->n ? reg->defs[i] : NULL;
}

static void index_insert(pl_registry *reg, size_t idx)
{
    const char *name = reg->defs[idx]->name;
    size_t mask = reg->n_slots - 1;
    size_t i = fnv1a(name, strlen(name)) & mask;
    while (reg->slots[i])
        i = (i + 1) & mask;
    reg->slots[i] = (uint32_t)idx + 1;
}

static int grow(pl_registry *reg)
{
    pl_policy_def **d = pl__grow(reg->defs, &reg->cap, reg->n, sizeof *d, 16);
    if (!d)
        return PL_ENOMEM;
    reg->defs = d;
    if ((reg->n + 1) * 2 > reg->n_slots) {
        size_t ns = reg->n_slots ? reg->n_slots * 2 : 32;
        uint32_t *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return PL_ENOMEM;
        free(reg->slots);
        reg->slots = slots;
        reg->n_slots = ns;
        for (size_t i = 0; i < reg->n; i++)
            index_insert(reg, i);
    }
    return PL_OK;
}

/* A schema, if given, is a JSON object that compiles. */
static int schema_check(const char *policy, const char *field, const char *text)
{
    if (!text)
        return PL_OK;
    /* a string cJSON would cut at a NUL is refused, naming it */
    cJSON *json = NULL;
    int st = pl_json_parse(&json, text, strlen(text));
    if (st == PL_EJSON) {
        char why[PL__ERRMSG_MAX];
        pl__errmsg_save(why);
        return pl__err(st, "policy '%s': %s: %s", policy, field, why);
    }
    if (st)
        return st;
    bool object = cJSON_IsObject(json);
    pl_schema *s = NULL;
    st = object ? pl_schema_compile(&s, json) : PL_EJSON;
    cJSON_Delete(json);
    pl_schema_free(s);
    if (!object)
        return pl__err(PL_EJSON, "policy '%s': %s is not a JSON object", policy,
                       field);
    if (st && st != PL_ENOMEM) {
        char why[PL__ERRMSG_MAX];
        pl__errmsg_save(why);
        return pl__err(st, "policy '%s': %s: %s", policy, field, why);
    }
    return st;
}

int pl_registry_add(pl_registry *reg, const pl_policy_def *def)
{
    if (!reg || !def)
        return pl__err(PL_EINVAL, "pl_registry_add: registry and def are "
                                  "required");
    pl_policy_def in;
    int st = pl__struct_in(&in, def, &pl__policy_def_layout, "pl_registry_add");
    if (st)
        return st;
    def = &in;
    if (!pl__name_ok(def->name))
        return pl__err(PL_EINVAL,
                       "pl_registry_add: bad policy name (1..%d "
                       "bytes, no control characters)",
                       PL_MAX_NAME);
    if (!def->fn)
        return pl__err(PL_EINVAL,
                       "pl_registry_add: policy '%s' has no "
                       "function",
                       def->name);
    if ((unsigned)def->in_doubt > PL_IN_DOUBT_SUSPEND)
        return pl__err(PL_EINVAL,
                       "pl_registry_add: policy '%s' has an "
                       "unknown in-doubt rule",
                       def->name);
    if (pl_registry_find(reg, def->name))
        return pl__err(PL_EEXIST,
                       "a policy named '%s' is registered "
                       "already",
                       def->name);
    st = schema_check(def->name, "input_schema", def->input_schema);
    if (!st)
        st = schema_check(def->name, "output_schema", def->output_schema);
    if (st)
        return st;
    if (def->code_version && strlen(def->code_version) > 1024)
        return pl__err(PL_EINVAL,
                       "policy '%s': code_version is longer than "
                       "1024 bytes",
                       def->name);
    pl_policy_def *d = calloc(1, sizeof *d);
    if (!d)
        return pl__err(PL_ENOMEM, "out of memory registering '%s'", def->name);
    *d = *def;
    d->name = pl__strdup(def->name);
    d->description = pl__strdup(def->description);
    d->input_schema = pl__strdup(def->input_schema);
    d->code_version = pl__strdup(def->code_version);
    d->output_schema = pl__strdup(def->output_schema);
    if (!d->name || (def->description && !d->description) ||
        (def->input_schema && !d->input_schema) ||
        (def->output_schema && !d->output_schema) ||
        (def->code_version && !d->code_version) || grow(reg)) {
        def_free(d);
        return pl__err(PL_ENOMEM, "out of memory registering '%s'", def->name);
    }
    reg->defs[reg->n] = d;
    index_insert(reg, reg->n);
    reg->n++;
    return PL_OK;
}

/* ---- plugins ------------------------------------------------------------------ */

static void index_rebuild(pl_registry *reg)
{
    if (!reg->n_slots)
        return;
    memset(reg->slots, 0, reg->n_slots * sizeof *reg->slots);
    for (size_t i = 0; i < reg->n; i++)
        index_insert(reg, i);
}

void pl__registry_truncate(pl_registry *reg, size_t n)
{
    assert(n <= reg->n);
    while (reg->n > n)
        def_free(reg->defs[--reg->n]);
    index_rebuild(reg);
}

int pl__registry_adopt(pl_registry *reg, pl_registry *from, const char *code,
                       const char *origin, void *resource,
                       void (*release)(void *))
{
    for (size_t i = 0; i < from->n; i++)
        if (pl_registry_find(reg, from->defs[i]->name))
            return pl__err(PL_EEXIST,
                           "%s: a policy named '%s' is registered already",
                           origin, from->defs[i]->name);
    /* room for @p resource and what @p from owns (its policies' data),
     * taken over below: nothing can fail once the policies are in */
    while (reg->cap_owned < reg->n_owned + from->n_owned + 1) {
        owned *o = pl__grow(reg->owned, &reg->cap_owned, reg->cap_owned,
                            sizeof *o, 4);
        if (!o)
            return pl__err(PL_ENOMEM, "out of memory");
        reg->owned = o;
    }
    size_t before = reg->n;
    for (size_t i = 0; i < from->n; i++) {
        pl_policy_def d = *from->defs[i];
        if (!d.code_version)
            d.code_version = code;
        int st = pl_registry_add(reg, &d);
        if (st) {
            pl__registry_truncate(reg, before);
            return st;
        }
    }
    /* owned things are released last first: the data (whose release may
     * be the plugin's code) before the resource (the plugin itself) */
    reg->owned[reg->n_owned++] = (owned){resource, release};
    if (from->n_owned) {
        memcpy(reg->owned + reg->n_owned, from->owned,
               from->n_owned * sizeof *from->owned);
        reg->n_owned += from->n_owned;
        from->n_owned = 0;
    }
    return PL_OK;
}

int pl__registry_own(pl_registry *reg, void *resource, void (*release)(void *))
{
    owned *o = pl__grow(reg->owned, &reg->cap_owned, reg->n_owned, sizeof *o,
                        4);
    if (!o)
        return pl__err(PL_ENOMEM, "out of memory");
    reg->owned = o;
    reg->owned[reg->n_owned++] = (owned){resource, release};
    return PL_OK;
}

int pl__registry_reserve(pl_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n_reserved; i++)
        if (strcmp(reg->reserved[i], name) == 0)
            return PL_EEXIST;
    char **r = pl__grow(reg->reserved, &reg->cap_reserved, reg->n_reserved,
                        sizeof *r, 4);
    if (!r)
        return pl__err(PL_ENOMEM, "out of memory");
    reg->reserved = r;
    if (!(r[reg->n_reserved] = pl__strdup(name)))
        return pl__err(PL_ENOMEM, "out of memory");
    reg->n_reserved++;
    return PL_OK;
}

void pl__registry_unreserve(pl_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n_reserved; i++)
        if (strcmp(reg->reserved[i], name) == 0) {
            free(reg->reserved[i]);
            reg->reserved[i] = reg->reserved[--reg->n_reserved];
            if (!reg->n_reserved) { /* as before the reservation */
                free(reg->reserved);
                reg->reserved = NULL;
                reg->cap_reserved = 0;
            }
            return;
        }
}

int pl_registry_add_owned(pl_registry *reg, const pl_policy_def *def,
                          void (*release)(void *user))
{
    if (!release)
        return pl__err(PL_EINVAL, "pl_registry_add_owned: release is NULL");
    size_t before = reg ? reg->n : 0;
    int st = pl_registry_add(reg, def);
    if (!st && (st = pl__registry_own(reg, def->user, release)))
        pl__registry_truncate(reg, before);
    return st;
}
