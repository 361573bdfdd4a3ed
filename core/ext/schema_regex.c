/*
 * schema_regex.c -- the patterns of "pattern" and "patternProperties"
 * (schema.h): ECMA-262 syntax compiled to a program of byte sets, splits
 * and jumps, matched by running every thread of it in step over the
 * string (Thompson's construction, as in Pike's VM), so matching costs at
 * most the string's length times the program's: no backtracking, no
 * cached states to multiply.  glibc's regexec() took 18 s and 1.2 GB on
 * "a.{1000}c" anchored at "^.*" over 100 KB, and 54 s on
 * "((a|b)*a.{30})*c" over 16 KB; here the same work is counted, and
 * bounded by the validation's budget.
 *
 * Program: each instruction is relative to itself (x, y are offsets), so a
 * fragment copied elsewhere (a repetition "{m,n}" copies its atom out) or
 * moved (a split put before it) stays right.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

enum { OP_SET, OP_SPLIT, OP_JMP, OP_BOL, OP_EOL, OP_MATCH };

typedef struct rx_inst {
    uint8_t op;
    int32_t x, y;    /* OP_SPLIT: both ways; OP_JMP: x */
    uint64_t set[4]; /* OP_SET: the bytes it takes */
} rx_inst;

struct pl__rx {
    rx_inst *code;
    size_t len, cap;
};

typedef struct parser {
    const char *p;
    pl__rx *rx;
    unsigned depth;
    const char *bad;
    bool oom;
} parser;

static bool in_set(const uint64_t set[4], unsigned char c)
{
    return (set[c >> 6] >> (c & 63)) & 1;
}

static void set_add(uint64_t set[4], int lo, int hi)
{
    for (int c = lo; c <= hi; c++)
        set[c >> 6] |= (uint64_t)1 << (c & 63);
}

/* Room for @p n more instructions, within the bound. */
static bool room(parser *ps, size_t n)
{
    pl__rx *rx = ps->rx;
    if (ps->bad || ps->oom)
        return false;
    if (rx->len + n > PL__RX_MAX_PROGRAM) {
        ps->bad = "its repetitions copy out to more than 4000 instructions";
        return false;
    }
    if (rx->len + n > rx->cap) {
        size_t cap = rx->cap * 2 + n + 16;
        rx_inst *c = realloc(rx->code, cap * sizeof *c);
        if (!c) {
            ps->oom = true;
            return false;
        }
        rx->code = c;
        rx->cap = cap;
    }
    return true;
}

static bool emit(parser *ps, uint8_t op, int32_t x, int32_t y)
{
    if (!room(ps, 1))
        return false;
    rx_inst *i = &ps->rx->code[ps->rx->len++];
    memset(i, 0, sizeof *i);
    i->op = op;
    i->x = x;
    i->y = y;
    return true;
}

/* Put a split before the fragment that starts at @p at. */
static bool insert_split(parser *ps, size_t at, int32_t x, int32_t y)
{
    if (!room(ps, 1))
        return false;
    pl__rx *rx = ps->rx;
    memmove(rx->code + at + 1, rx->code + at,
            (rx->len - at) * sizeof *rx->code);
    rx->len++;
    memset(&rx->code[at], 0, sizeof rx->code[at]);
    rx->code[at].op = OP_SPLIT;
    rx->code[at].x = x;
    rx->code[at].y = y;
    return true;
}

/* ---- parsing ECMA-262 ----------------------------------------------------- */

/* \d \w \s and their complements into @p set; false for another letter. */
static bool class_escape(uint64_t set[4], char e)
{
    uint64_t c[4] = {0};
    char lower = (char)(e | 0x20);
    if (lower == 'd') {
        set_add(c, '0', '9');
    } else if (lower == 'w') {
        set_add(c, '0', '9');
        set_add(c, 'A', 'Z');
        set_add(c, 'a', 'z');
        set_add(c, '_', '_');
    } else if (lower == 's') {
        set_add(c, '\t', '\r'); /* \t \n \v \f \r */
        set_add(c, ' ', ' ');
    } else {
        return false;
    }
    for (int k = 0; k < 4; k++)
        set[k] |= e == lower ? c[k] : ~c[k];
    return true;
}

/* The character an escape (ps->p just past the backslash) stands for, -2
 * for a class escape (added to @p set), -1 when refused. */
static int escape(parser *ps, uint64_t set[4])
{
    char e = *ps->p;
    if (!e) {
        ps->bad = "a pattern ends in a backslash";
        return -1;
    }
    ps->p++;
    if (class_escape(set, e))
        return -2;
    switch (e) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    default: break;
    }
    if (e >= '0' && e <= '9')
        ps->bad = "backreferences and \\0 are not supported";
    else if (strchr("pPuxbBck", e))
        ps->bad = "\\p, \\u, \\x, \\c, \\k and \\b escapes are not supported";
    else
        return (unsigned char)e;
    return -1;
}

/* A class, ps->p just past its '['. */
static bool parse_class(parser *ps, uint64_t out[4])
{
    uint64_t s[4] = {0};
    bool neg = *ps->p == '^';
    ps->p += neg;
    while (*ps->p && *ps->p != ']') {
        int lo = (unsigned char)*ps->p++;
        if (lo == '\\' && (lo = escape(ps, s)) == -1)
            return false;
        if (lo == -2)
            continue;
        if (ps->p[0] == '-' && ps->p[1] && ps->p[1] != ']') {
            ps->p++;
            int hi = (unsigned char)*ps->p++;
            if (hi == '\\' && (hi = escape(ps, s)) == -1)
                return false;
            if (hi == -2 || hi < lo) {
                ps->bad = hi == -2 ? "a range ends in a class escape"
                                   : "a range is out of order";
                return false;
            }
            set_add(s, lo, hi);
        } else {
            set_add(s, lo, lo);
        }
    }
    if (!*ps->p) {
        ps->bad = "a class [ is not closed";
        return false;
    }
    ps->p++;
    for (int k = 0; k < 4; k++)
        out[k] = neg ? ~s[k] : s[k];
    return true;
}

/* "{m}", "{m,}" or "{m,n}" at ps->p: true with its bounds (*n = -1: no
 * upper bound) and ps->p past it; false for a brace that is itself. */
static bool braces(parser *ps, long *m, long *n)
{
    const char *p = ps->p + 1;
    char *end;
    if (*p < '0' || *p > '9')
        return false;
    unsigned long a = strtoul(p, &end, 10), b = a;
    p = end;
    bool open = false;
    if (*p == ',') {
        p++;
        open = *p < '0' || *p > '9';
        if (!open) {
            b = strtoul(p, &end, 10);
            p = end;
        }
    }
    if (*p != '}')
        return false;
    ps->p = p + 1;
    *m = a > 100000 ? 100000 : (long)a;
    *n = open ? -1 : b > 100000 ? 100000 : (long)b;
    return true;
}

static bool parse_alt(parser *ps);

/* An atom: true having emitted it; *repeat false for an anchor. */
static bool parse_atom(parser *ps, bool *repeat)
{
    char c = *ps->p++;
    uint64_t set[4] = {0};
    *repeat = true;
    switch (c) {
    case '(':
        if (*ps->p == '?') {
            ps->bad = "lookaround and (?...) groups are not supported";
            return false;
        }
        if (++ps->depth > PL__RX_MAX_NEST) {
            ps->bad = "groups nest deeper than 64";
            return false;
        }
        if (!parse_alt(ps))
            return false;
        ps->depth--;
        if (*ps->p != ')') {
            ps->bad = "a ( is not closed";
            return false;
        }
        ps->p++;
        return true;
    case '^':
    case '$':
        *repeat = false;
        return emit(ps, c == '^' ? OP_BOL : OP_EOL, 0, 0);
    case '.':
        set_add(set, 0, 255);
        set[0] &= ~(((uint64_t)1 << '\n') | ((uint64_t)1 << '\r'));
        break;
    case '[':
        if (!parse_class(ps, set))
            return false;
        break;
    case '\\': {
        int e = escape(ps, set);
        if (e == -1)
            return false;
        if (e >= 0)
            set_add(set, e, e);
        break;
    }
    case '*':
    case '+':
    case '?':
        ps->bad = "nothing to repeat (a quantifier first, or after another)";
        return false;
    default: /* a character, "]", "}", or a "{" that is no quantifier */
        set_add(set, (unsigned char)c, (unsigned char)c);
        break;
    }
    if (!emit(ps, OP_SET, 0, 0))
        return false;
    memcpy(ps->rx->code[ps->rx->len - 1].set, set, sizeof set);
    return true;
}

/* Append a copy of the @p n instructions at @p frag. */
static bool copy_out(parser *ps, const rx_inst *frag, size_t n)
{
    if (!room(ps, n))
        return false;
    memcpy(ps->rx->code + ps->rx->len, frag, n * sizeof *frag);
    ps->rx->len += n;
    return true;
}

/* The fragment from @p at to the end repeated @p m to @p n times (n -1:
 * no bound). */
static bool repeat(parser *ps, size_t at, long m, long n)
{
    pl__rx *rx = ps->rx;
    size_t len = rx->len - at;
    if (!len)
        return true; /* "()*": nothing repeated is nothing */
    rx_inst *frag = malloc(len * sizeof *frag);
    if (!frag) {
        ps->oom = true;
        return false;
    }
    memcpy(frag, rx->code + at, len * sizeof *frag);
    rx->len = at;
    bool ok = true;
    for (long k = 0; ok && k < m; k++)
        ok = copy_out(ps, frag, len);
    if (ok && n < 0) { /* L: split(body, out); body; jmp L */
        size_t l = rx->len;
        ok = emit(ps, OP_SPLIT, 1, (int32_t)len + 2) &&
             copy_out(ps, frag, len) &&
             emit(ps, OP_JMP, -(int32_t)(rx->len - l), 0);
    }
    for (long k = m; ok && n >= 0 && k < n; k++) /* split(body, out); body */
        ok = emit(ps, OP_SPLIT, 1, (int32_t)len + 1) && copy_out(ps, frag, len);
    free(frag);
    return ok;
}

/* Atoms and their quantifiers, up to "|", ")" or the end. */
static bool parse_seq(parser *ps)
{
    while (*ps->p && *ps->p != '|' && *ps->p != ')') {
        size_t at = ps->rx->len;
        bool can;
        if (!parse_atom(ps, &can))
            return false;
        long m = -2, n = -1;
        char q = *ps->p;
        if (q == '*')
            m = 0;
        else if (q == '+')
            m = 1;
        else if (q == '?')
            m = 0, n = 1;
        if (m != -2)
            ps->p++;
        else if (q != '{' || !braces(ps, &m, &n))
            continue;
        if (!can) {
            ps->bad = "nothing to repeat (a quantifier first, or after "
                      "another)";
            return false;
        }
        if (n >= 0 && n < m) {
            ps->bad = "a repetition's bounds are out of order";
            return false;
        }
        if (*ps->p == '?') {
            ps->bad = "lazy quantifiers are not supported";
            return false;
        }
        if (!repeat(ps, at, m, n))
            return false;
        long m2, n2;
        if (*ps->p == '*' || *ps->p == '+' ||
            (*ps->p == '{' && braces(ps, &m2, &n2))) {
            ps->bad = "nothing to repeat (a quantifier first, or after "
                      "another)";
            return false;
        }
    }
    return true;
}

/* Alternatives: split(a, next); a; jmp end; next: ... */
static bool parse_alt(parser *ps)
{
    size_t start = ps->rx->len;
    if (!parse_seq(ps))
        return false;
    while (*ps->p == '|') {
        ps->p++;
        pl__rx *rx = ps->rx;
        size_t a = rx->len - start; /* the alternatives so far */
        if (!insert_split(ps, start, 1, (int32_t)a + 2))
            return false;
        size_t jmp = rx->len;
        if (!emit(ps, OP_JMP, 0, 0) || !parse_seq(ps))
            return false;
        rx->code[jmp].x = (int32_t)(rx->len - jmp);
    }
    return true;
}

pl__rx *pl__rx_compile(const char *pattern, const char **bad)
{
    pl__rx *rx = calloc(1, sizeof *rx);
    parser ps = {pattern, rx, 0, NULL, !rx};
    *bad = NULL;
    if (rx && parse_alt(&ps) && *ps.p == ')')
        ps.bad = "a ) closes no group";
    if (rx && !ps.bad && !ps.oom)
        emit(&ps, OP_MATCH, 0, 0);
    if (ps.bad || ps.oom) {
        *bad = ps.oom ? NULL : ps.bad;
        pl__rx_free(rx);
        return NULL;
    }
    return rx;
}

void pl__rx_free(pl__rx *rx)
{
    if (rx)
        free(rx->code);
    free(rx);
}

/* ---- matching ------------------------------------------------------------- */

typedef struct threads {
    uint32_t *pc;
    size_t n;
} threads;

/* Add the thread at @p pc, and those its splits and jumps lead to, at
 * position @p at of @p len; true when one of them matches. */
static bool add(const pl__rx *rx, threads *t, uint32_t *mark, uint32_t gen,
                uint32_t *stack, uint32_t pc, size_t at, size_t len,
                uint64_t *steps)
{
    size_t sp = 0;
    stack[sp++] = pc;
    while (sp) {
        pc = stack[--sp];
        ++*steps;
        if (mark[pc] == gen)
            continue;
        mark[pc] = gen;
        const rx_inst *i = &rx->code[pc];
        switch (i->op) {
        case OP_MATCH: return true;
        case OP_JMP: stack[sp++] = (uint32_t)((int64_t)pc + i->x); break;
        case OP_SPLIT:
            stack[sp++] = (uint32_t)((int64_t)pc + i->y);
            stack[sp++] = (uint32_t)((int64_t)pc + i->x);
            break;
        case OP_BOL:
            if (at == 0)
                stack[sp++] = pc + 1;
            break;
        case OP_EOL:
            if (at == len)
                stack[sp++] = pc + 1;
            break;
        default: t->pc[t->n++] = pc; break;
        }
    }
    return false;
}

int pl__rx_match(const pl__rx *rx, const char *str, uint64_t *budget)
{
    size_t len = strlen(str), n = rx->len;
    /* a mark per instruction and generation; a stack holds each
     * instruction at most twice (a split pushes two) */
    uint32_t *mem = malloc((5 * n + 2) * sizeof *mem);
    if (!mem)
        return -2;
    uint32_t *mark = mem, *stack = mem + n;
    threads cur = {mem + 3 * n + 2, 0}, next = {mem + 4 * n + 2, 0};
    memset(mark, 0xff, n * sizeof *mark);
    uint64_t steps = 0;
    int r = 0;
    for (size_t at = 0;; at++) {
        /* a new start at each position: "test" matches anywhere */
        if (add(rx, &cur, mark, (uint32_t)at, stack, 0, at, len, &steps)) {
            r = 1;
            break;
        }
        if (at == len)
            break;
        steps += cur.n;
        if (steps / 16 > *budget) {
            r = -1;
            break;
        }
        unsigned char c = (unsigned char)str[at];
        next.n = 0;
        for (size_t k = 0; k < cur.n && !r; k++) {
            const rx_inst *i = &rx->code[cur.pc[k]];
            if (in_set(i->set, c) &&
                add(rx, &next, mark, (uint32_t)(at + 1), stack, cur.pc[k] + 1,
                    at + 1, len, &steps))
                r = 1;
        }
        if (r)
            break;
        threads t = cur;
        cur = next;
        next = t;
    }
    *budget -= steps / 16 < *budget ? steps / 16 : *budget;
    free(mem);
    return r;
}
