#!/usr/bin/env python3
"""doc_samples.py -- the C of docs/guide.md and README.md compiles and runs.

    doc_samples.py --src SRC --lib-dir DIR --replay LEDGER-REPLAY
                   --dump LEDGER-DUMP
                   [--cc CC] [--cxx CXX] [--valgrind VALGRIND] [--jobs N]
                   [--program-flags FLAGS]

Every ```c block of docs/guide.md and README.md is checked; none is
skipped.  What a block is comes from an HTML comment on the line just
before it (only blank lines between):

  <!-- sample: program -->     a whole program: built and linked with the
      library, then run in a temporary directory (its LMDB stores are made
      there).  When an unlabelled block follows it (only blank lines
      between) and shows commands (`$ ./NAME ...`), those commands are run
      there with the program as ./NAME, each under valgrind (a definite
      leak or any error fails), and what they print is compared with the
      lines under them, line for line.
  <!-- sample: plugin POLICY [PAYLOAD] -->   a plugin: built as a shared
      object, as C and as C++ (g++, -fvisibility=hidden, as the guide's
      build lines say), each loaded by `ledger-replay --plugin`, which runs
      POLICY with PAYLOAD (a JSON object; default {}) to `completed`;
      `ledger-dump` shows the plugin's build-id as the run's code.
  <!-- sample: body CONTEXT -->   statements: compiled as the body of
      CONTEXT's function in tests/doc_samples.c (a policy, a program's
      main, ...: what the fragment uses and does not show is declared
      there).
  <!-- sample: file CONTEXT -->   file-scope code (functions,
      declarations); after a line `/* ... */`, statements, compiled as the
      body of CONTEXT's function.
  <!-- sample: none: WHY -->     not compiled; WHY is required.

Beside the blocks, the prose: every pl_* and PL_* name the two pages use
is declared in include/ (or, an environment variable or SQL function, is
named in the code), and every `pl_type.member` they name is a member of
that struct in include/.

A block without a comment is a program when it defines main(), else file
code in the context `alone`, which adds nothing (the README is written
without comments).
Fragments (body, file) are compiled, not linked; a static function they
define need not be called (-Wno-unused-function).  Everything is compiled
with -std=c11 -Wall -Wextra -Werror -pedantic against include/ alone (and
cJSON's header, which the API uses); a #line directive makes each message
name the Markdown file and its line.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

DOCS = ("docs/guide.md", "README.md")
CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
CXXFLAGS = ["-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
MARKER = re.compile(r"<!--\s*sample:\s*(.*?)\s*-->\s*$")
KINDS = ("program", "plugin", "body", "file", "none")


class Sample:
    def __init__(self, doc, line, code, marker, output):
        self.doc, self.line, self.code = doc, line, code
        self.output = output  # (line, [lines]) of the block after, or None
        self.where = "%s:%d" % (doc, line)
        self.inferred = marker is None
        if marker is None:
            marker = "program" if re.search(r"^int main\(", code, re.M) \
                else "file alone"
        words = marker.split(None, 1)
        self.kind = words[0].rstrip(":") if words else ""
        self.arg = words[1].strip() if len(words) > 1 else ""
        if self.kind not in KINDS:
            raise ValueError("%s: sample kind '%s' is none of %s" %
                             (self.where, self.kind, ", ".join(KINDS)))
        if self.kind == "none" and not self.arg:
            raise ValueError("%s: a sample not compiled says why "
                             "(<!-- sample: none: WHY -->)" % self.where)
        if self.kind in ("body", "file") and not re.fullmatch(r"\w+",
                                                              self.arg):
            raise ValueError("%s: a %s sample names its context "
                             "(tests/doc_samples.c)" % (self.where,
                                                        self.kind))
        self.name = "%s_%d" % (os.path.basename(doc).split(".")[0], line)


def blocks(src, doc):
    """Every fenced block of doc: the line of its first code line, its
    language, its text, the sample comment before it or None, and whether
    only blank lines part it from the block before."""
    with open(os.path.join(src, doc), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i + 1
        j = start
        while j < len(lines) and lines[j] != "```":
            j += 1
        if j == len(lines):
            raise ValueError("%s:%d: a block that never ends" % (doc, i + 1))
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = MARKER.match(lines[k]) if k >= 0 else None
        out.append({"line": start + 1, "lang": lang, "end": j,
                    "text": "\n".join(lines[start:j]) + "\n",
                    "marker": mk.group(1) if mk else None,
                    "right_after": False})
        i = j + 1
    for a, b in zip(out, out[1:]):
        # only blank lines between the two blocks
        b["right_after"] = all(not x.strip()
                               for x in lines[a["end"] + 1:b["line"] - 2])
    return out


def samples(src):
    found = []
    for doc in DOCS:
        bl = blocks(src, doc)
        for n, b in enumerate(bl):
            if b["lang"] != "c":
                if b["marker"]:
                    raise ValueError("%s:%d: a sample comment before a "
                                     "block that is not ```c" %
                                     (doc, b["line"]))
                continue
            nxt = bl[n + 1] if n + 1 < len(bl) else None
            output = None
            if nxt and nxt["lang"] == "" and nxt.get("right_after") and \
                    nxt["text"].startswith("$ "):
                output = (nxt["line"], nxt["text"].rstrip("\n").split("\n"))
            found.append(Sample(doc, b["line"], b["text"], b["marker"],
                                output))
    return found


def check_names(src):
    """The pl_/PL_ names and pl_type.member fields the pages use exist."""
    headers = ""
    for d, _, files in os.walk(os.path.join(src, "include")):
        for f in sorted(files):
            with open(os.path.join(d, f), encoding="utf-8") as h:
                headers += h.read()
    code = ""
    for top in ("core", "ledger", "base", "policies", "tools", "tests",
                "scripts"):
        for d, _, files in os.walk(os.path.join(src, top)):
            for f in files:
                if f.endswith((".c", ".h", ".sh", ".py")):
                    with open(os.path.join(d, f), encoding="utf-8",
                              errors="replace") as h:
                        code += h.read()
    structs = dict(re.findall(r"typedef struct (pl_\w+) \{(.*?)\n\} \1;",
                              headers, re.S))
    problems, seen = [], set()
    for doc in DOCS:
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in enumerate(lines, 1):
            for name in re.findall(r"\b(?:pl|PL)_\w+", line):
                if name in seen:
                    continue
                seen.add(name)
                if not re.search(r"\b%s\b" % name, headers) and \
                        not re.search(r"\b%s\b" % name, code):
                    problems.append("%s:%d: %s is declared nowhere" %
                                    (doc, n, name))
            for t, m in re.findall(r"\b(pl_\w+)\.(\w+)", line):
                if t in structs and not re.search(
                        r"[\s*]%s\s*(\[[^]]*\])?\s*[;,:]" % m, structs[t]):
                    problems.append("%s:%d: %s has no member %s" %
                                    (doc, n, t, m))
                elif t not in structs and not re.search(r"\b%s\b" % t,
                                                       headers):
                    problems.append("%s:%d: no struct %s" % (doc, n, t))
    return len(seen), problems


def run(cmd, cwd=None, timeout=120):
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "", "%s: %s\n" % (cmd[0], e)
    return p.returncode, p.stdout, p.stderr


class Check:
    def __init__(self, args, tmp):
        self.a, self.tmp = args, tmp
        self.inc = ["-I" + os.path.join(args.src, "include")]
        self.inc += subprocess.run(["pkg-config", "--cflags", "libcjson"],
                                   capture_output=True, text=True,
                                   check=True).stdout.split()
        lib = os.path.abspath(args.lib_dir)
        self.libs = ["-L" + lib, "-Wl,-rpath," + lib,
                     "-lpolicyledger", "-lcjson"]
        self.contexts = os.path.join(args.src, "tests", "doc_samples.c")
        self.extra = args.program_flags.split()

    def source(self, s, text, first_line, suffix):
        path = os.path.join(self.tmp, s.name + suffix)
        with open(path, "w", encoding="utf-8") as f:
            f.write('#line %d "%s"\n%s' % (first_line, s.doc, text))
        return path

    def compile_fragment(self, s):
        code, body_line = s.code, s.line
        with open(self.contexts, encoding="utf-8") as f:
            if not re.search(r"\bPL_SAMPLE_CTX_%s\b" % s.arg, f.read()):
                return "no context '%s' in tests/doc_samples.c" % s.arg
        defs = ["-DPL_SAMPLE_CTX_" + s.arg]
        if s.kind == "file":
            lines = code.split("\n")
            cut = next((i for i, x in enumerate(lines)
                        if x.strip() == "/* ... */"), None)
            head = "\n".join(lines[:cut]) + "\n" if cut is not None else code
            defs.append('-DPL_SAMPLE_FILE="%s"' %
                        self.source(s, head, s.line, ".file.h"))
            if cut is None:
                code = ""
            else:
                code = "\n".join(lines[cut + 1:])
                body_line = s.line + cut + 1
        if code.strip():
            defs.append('-DPL_SAMPLE_BODY="%s"' %
                        self.source(s, code, body_line, ".body.h"))
        elif s.kind == "body":
            return "an empty sample"
        rc, out, err = run([self.a.cc] + CFLAGS + ["-Wno-unused-function"] +
                           self.inc + defs + ["-c", self.contexts, "-o",
                                              os.devnull], cwd=self.a.src)
        return None if rc == 0 else out + err

    def compile_program(self, s, exe):
        src = self.source(s, s.code, s.line, ".c")
        rc, out, err = run([self.a.cc] + CFLAGS + self.extra + self.inc +
                           [src, "-o", exe] + self.libs, cwd=self.a.src)
        return None if rc == 0 else out + err

    def check_program(self, s):
        exe = os.path.join(self.tmp, s.name)
        err = self.compile_program(s, exe)
        if err:
            return err
        if not s.output:
            return self.run_alone(s, exe)
        first, lines = s.output
        m = re.match(r"^\$ \./([\w.-]+)", lines[0])
        if not m:
            return "%s:%d: the output's first command is not ./NAME" % (
                s.doc, first)
        work = tempfile.mkdtemp(dir=self.tmp)
        self.wrapper(os.path.join(work, m.group(1)), exe, work)
        problems, i = [], 0
        while i < len(lines):
            cmd = lines[i][2:]
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ "):
                j += 1
            rc, out, err = run(["sh", "-c", cmd], cwd=work)
            want = lines[i + 1:j]
            got = out.rstrip("\n").split("\n") if out else []
            if rc != 0:
                problems.append("%s:%d: `%s` exited %d: %s" %
                                (s.doc, first + i, cmd, rc, err.strip()))
            elif got != want:
                problems.append("%s:%d: `%s` printed\n  %s\nwhere the doc "
                                "shows\n  %s" %
                                (s.doc, first + i, cmd, "\n  ".join(got),
                                 "\n  ".join(want)))
            i = j
        return "\n".join(problems) or None

    def run_alone(self, s, exe):
        work = tempfile.mkdtemp(dir=self.tmp)
        wrap = os.path.join(work, "prog")
        self.wrapper(wrap, exe, work)
        rc, out, err = run([wrap], cwd=work)
        return None if rc == 0 else "%s: exited %d: %s%s" % (
            s.where, rc, out, err)

    def wrapper(self, path, exe, work):
        """./NAME in the work directory: the program, under valgrind when
        there is one (a definite leak or an error exits 99)."""
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
            if self.a.valgrind:
                f.write('exec "%s" -q --error-exitcode=99 --leak-check=full '
                        '--errors-for-leak-kinds=definite --log-fd=2 '
                        '"%s" "$@"\n' % (self.a.valgrind,
                                         exe))
            else:
                f.write('exec "%s" "$@"\n' % exe)
        os.chmod(path, 0o755)

    def check_plugin(self, s):
        words = s.arg.split(None, 1)
        if not words:
            return "%s: a plugin sample names the policy to run" % s.where
        policy = words[0]
        payload = words[1] if len(words) > 1 else "{}"
        problems = []
        for lang, compiler, flags in (("c", self.a.cc, CFLAGS),
                                      ("c++", self.a.cxx, CXXFLAGS)):
            suffix = ".c" if lang == "c" else ".cpp"
            src = self.source(s, s.code, s.line, suffix)
            so = os.path.join(self.tmp, "%s-%s.so" % (s.name, lang))
            rc, out, err = run([compiler] + flags + self.extra + self.inc +
                               ["-x", lang, "-shared", "-fPIC",
                                "-fvisibility=hidden", src, "-o", so] +
                               self.libs, cwd=self.a.src)
            if rc:
                problems.append("%s as %s: %s%s" % (s.where, lang, out, err))
                continue
            store = os.path.join(tempfile.mkdtemp(dir=self.tmp), "s.db")
            rc, out, err = run([self.a.replay, store, "--plugin", so,
                                "--submit", policy, "--payload", payload,
                                "--new-id", "sample"])
            if rc == 0:
                rc, out, err = run([self.a.replay, store, "--plugin", so,
                                    "--run", "sample"])
            if rc or "run sample: completed" not in out:
                problems.append("%s as %s: ledger-replay --plugin ran %s: "
                                "exit %d\n%s%s" % (s.where, lang, policy, rc,
                                                   out, err))
                continue
            # a policy registered without a code_version: the plugin's
            # build-id is its code identity (the guide's Plugins)
            rc, out, err = run([self.a.dump, store, "--run", "sample"])
            if rc or not re.search(r"^  code +build-id:[0-9a-f]+$", out,
                                   re.M):
                problems.append("%s as %s: the run's code is not the "
                                "plugin's build-id:\n%s%s" %
                                (s.where, lang, out, err))
        return "\n".join(problems) or None

    def check(self, s):
        if s.kind == "none":
            return None
        if s.kind == "program":
            return self.check_program(s)
        if s.kind == "plugin":
            return self.check_plugin(s)
        return self.compile_fragment(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--lib-dir", required=True)
    ap.add_argument("--replay", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--cxx", default="c++")
    ap.add_argument("--valgrind")
    ap.add_argument("--program-flags", default="",
                    help="more flags for the programs and plugins (the "
                    "sanitizers of the library's build)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    args.src = os.path.abspath(args.src)
    try:
        found = samples(args.src)
    except ValueError as e:
        print("FAIL: %s" % e, file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="doc_samples.")
    try:
        check = Check(args, tmp)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(check.check, found))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    failed = 0
    for s, problem in zip(found, results):
        what = s.kind + (" " + s.arg if s.arg else "")
        if s.kind == "none":
            print("not compiled %s: %s" % (s.where, s.arg))
        elif problem:
            failed += 1
            print("FAIL %s (%s):\n%s" % (s.where, what, problem.rstrip()))
            if s.inferred:
                print("  (no <!-- sample: ... --> comment before the block: "
                      "it was taken as %s; tests/doc_samples.py says what "
                      "else a block may be)" % what)
        else:
            print("ok   %s (%s)" % (s.where, what))
    n_names, problems = check_names(args.src)
    if problems:
        failed += 1
        print("FAIL names:\n" + "\n".join(problems))
    else:
        print("ok   the %d pl_/PL_ names the pages use, and their members"
              % n_names)
    print("%d samples, %d failed, %d not compiled" %
          (len(found), failed, sum(s.kind == "none" for s in found)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
