/*
 * plugin.c -- policies from a shared object.
 *
 * Loading is all or nothing: the plugin's entry point registers into a
 * registry of its own, and only when it has succeeded, and none of its names
 * is taken, are its policies copied into the caller's registry.  The shared
 * object then belongs to that registry and is closed when it is freed.
 *
 * A plugin must use the library that loads it: a host linked with the
 * static library would give a plugin (linked with the shared one) a second
 * copy, with its own state.  So before its entry point runs, the object
 * that defines pl_version in the plugin's own scope (itself and its
 * dependencies) must be the one this code is in, or define none.
 *
 * A plugin's code identity is its GNU build-id, read from the file's
 * PT_NOTE segments (every read bounds-checked: the file is untrusted until
 * the dynamic loader has accepted it, and read again after), or the
 * SHA-256 of its bytes when it has none.
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "platform.h"
#include "registry.h"

#if UINTPTR_MAX > 0xffffffffu
typedef Elf64_Ehdr elf_ehdr;
typedef Elf64_Phdr elf_phdr;
#define ELF_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr elf_ehdr;
typedef Elf32_Phdr elf_phdr;
#define ELF_CLASS ELFCLASS32
#endif

#define MAX_NOTE_BYTES (64 * 1024)
#define MAX_BUILD_ID 64 /* bytes; GNU ld writes 20 (sha1) or 16 (md5) */

/* ---- code identity ---------------------------------------------------------- */

static bool read_at(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return true;
}

static void hex(char *out, const uint8_t *p, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Find NT_GNU_BUILD_ID in one note segment.  true when found. */
static bool note_build_id(const uint8_t *p, size_t n, char *out, size_t cap)
{
    size_t off = 0;
    while (n - off >= 12) {
        uint32_t namesz, descsz, type;
        memcpy(&namesz, p + off, 4);
        memcpy(&descsz, p + off + 4, 4);
        memcpy(&type, p + off + 8, 4);
        off += 12;
        size_t name_pad = ((size_t)namesz + 3) & ~(size_t)3;
        size_t desc_pad = ((size_t)descsz + 3) & ~(size_t)3;
        if (name_pad > n - off || desc_pad > n - off - name_pad)
            return false;
        if (type == NT_GNU_BUILD_ID && namesz == 4 &&
            memcmp(p + off, "GNU", 4) == 0 && descsz > 0 &&
            descsz <= MAX_BUILD_ID && cap > 9 + 2 * (size_t)descsz) {
            memcpy(out, "build-id:", 9);
            hex(out + 9, p + off + name_pad, descsz);
            return true;
        }
        off += name_pad + desc_pad;
    }
    return false;
}

static bool elf_build_id(int fd, char *out, size_t cap)
{
    elf_ehdr eh;
    if (!read_at(fd, &eh, sizeof eh, 0) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELF_CLASS ||
        eh.e_phentsize != sizeof(elf_phdr) || eh.e_phnum > 4096)
        return false;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        elf_phdr ph;
        if (!read_at(fd, &ph, sizeof ph,
                     (uint64_t)eh.e_phoff + (uint64_t)i * sizeof ph))
            return false;
        if (ph.p_type != PT_NOTE || ph.p_filesz == 0 ||
            ph.p_filesz > MAX_NOTE_BYTES)
            continue;
        uint8_t *buf = malloc(ph.p_filesz);
        if (!buf)
            return false;
        bool found = read_at(fd, buf, ph.p_filesz, ph.p_offset) &&
                     note_build_id(buf, ph.p_filesz, out, cap);
        free(buf);
        if (found)
            return true;
    }
    return false;
}

static int file_sha256(int fd, const char *path, char *out, size_t cap)
{
    pl__hasher *h = NULL;
    uint8_t buf[64 * 1024], digest[PL_HASH_LEN];
    int st = pl__hasher_new(&h);
    if (!st)
        st = pl__hash_init(h);
    for (uint64_t off = 0; !st;) {
        ssize_t r = pread(fd, buf, sizeof buf, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            st = pl__err(PL_EIO, "plugin '%s': cannot read it: %s", path,
                         strerror(errno));
        else if (r == 0)
            break;
        else {
            st = pl__hash_update(h, buf, (size_t)r);
            off += (uint64_t)r;
        }
    }
    if (!st)
        st = pl__hash_final(h, digest);
    pl__hasher_free(h);
    if (!st && cap > 7 + 2 * PL_HASH_LEN) {
        memcpy(out, "sha256:", 7);
        hex(out + 7, digest, PL_HASH_LEN);
    }
    return st;
}

/* "build-id:<hex>", or "sha256:<hex>" of the file's bytes. */
static int code_identity(const char *path, char *out, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pl__err(PL_EIO, "plugin '%s': cannot open it: %s", path,
                       strerror(errno));
    int st = elf_build_id(fd, out, cap) ? PL_OK
                                        : file_sha256(fd, path, out, cap);
    close(fd);
    return st;
}

/* ---- loading ----------------------------------------------------------------- */

static void close_handle(void *handle) { dlclose(handle); }

/* dlerror()'s text, or a fallback: it is NULL when nothing failed. */
static const char *dl_reason(void)
{
    const char *e = dlerror();
    return e ? e : "unknown reason";
}

static int check_file(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno == ENOENT || errno == ENOTDIR
                   ? pl__err(PL_ENOTFOUND, "plugin '%s': no such file", path)
                   : pl__err(PL_EPLUGIN, "plugin '%s': %s", path,
                             strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return pl__err(PL_EPLUGIN, "plugin '%s': not a regular file", path);
    return PL_OK;
}

/* Open it by its path, never by a search of the library path. */
static void *open_shared(const char *path)
{
    if (strchr(path, '/'))
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t n = strlen(path);
    char *local = malloc(n + 3);
    if (!local)
        return NULL;
    memcpy(local, "./", 2);
    memcpy(local + 2, path, n + 1);
    void *h = dlopen(local, RTLD_NOW | RTLD_LOCAL);
    free(local);
    return h;
}

/* PL_OK when the plugin binds to this copy of the library (or to none of
 * its own, using the host's). */
static int check_same_library(void *handle, const char *path)
{
    const char *where = NULL;
    if (!pl__symbol_elsewhere(handle, "pl_version", &where))
        return PL_OK;
    return pl__err(PL_EPLUGIN,
                   "plugin '%s': it uses the policyledger library at '%s', "
                   "a second copy beside the one loading it: a program "
                   "that loads plugins must link the shared library "
                   "(libpolicyledger.so.%d), not the static one",
                   path, where, PL_ABI_VERSION);
}

static int run_entry(pl_registry **out, void *handle, const char *path)
{
    dlerror();
    const unsigned *abi = dlsym(handle, PL_PLUGIN_ABI_SYMBOL);
    if (!abi)
        return pl__err(PL_EPLUGIN,
                       "plugin '%s': no '%s' symbol: not a policyledger "
                       "plugin (it must say PL_PLUGIN_DECLARE;)",
                       path, PL_PLUGIN_ABI_SYMBOL);
    if (*abi != PL_ABI_VERSION)
        return pl__err(PL_EVERSION,
                       "plugin '%s': built for ABI version %u, this library "
                       "(%s) has ABI version %d: rebuild it against this "
                       "library's header",
                       path, *abi, PL_VERSION_STRING, PL_ABI_VERSION);
    int st = check_same_library(handle, path);
    if (st)
        return st;
    /* A data pointer converted to a function pointer: dlsym's contract. */
    pl_plugin_init_fn init;
    void *sym = dlsym(handle, PL_PLUGIN_ENTRY);
    if (!sym)
        return pl__err(PL_EPLUGIN, "plugin '%s': no entry point '%s'", path,
                       PL_PLUGIN_ENTRY);
    memcpy(&init, &sym, sizeof init);

    pl_registry *scratch = NULL;
    if ((st = pl_registry_new(&scratch)))
        return st;
    pl__err_clear();
    st = init(scratch);
    if (st) {
        const char *name = pl_status_name(st);
        bool known = pl__status_failure(st);
        /* its own message, if it set one (pl_errmsg() says "no error"
         * when none was set, which is not why it failed) */
        const char *why = pl__errmsg_set() ? pl_errmsg() : "";
        pl__err(known ? st : PL_EPLUGIN,
                "plugin '%s': its entry point failed with %s%s%s%s", path,
                known ? name : "a status that is not a pl_status",
                *why ? " (" : "", why, *why ? ")" : "");
        pl_registry_free(scratch);
        return known ? st : PL_EPLUGIN;
    }
    /* a plugin is its policies: one that says PL_OK and registers none
     * would load as if they were there, and every run naming them fail */
    if (!pl_registry_count(scratch)) {
        pl_registry_free(scratch);
        return pl__err(PL_EPLUGIN,
                       "plugin '%s': its entry point registered no policy "
                       "(it returned PL_OK): nothing to load; it must "
                       "register its policies in the registry it is given",
                       path);
    }
    *out = scratch;
    return PL_OK;
}

int pl_plugin_load(pl_registry *reg, const char *path)
{
    if (!reg || !path || !*path)
        return pl__err(PL_EINVAL, "pl_plugin_load: registry and path are "
                                  "required");
    int st = check_file(path);
    if (st)
        return st;
    dlerror();
    void *handle = open_shared(path);
    if (!handle)
        return pl__err(PL_EPLUGIN,
                       "plugin '%s': not a loadable shared object: %s", path,
                       dl_reason());

    char identity[16 + 2 * MAX_BUILD_ID];
    pl_registry *scratch = NULL;
    st = run_entry(&scratch, handle, path);
    if (!st)
        st = code_identity(path, identity, sizeof identity);
    /* the registry unloads the object after it released its policies'
     * data, whose release may be the plugin's own code */
    if (!st)
        st = pl__registry_adopt(reg, scratch, identity, path, handle,
                                close_handle);
    pl_registry_free(scratch); /* before dlclose: it may hold plugin data */
    if (st)
        dlclose(handle);
    return st;
}
