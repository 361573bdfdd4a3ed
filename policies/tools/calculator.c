/*
 * calculator.c -- the "calculator" tool: a recursive-descent parser and
 * evaluator for arithmetic, with a nesting limit.
 *
 * Grammar (whitespace between tokens is skipped):
 *
 *   expr    := term (('+' | '-') term)*
 *   term    := unary (('*' | '/' | '%') unary)*
 *   unary   := ('-' | '+') unary | power
 *   power   := primary ('^' unary)?        right-associative: 2^3^2 = 512,
 *                                          and -2^2 = -4
 *   primary := number | '(' expr ')'
 *   number  := digits ('.' digits?)? | '.' digits, then
 *              (('e' | 'E') ('+' | '-')? digits)?
 *
 * Every unary operator and parenthesis counts one level of nesting, at most
 * PL_TOOLS_MAX_NESTING, so the C stack is bounded whatever the input.
 * Every intermediate value must be finite: division or remainder by zero
 * and overflow are errors, never inf or nan.
 */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>

#include "tools.h"

typedef struct calc {
    const char *s;
    size_t len, pos;
    unsigned depth;
} calc;

static int expr(calc *c, double *out);

static void skip_space(calc *c)
{
    while (c->pos < c->len && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t' ||
                               c->s[c->pos] == '\n' || c->s[c->pos] == '\r'))
        c->pos++;
}

static int peek(calc *c)
{
    skip_space(c);
    return c->pos < c->len ? (unsigned char)c->s[c->pos] : -1;
}

static int unexpected(const calc *c, const char *wanted)
{
    if (c->pos >= c->len)
        return pl__err(PL_EINVAL, "expected %s at the end (offset %zu)", wanted,
                       c->pos);
    unsigned char ch = (unsigned char)c->s[c->pos];
    if (ch < 0x20 || ch >= 0x7f)
        return pl__err(PL_EINVAL, "expected %s at offset %zu, got byte 0x%02x",
                       wanted, c->pos, ch);
    return pl__err(PL_EINVAL, "expected %s at offset %zu, got '%c'", wanted,
                   c->pos, ch);
}

static int finite_or_err(double v, const char *what, size_t at)
{
    if (isnan(v))
        return pl__err(PL_EINVAL, "%s at offset %zu is not a number", what, at);
    if (isinf(v))
        return pl__err(PL_EINVAL, "%s at offset %zu overflows", what, at);
    return PL_OK;
}

static bool is_digit(int ch) { return ch >= '0' && ch <= '9'; }

static int number(calc *c, double *out)
{
    size_t start = c->pos, i = c->pos;
    size_t digits = 0;
    while (i < c->len && is_digit((unsigned char)c->s[i]))
        i++, digits++;
    if (i < c->len && c->s[i] == '.') {
        i++;
        while (i < c->len && is_digit((unsigned char)c->s[i]))
            i++, digits++;
    }
    if (!digits)
        return unexpected(c, "a number or '('");
    if (i < c->len && (c->s[i] == 'e' || c->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < c->len && (c->s[j] == '+' || c->s[j] == '-'))
            j++;
        if (j >= c->len || !is_digit((unsigned char)c->s[j])) {
            c->pos = j;
            return unexpected(c, "the digits of an exponent");
        }
        while (j < c->len && is_digit((unsigned char)c->s[j]))
            j++;
        i = j;
    }
    /* The lexeme is checked above, so strtod reads exactly it: copy it
     * out, since the input need not end there.  strtod reads it in the "C"
     * locale (pl__calc_eval() sets it for this thread), whatever decimal
     * point the program's locale has. */
    char buf[PL_TOOLS_MAX_EXPRESSION + 1];
    size_t n = i - start;
    memcpy(buf, c->s + start, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if ((size_t)(end - buf) != n)
        return pl__err(PL_EINVAL, "number at offset %zu cannot be read", start);
    if (errno == ERANGE && isinf(v))
        return pl__err(PL_EINVAL, "number at offset %zu overflows", start);
    c->pos = i;
    *out = v;
    return PL_OK;
}

static int enter(calc *c)
{
    if (++c->depth > PL_TOOLS_MAX_NESTING)
        return pl__err(PL_EINVAL,
                       "nested deeper than %d (parentheses and unary signs) "
                       "at offset %zu",
                       PL_TOOLS_MAX_NESTING, c->pos);
    return PL_OK;
}

static int primary(calc *c, double *out)
{
    int ch = peek(c);
    if (ch == '(') {
        size_t open = c->pos;
        c->pos++;
        int st = enter(c);
        if (!st)
            st = expr(c, out);
        if (st)
            return st;
        if (peek(c) != ')') {
            if (c->pos >= c->len)
                return pl__err(PL_EINVAL, "'(' at offset %zu is never closed",
                               open);
            return unexpected(c, "')'");
        }
        c->pos++;
        c->depth--;
        return PL_OK;
    }
    return number(c, out);
}

static int unary(calc *c, double *out);

static int power(calc *c, double *out)
{
    int st = primary(c, out);
    if (st)
        return st;
    if (peek(c) != '^')
        return PL_OK;
    size_t at = c->pos++;
    double e;
    st = unary(c, &e);
    if (st)
        return st;
    *out = pow(*out, e);
    return finite_or_err(*out, "'^'", at);
}

static int unary(calc *c, double *out)
{
    int ch = peek(c);
    if (ch != '-' && ch != '+')
        return power(c, out);
    c->pos++;
    int st = enter(c);
    if (!st)
        st = unary(c, out);
    if (st)
        return st;
    c->depth--;
    if (ch == '-')
        *out = -*out;
    return PL_OK;
}

static int term(calc *c, double *out)
{
    int st = unary(c, out);
    while (!st) {
        int op = peek(c);
        if (op != '*' && op != '/' && op != '%')
            break;
        size_t at = c->pos++;
        double r;
        st = unary(c, &r);
        if (st)
            break;
        if (op != '*' && r == 0)
            return pl__err(PL_EINVAL, "%s by zero at offset %zu",
                           op == '/' ? "division" : "remainder", at);
        *out = op == '*' ? *out * r : op == '/' ? *out / r : fmod(*out, r);
        st = finite_or_err(*out,
                           op == '*'   ? "'*'"
                           : op == '/' ? "'/'"
                                       : "'%'",
                           at);
    }
    return st;
}

static int expr(calc *c, double *out)
{
    int st = term(c, out);
    while (!st) {
        int op = peek(c);
        if (op != '+' && op != '-')
            break;
        size_t at = c->pos++;
        double r;
        st = term(c, &r);
        if (st)
            break;
        *out = op == '+' ? *out + r : *out - r;
        st = finite_or_err(*out, op == '+' ? "'+'" : "'-'", at);
    }
    return st;
}

int pl__calc_eval(double *out, const char *s, size_t len)
{
    if (len == 0)
        return pl__err(PL_EINVAL, "empty expression");
    if (len > PL_TOOLS_MAX_EXPRESSION)
        return pl__err(PL_EINVAL, "expression of %zu bytes is longer than %d",
                       len, PL_TOOLS_MAX_EXPRESSION);
    calc c = {s, len, 0, 0};
    if (peek(&c) < 0)
        return pl__err(PL_EINVAL, "empty expression");
    locale_t cloc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (cloc == (locale_t)0)
        return pl__err(PL_ENOMEM, "calculator: no \"C\" locale");
    locale_t old = uselocale(cloc);
    int st = expr(&c, out);
    uselocale(old);
    freelocale(cloc);
    if (st)
        return st;
    if (peek(&c) >= 0)
        return unexpected(&c, "an operator or the end");
    if (*out == 0)
        *out = 0; /* no "-0" in a result */
    return PL_OK;
}

int pl__tool_calculator(pl_ctx *ctx, const pl_action *action, pl_steps *out,
                        void *user)
{
    (void)ctx, (void)user;
    const char *e = NULL;
    if (pl_json_unpack(action->payload, "{s:s !}", "expression", &e))
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    double v;
    int st = pl__calc_eval(&v, e, strlen(e));
    if (st == PL_ENOMEM)
        return st;
    if (st)
        return pl_steps_add_error(out, PL_ERR_INVALID_INPUT, pl_errmsg());
    return pl_steps_add_resultf(out, "{s:f}", "result", v);
}
