/*
 * schema_regex.c -- the patterns of "pattern" and "patternProperties"
 * (schema.h): ECMA-262 syntax compiled to a program of character sets,
 * splits and jumps, matched by running every thread of it in step over the
 * string's characters (Thompson's construction, as in Pike's VM): each
 * step decodes one character of UTF-8 (pl__utf8_next), which every live
 * thread takes or dies on, so all stay at one position and matching costs at
 * most the string's length times the program's: no backtracking, no
 * cached states to multiply.  glibc's regexec() took 18 s and 1.2 GB on
 * "a.{1000}c" anchored at "^.*" over 100 KB, and 54 s on
 * "((a|b)*a.{30})*c" over 16 KB; here the same work is counted, and
 * bounded by the validation's budget.
 *
 * Program: each instruction is relative to itself (x, y are offsets), so a
 * fragment copied elsewhere (a repetition "{m,n}" copies its atom out) or
 * moved (a split put before it) stays right.  A set is one instruction
 * whatever it holds: a bitmap of ASCII, and past ASCII sorted ranges of
 * code points (searched by halves) kept once in the program for all the
 * copies of it, so "[^à-ÿ]{1000}" is 1000 instructions as "a{1000}" is,
 * and a multi-byte character is one atom ("é+", "(é){2}").
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"

enum { OP_SET, OP_SPLIT, OP_JMP, OP_BOL, OP_EOL, OP_MATCH };

/* Code points lo..hi (in a program, past ASCII). */
typedef struct rx_range {
    uint32_t lo, hi;
} rx_range;

typedef struct rx_inst {
    uint8_t op;
    union {
        struct {
            int32_t x, y; /* OP_SPLIT: both ways; OP_JMP: x */
        };
        struct {
            uint32_t r0, rn; /* OP_SET: the code points past ASCII it
                                takes, rx->ranges[r0 .. r0 + rn), sorted
                                and apart */
        };
    };
    uint64_t set[2]; /* OP_SET: the ASCII characters it takes */
} rx_inst;           /* 32 bytes: a step of the match reads one line */

struct pl__rx {
    rx_inst *code;
    size_t len, cap;
    rx_range *ranges; /* the classes' ranges, shared by a class's copies */
    size_t n_ranges, cap_ranges;
};

typedef struct parser {
    const char *p;
    pl__rx *rx;
    unsigned depth;
    const char *bad;
    bool oom;
} parser;

/* A class being parsed: its ASCII characters, and its ranges past ASCII in
 * any order until class_close(). */
typedef struct cls {
    uint64_t ascii[2];
    rx_range *r;
    size_t n, cap;
} cls;

/* Room for @p n more instructions, within the bound. */
static bool room(parser *ps, size_t n)
{
    pl__rx *rx = ps->rx;
    if (ps->bad || ps->oom)
        return false;
    if (rx->len + n > PL__RX_MAX_PROGRAM) {
        ps->bad = "it compiles to more than 4000 instructions (a character "
                  "or class is one; a repetition copies out what it "
                  "repeats: \"a{3}\" is three)";
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

/* Does @p i take the character @p c, past ASCII (PL__RX_BAD: none does)?
 * (ASCII is i->set's.) */
static bool takes(const pl__rx *rx, const rx_inst *i, uint32_t c)
{
    if (!i->rn)
        return false; /* rx->ranges may be NULL */
    const rx_range *r = rx->ranges + i->r0;
    size_t lo = 0, hi = i->rn;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < r[mid].lo)
            hi = mid;
        else if (c > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* @p v (of *cap items of @p size, @p n used) with room for one more:
 * itself, or moved (*cap grown); NULL out of memory. */
static void *grow(parser *ps, void *v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return v;
    size_t c = *cap * 2 + 8;
    void *m = realloc(v, c * size);
    if (!m) {
        ps->oom = true;
        return NULL;
    }
    *cap = c;
    return m;
}

/* Code points @p lo to @p hi into @p c. */
static bool cls_add(parser *ps, cls *c, uint32_t lo, uint32_t hi)
{
    for (; lo <= hi && lo < 0x80; lo++)
        c->ascii[lo >> 6] |= (uint64_t)1 << (lo & 63);
    if (lo > hi)
        return true;
    rx_range *r = grow(ps, c->r, &c->cap, c->n, sizeof *r);
    if (!r)
        return false;
    c->r = r;
    r[c->n++] = (rx_range){lo, hi};
    return true;
}

/* The ranges @p t (sorted, apart), or with @p neg all the code points they
 * leave out, into @p c. */
static bool cls_table(parser *ps, cls *c, const rx_range *t, size_t n, bool neg)
{
    uint32_t next = 0;
    for (size_t k = 0; k < n; k++) {
        if (!neg && !cls_add(ps, c, t[k].lo, t[k].hi))
            return false;
        if (neg && t[k].lo > next && !cls_add(ps, c, next, t[k].lo - 1))
            return false;
        next = t[k].hi + 1;
    }
    return !neg || next > 0x10FFFF || cls_add(ps, c, next, 0x10FFFF);
}

static int range_cmp(const void *a, const void *b)
{
    const rx_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* @p c (its complement with @p neg) as the set of a new OP_SET. */
static bool class_close(parser *ps, cls *c, bool neg)
{
    pl__rx *rx = ps->rx;
    size_t n = 0;
    if (c->n)
        qsort(c->r, c->n, sizeof *c->r, range_cmp);
    for (size_t k = 0; k < c->n; k++) /* merged: sorted and apart */
        if (n && c->r[k].lo <= c->r[n - 1].hi + 1) {
            if (c->r[k].hi > c->r[n - 1].hi)
                c->r[n - 1].hi = c->r[k].hi;
        } else {
            c->r[n++] = c->r[k];
        }
    size_t r0 = rx->n_ranges;
    uint32_t next = 0x80; /* with neg: the first not left out yet */
    for (size_t k = 0; k < n + neg; k++) {
        uint32_t lo = neg ? next : c->r[k].lo;
        uint32_t hi = !neg ? c->r[k].hi : k < n ? c->r[k].lo - 1 : 0x10FFFF;
        if (neg && k < n)
            next = c->r[k].hi + 1;
        if (lo > hi) /* a range that begins at next: no gap before it */
            continue;
        rx_range *r = grow(ps, rx->ranges, &rx->cap_ranges, rx->n_ranges,
                           sizeof *r);
        if (!r)
            return false;
        rx->ranges = r;
        r[rx->n_ranges++] = (rx_range){lo, hi};
    }
    if (rx->n_ranges > UINT32_MAX) {
        ps->bad = "its classes are too large";
        return false;
    }
    if (!emit(ps, OP_SET, 0, 0))
        return false;
    rx_inst *i = &rx->code[rx->len - 1];
    i->set[0] = neg ? ~c->ascii[0] : c->ascii[0];
    i->set[1] = neg ? ~c->ascii[1] : c->ascii[1];
    i->r0 = (uint32_t)r0;
    i->rn = (uint32_t)(rx->n_ranges - r0);
    return true;
}

/* ---- parsing ECMA-262 ----------------------------------------------------- */

/* ECMA-262's \d, \w and \s (WhiteSpace and LineTerminator: \t \n \v \f
 * \r, space, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
 * U+205F, U+3000, U+FEFF), and the line terminators "." leaves out. */
static const rx_range digits[] = {{'0', '9'}};
static const rx_range words[] = {
    {'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
static const rx_range spaces[] = {
    {'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
    {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
static const rx_range line_ends[] = {
    {'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

/* \d \w \s and their complements into @p c: 1, 0 for another letter, -1
 * out of memory. */
static int class_escape(parser *ps, cls *c, char e)
{
    char lower = (char)(e | 0x20);
    bool neg = e != lower;
    bool ok = lower == 'd'   ? cls_table(ps, c, digits, 1, neg)
              : lower == 'w' ? cls_table(ps, c, words, 4, neg)
              : lower == 's'
                  ? cls_table(ps, c, spaces, PL__EXT_ARRAY_LEN(spaces), neg)
                  : true;
    if (!ok)
        return -1;
    return lower == 'd' || lower == 'w' || lower == 's';
}

/* The character of the pattern at ps->p, ps->p past it; -1 (refused) for
 * a byte that is no UTF-8. */
static int32_t pattern_char(parser *ps)
{
    uint32_t c;
    size_t n = pl__utf8_next(ps->p, &c);
    if (c == PL__RX_BAD) {
        ps->bad = "the pattern is not UTF-8";
        return -1;
    }
    ps->p += n;
    return (int32_t)c;
}

/* @p n hex digits at ps->p, ps->p past them; -1 when they are not. */
static int32_t hex(parser *ps, int n)
{
    int32_t v = 0;
    for (int k = 0; k < n; k++) {
        char h = ps->p[k];
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                       : -1;
        if (d < 0) {
            ps->bad = "\\x takes two hex digits and \\u four (no \\u{...}: "
                      "a pattern has no u flag)";
            return -1;
        }
        v = v * 16 + d;
    }
    ps->p += n;
    return v;
}

/* The character an escape (ps->p just past the backslash) stands for, -2
 * for a class escape (added to @p c), -1 when refused.  \uD83D\uDE00, a
 * surrogate pair, is the one code point U+1F600 it encodes. */
static int32_t escape(parser *ps, cls *c)
{
    char e = *ps->p;
    if (!e) {
        ps->bad = "a pattern ends in a backslash";
        return -1;
    }
    int k = class_escape(ps, c, e);
    if (k) {
        ps->p++;
        return k > 0 ? -2 : -1;
    }
    switch (e) {
    case 'n': ps->p++; return '\n';
    case 't': ps->p++; return '\t';
    case 'r': ps->p++; return '\r';
    case 'f': ps->p++; return '\f';
    case 'v': ps->p++; return '\v';
    case 'x': ps->p++; return hex(ps, 2);
    case 'u': {
        ps->p++;
        int32_t u = hex(ps, 4);
        if (u >= 0xD800 && u <= 0xDBFF && ps->p[0] == '\\' && ps->p[1] == 'u') {
            const char *back = ps->p;
            ps->p += 2;
            int32_t low = hex(ps, 4);
            if (low >= 0xDC00 && low <= 0xDFFF)
                return 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
            ps->p = back; /* a lone surrogate, then the next escape */
            ps->bad = NULL;
        }
        return u;
    }
    default: break;
    }
    if (e >= '0' && e <= '9')
        ps->bad = "backreferences and \\0 are not supported";
    else if (strchr("pPbBck", e))
        ps->bad = "\\p, \\c, \\k and \\b escapes are not supported";
    else
        return pattern_char(ps);
    return -1;
}

/* A character of a class, ps->p on it: its code point, -2 for a class
 * escape (added to @p c), -1 when refused. */
static int32_t class_char(parser *ps, cls *c)
{
    if (*ps->p != '\\')
        return pattern_char(ps);
    ps->p++;
    return escape(ps, c);
}

/* A class, ps->p just past its '['. */
static bool parse_class(parser *ps, cls *c)
{
    bool neg = *ps->p == '^';
    ps->p += neg;
    while (*ps->p && *ps->p != ']') {
        int32_t lo = class_char(ps, c);
        if (lo == -1)
            return false;
        if (lo == -2)
            continue;
        int32_t hi = lo;
        if (ps->p[0] == '-' && ps->p[1] && ps->p[1] != ']') {
            ps->p++;
            if ((hi = class_char(ps, c)) == -1)
                return false;
            if (hi == -2 || hi < lo) {
                ps->bad = hi == -2 ? "a range ends in a class escape"
                                   : "a range is out of order";
                return false;
            }
        }
        if (!cls_add(ps, c, (uint32_t)lo, (uint32_t)hi))
            return false;
    }
    if (!*ps->p) {
        ps->bad = "a class [ is not closed";
        return false;
    }
    ps->p++;
    return class_close(ps, c, neg);
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

/* An atom that takes one character, ps->p on it, into @p c and emitted. */
static bool parse_char_atom(parser *ps, cls *c)
{
    int32_t e;
    switch (*ps->p) {
    case '.':
        ps->p++;
        return cls_table(ps, c, line_ends, PL__EXT_ARRAY_LEN(line_ends),
                         true) &&
               class_close(ps, c, false);
    case '[': ps->p++; return parse_class(ps, c);
    case '\\':
        ps->p++;
        e = escape(ps, c);
        break;
    case '*':
    case '+':
    case '?':
        ps->bad = "nothing to repeat (a quantifier first, or after another)";
        return false;
    default: /* a character, "]", "}", or a "{" that is no quantifier */
        e = pattern_char(ps);
        break;
    }
    return e != -1 && (e == -2 || cls_add(ps, c, (uint32_t)e, (uint32_t)e)) &&
           class_close(ps, c, false);
}

/* An atom: true having emitted it; *repeat false for an anchor. */
static bool parse_atom(parser *ps, bool *repeat)
{
    char c = *ps->p;
    *repeat = true;
    if (c == '^' || c == '$') {
        ps->p++;
        *repeat = false;
        return emit(ps, c == '^' ? OP_BOL : OP_EOL, 0, 0);
    }
    if (c != '(') {
        cls set = {{0, 0}, NULL, 0, 0};
        bool ok = parse_char_atom(ps, &set);
        free(set.r);
        return ok;
    }
    if (*++ps->p == '?') {
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
    if (rx) {
        free(rx->code);
        free(rx->ranges);
    }
    free(rx);
}

/* ---- matching ------------------------------------------------------------- */

typedef struct threads {
    uint32_t *pc;
    size_t n;
} threads;

/* Add the thread at @p pc, and those its splits and jumps lead to, at
 * position @p at of @p len; true when one of them matches. */
static bool add(const rx_inst *code, threads *t, uint32_t *mark, uint32_t gen,
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
        const rx_inst *i = &code[pc];
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
    const unsigned char *s = (const unsigned char *)str;
    const rx_inst *code = rx->code;
    for (size_t at = 0;;) {
        /* a new start at each position: "test" matches anywhere */
        if (add(code, &cur, mark, (uint32_t)at, stack, 0, at, len, &steps)) {
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
        /* every thread takes the one character at @p at, or dies: ASCII
         * by its set alone (as fast as when matching was by byte) */
        uint32_t c = s[at];
        size_t to = at + 1;
        next.n = 0;
        if (c < 0x80) {
            for (size_t k = 0; k < cur.n && !r; k++) {
                const rx_inst *i = &code[cur.pc[k]];
                if (((i->set[c >> 6] >> (c & 63)) & 1) &&
                    add(code, &next, mark, (uint32_t)to, stack, cur.pc[k] + 1,
                        to, len, &steps))
                    r = 1;
            }
        } else {
            to = at + pl__utf8_next(str + at, &c);
            for (size_t k = 0; k < cur.n && !r; k++)
                if (takes(rx, &code[cur.pc[k]], c) &&
                    add(code, &next, mark, (uint32_t)to, stack, cur.pc[k] + 1,
                        to, len, &steps))
                    r = 1;
        }
        if (r)
            break;
        threads t = cur;
        cur = next;
        next = t;
        at = to;
    }
    *budget -= steps / 16 < *budget ? steps / 16 : *budget;
    free(mem);
    return r;
}
