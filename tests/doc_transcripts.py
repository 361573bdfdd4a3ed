#!/usr/bin/env python3
"""doc_transcripts.py -- the shell transcripts of docs/guide.md and
README.md print what the tools print.

    doc_transcripts.py --src SRC --build BUILD [--jobs N]

Every fenced block of the two pages that is not ```c (those are
tests/doc_samples.py's) says what it is by an HTML comment on the line
just before it (only blank lines between):

  <!-- transcript: SETUP -->      run, in a new directory SETUP makes
      (below), and compared with what the block shows.  A block whose
      lines start `$ ` is a shell session: each command runs in one `sh`
      in that directory (so `cd`, `export` and `$?` carry over), its
      standard output and error together are compared with the lines
      under it, and it must exit 0 unless the next command shown is
      `echo $?`, which shows its status.  A block without `$ ` is the
      whole output of the command SETUP names.
  <!-- transcript: none: WHY -->  not run; WHY is required.

The one block that needs no comment is a program's output right after a
`<!-- sample: program -->` block: doc_samples.py runs it.  A block with
no comment fails the test, as does a comment that names no setup.

Setups (BUILD/tools and BUILD/examples are on PATH, as after an install):
  orders-deploy   orders.db with three runs of the order workflow by
                  order-plugin.so (v1): order-A-1 completed, order-A-2
                  killed after ship's result was durable (step boundary 13),
                  order-A-3 killed before ship (boundary 10); and
                  ./order-plugin.so, ./order-plugin-v2.so,
                  ./order-plugin-v2-gated.so
  agent           ./agent-plugin.so; ./script.json, the agent's offline
                  script, its file:// URLs naming ./data, a copy of the
                  agent's data
  build-tree      ./build (the build tree) and ./examples (the source's)
  agent-story     output of `scripts/agent-demo.sh BUILD`
  agent-story-stream   output of `scripts/agent-demo.sh --stream BUILD`

Matching rules, line by line, for what varies from run to run:
  - a line that is `...` alone (indented or not) stands for any number of
    lines, none included: the block is abridged there;
  - `...` within a line stands for any text (a path, the rest of a long
    payload; the tools' own `...`, where they cut a payload, is text too);
  - a number before ` ms` is any number (a duration);
  - a date and time (2026-11-29 16:31:40, 2026-11-30T02:30:00Z) is any;
  - a run of 8 or more hex digits (a build-id, a digest) is any such run,
    and so is an abbreviated one in the doc (`4675...32cc`);
  - blank lines at the end of a command's output are not compared.

Beside the blocks, every `--flag` the pages give one of the project's
programs (ledger-replay, ledger-dump, ledger-web, agent-demo, order-demo,
llm-agent, pl-bench, scripts/*.sh), in a block or in the prose's
`code`, is one that program's --help (a script: its source) names; and
every AGENT_* and OTEL_* variable they name is in the code.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_samples  # noqa: E402  (its block reader)

DOCS = ("docs/guide.md", "README.md")
MARKER = re.compile(r"<!--\s*transcript:\s*(.*?)\s*-->\s*$")
END = "@@doc-transcript-end"
PROGRAMS = {"ledger-replay": "tools", "ledger-dump": "tools",
            "ledger-web": "tools", "agent-demo": "examples",
            "order-demo": "examples", "llm-agent": "examples",
            "pl-bench": "bench"}
# scripts whose options are a program's, passed on to it
PASSED_ON = {"scripts/bench-pg.sh": "pl-bench"}


def program(doc, b):
    """Whether doc_samples.py runs the C block b as a program."""
    try:
        return doc_samples.Sample(doc, b["line"], b["text"], b["marker"],
                                  None).kind == "program"
    except ValueError:  # a comment doc_samples.py refuses, and says so
        return False


def blocks(src, doc):
    """doc_samples.py's fenced blocks of doc, each with its lines, the
    transcript comment before it, and whether it is a sample program's
    output (which doc_samples.py checks)."""
    with open(os.path.join(src, doc), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = doc_samples.blocks(src, doc)
    for n, b in enumerate(out):
        k = b["line"] - 3  # the line before the opening fence
        while k >= 0 and not lines[k].strip():
            k -= 1
        mk = MARKER.match(lines[k]) if k >= 0 else None
        b["transcript"] = mk.group(1) if mk else None
        b["lines"] = b["text"].split("\n")[:-1]
        prev = out[n - 1] if n else None
        b["output_of_sample"] = bool(
            prev and prev["lang"] == "c" and b["lang"] == "" and
            b["right_after"] and b["text"].startswith("$ ") and
            program(doc, prev))
    return out


# ----------------------------------------------------------------------------
# Matching


HEX = re.compile(r"(?<![0-9a-f])[0-9a-f]{8,}(?![0-9a-f])")
ABBREV = re.compile(r"(?<![0-9a-f])[0-9a-f]{2,}\.\.\.[0-9a-f]{2,}"
                    r"(?![0-9a-f])")
MS = re.compile(r"\b\d+(\.\d+)? ms\b")
TIME = re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?(\.\d+)?Z?\b")


def normalise(line, doc_side):
    if doc_side:
        line = ABBREV.sub("\x01", line)
    line = HEX.sub("\x01", line)
    line = MS.sub("\x02 ms", line)
    return TIME.sub("\x03", line)


def line_regex(want):
    parts = normalise(want, True).split("...")
    return re.compile(".*".join(re.escape(p) for p in parts) + r"\Z",
                      re.S)


def mismatch(want, got):
    """None when the lines got are the lines want shows, under the rules;
    else the first line of want that no alignment gets past."""
    got = [normalise(g, False) for g in got]
    pats = [None if w.strip() == "..." else line_regex(w) for w in want]
    memo, reached = {}, [0]

    def at(i, j):
        reached[0] = max(reached[0], i)
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(pats):
            r = j == len(got)
        elif pats[i] is None:
            r = any(at(i + 1, k) for k in range(j, len(got) + 1))
        else:
            r = j < len(got) and bool(pats[i].match(got[j])) and \
                at(i + 1, j + 1)
        memo[(i, j)] = r
        return r
    if at(0, 0):
        return None
    i = reached[0]
    return "the doc's line %d of the output, `%s`, is where it stops " \
        "matching" % (i + 1, want[i] if i < len(want) else "(the end)")


def trim(lines):
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


# ----------------------------------------------------------------------------
# Setups


def run(cmd, cwd, env, timeout=120):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True,
                           timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, "%s: %s\n" % (cmd[0], e)
    return p.returncode, p.stdout


class Setups:
    def __init__(self, args):
        self.src, self.build = args.src, args.build
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AGENT_", "OTEL_", "PL_"))}
        env["PATH"] = os.pathsep.join(
            [os.path.join(self.build, "tools"),
             os.path.join(self.build, "examples"), env.get("PATH", "")])
        self.env = env

    def path(self, *parts):
        p = os.path.join(self.build, *parts)
        if not os.path.exists(p):
            raise RuntimeError("%s is not built" % p)
        return p

    def make(self, name, work):
        """Prepare work for SETUP name: for a demo's output, the command
        whose output the block is (else None), and the environment."""
        fn = getattr(self, "setup_" + name.replace("-", "_"), None)
        if fn is None:
            raise RuntimeError("no setup '%s' (tests/doc_transcripts.py "
                               "lists them)" % name)
        argv = fn(work)
        return argv, dict(self.env, AGENT_DEMO_DIR=work) if argv \
            else self.env

    def setup_orders_deploy(self, work):
        for f in ("examples/order-plugin.so", "examples/order-plugin-v2.so",
                  "tests/plugins/order-plugin-v2-gated.so"):
            os.symlink(self.path(f), os.path.join(work, os.path.basename(f)))
        for order, crash in (("A-1", None), ("A-2", 13), ("A-3", 10)):
            cmd = [self.path("examples", "order-demo"), "--store", "orders.db",
                   "--effects", "effects", "--order", order, "--quiet",
                   "--plugin", "./order-plugin.so"]
            if crash:
                cmd += ["--crash-after", str(crash)]
            rc, out = run(cmd, work, self.env)
            if rc != (-9 if crash else 0):
                raise RuntimeError("order-demo %s: exit %d\n%s" %
                                   (order, rc, out))
        return None

    def setup_agent(self, work):
        os.symlink(self.path("examples", "agent-plugin.so"),
                   os.path.join(work, "agent-plugin.so"))
        data = self.path("examples", "agent", "data")
        shutil.copytree(data, os.path.join(work, "data"))
        with open(self.path("examples", "agent", "script.json"),
                  encoding="utf-8") as f:
            script = f.read().replace("file://" + os.path.realpath(data),
                                      "file://" + os.path.join(work, "data"))
        with open(os.path.join(work, "script.json"), "w",
                  encoding="utf-8") as f:
            f.write(script)
        return None

    def setup_build_tree(self, work):
        os.symlink(self.build, os.path.join(work, "build"))
        shutil.copytree(os.path.join(self.src, "examples"),
                        os.path.join(work, "examples"),
                        ignore=shutil.ignore_patterns("*.served"))
        return None

    def agent_story(self, work, *flags):
        return [os.path.join(self.src, "scripts", "agent-demo.sh")] + \
            list(flags) + [self.build]

    def setup_agent_story(self, work):
        return self.agent_story(work)

    def setup_agent_story_stream(self, work):
        return self.agent_story(work, "--stream")


# ----------------------------------------------------------------------------
# Checking a block


def session(lines, where):
    """[(line offset, command, [expected lines])] of a `$ ` block."""
    if not lines or not lines[0].startswith("$ "):
        raise RuntimeError("%s: a session starts with a `$ ` line" % where)
    out = []
    for n, line in enumerate(lines):
        if line.startswith("$ "):
            out.append((n, line[2:], []))
        else:
            out[-1][2].append(line)
    return out


def check_block(setups, doc, b):
    where = "%s:%d" % (doc, b["line"])
    work = tempfile.mkdtemp(prefix="doc_transcript.")
    try:
        try:
            argv, env = setups.make(b["transcript"], work)
        except (RuntimeError, OSError) as e:
            return "%s: setup %s: %s" % (where, b["transcript"], e)
        if argv:  # the block is this command's whole output
            rc, out = run(argv, work, env)
            got = trim(out.split("\n"))
            if rc:
                return "%s: `%s` exited %d:\n%s" % (where, " ".join(argv),
                                                      rc, out)
            why = mismatch(trim(b["lines"]), got)
            if why:
                return "%s: `%s` printed\n  %s\nwhere the doc shows\n  " \
                    "%s\n(%s)" % (where, " ".join(argv), "\n  ".join(got),
                                   "\n  ".join(b["lines"]), why)
            return None
        if not any(line.startswith("$ ") for line in b["lines"]):
            return "%s: setup %s runs commands: the block shows them as " \
                "`$ ` lines" % (where, b["transcript"])
        cmds = session(b["lines"], where)
        script = ""
        for _, cmd, _ in cmds:
            script += "%s\n__st=$?; printf '\\n%s %%d\\n' $__st; " \
                "(exit $__st)\n" % (cmd, END)
        rc, out = run(["sh", "-c", script], work, env)
        parts = re.split(r"\n?%s (\d+)\n" % re.escape(END), out)
        problems = []
        for n, (off, cmd, want) in enumerate(cmds):
            if 2 * n + 1 >= len(parts):
                problems.append("%s: `%s` never ended (the shell exited "
                                "%d): %s" % (where, cmd, rc, parts[-1]))
                break
            text, status = parts[2 * n], int(parts[2 * n + 1])
            got = trim(text.split("\n")) if text else []
            shown = n + 1 < len(cmds) and cmds[n + 1][1].strip() == "echo $?"
            if status and not shown:
                problems.append("%s:%d: `%s` exited %d (no `echo $?` "
                                "after it shows that):\n  %s" %
                                (doc, b["line"] + off, cmd, status,
                                 "\n  ".join(got)))
            elif mismatch(trim(want), got):
                problems.append("%s:%d: `%s` printed\n  %s\nwhere the doc "
                                "shows\n  %s\n(%s)" %
                                (doc, b["line"] + off, cmd, "\n  ".join(got),
                                 "\n  ".join(want),
                                 mismatch(trim(want), got)))
        return "\n".join(problems) or None
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ----------------------------------------------------------------------------
# Flags


TOOL = re.compile(r"(?<![\w/.-])(?:\S*/)?(%s)(?![\w.-])|(scripts/[\w-]+\.sh)"
                  % "|".join(re.escape(p) for p in PROGRAMS))
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def uses(src):
    """(doc, line, program, flag) for every flag given to a program."""
    found = []
    for doc in DOCS:
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            text = f.read()
        # the prose's code spans, then each block's lines (a line ending
        # in `\` goes on)
        pieces, fenced = [], re.compile(r"^```.*?^```$", re.S | re.M)
        for m in fenced.finditer(text):
            body = m.group(0).replace("\\\n", " ")
            first = text.count("\n", 0, m.start()) + 1
            if not m.group(0).startswith("```c\n"):
                for n, line in enumerate(body.split("\n")):
                    pieces.append((first + n, line))
        prose = fenced.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in re.finditer(r"`([^`]+)`", prose):
            pieces.append((prose.count("\n", 0, m.start()) + 1,
                           m.group(1).replace("\n", " ")))
        for line, piece in pieces:
            tools = list(TOOL.finditer(piece))
            for n, t in enumerate(tools):
                end = tools[n + 1].start() if n + 1 < len(tools) else None
                tail = piece[t.end():end].split("#")[0]
                tail = re.sub(r"'[^']*'|\"[^\"]*\"", "", tail)
                for flag in FLAG.findall(tail):
                    found.append((doc, line, t.group(1) or t.group(2), flag))
    return found


def check_flags(args):
    texts, problems, skipped = {}, [], set()
    for doc, line, prog, flag in uses(args.src):
        prog = PASSED_ON.get(prog, prog)
        if prog not in texts:
            if prog.startswith("scripts/"):
                path = os.path.join(args.src, prog)
                texts[prog] = open(path, encoding="utf-8").read() \
                    if os.path.exists(path) else None
            else:
                exe = os.path.join(args.build, PROGRAMS[prog], prog)
                texts[prog] = None
                if os.path.exists(exe):
                    rc, out = run([exe, "--help"], None, None)
                    # --help itself is named by working
                    texts[prog] = out + (" --help" if rc == 0 else "")
        if texts[prog] is None:
            if prog.startswith("scripts/"):
                problems.append("%s:%d: no %s" % (doc, line, prog))
            skipped.add(prog)
        elif not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag),
                           texts[prog]):
            problems.append("%s:%d: %s has no %s (its %s)" %
                            (doc, line, prog, flag, "source" if
                             prog.startswith("scripts/") else "--help"))
    return problems, sorted(skipped)


def check_env(src):
    """The AGENT_* and OTEL_* variables the pages name are in the code
    (PL_* names are doc_samples.py's)."""
    code = ""
    for top in ("core", "tools", "examples", "policies", "scripts"):
        for d, _, files in os.walk(os.path.join(src, top)):
            for f in files:
                if f.endswith((".c", ".h", ".sh")):
                    with open(os.path.join(d, f), encoding="utf-8",
                              errors="replace") as h:
                        code += h.read()
    problems = []
    for doc in DOCS:
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for name in re.findall(r"\b(?:AGENT|OTEL)_[A-Z0-9_]+\b",
                                       line):
                    if not re.search(r"\b%s\b" % name, code):
                        problems.append("%s:%d: %s is read nowhere" %
                                        (doc, n, name))
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    args.src, args.build = os.path.abspath(args.src), \
        os.path.abspath(args.build)
    todo, failed, n_none = [], 0, 0
    for doc in DOCS:
        for b in blocks(args.src, doc):
            where = "%s:%d" % (doc, b["line"])
            if b["lang"] == "c" or b["output_of_sample"]:
                if b["transcript"]:
                    print("FAIL %s: a transcript comment before a C sample "
                          "or its output" % where)
                    failed += 1
                continue
            m = b["transcript"]
            if m is None:
                print("FAIL %s: a block with no <!-- transcript: SETUP --> "
                      "or <!-- transcript: none: WHY --> before it" % where)
                failed += 1
            elif re.match(r"none\b", m):
                why = m[4:].lstrip(":").strip()
                if not why:
                    print("FAIL %s: <!-- transcript: none: WHY --> says why"
                          % where)
                    failed += 1
                else:
                    print("not run %s: %s" % (where, why))
                    n_none += 1
            else:
                todo.append((doc, b))
    setups = Setups(args)
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda t: check_block(setups, *t), todo))
    for (doc, b), problem in zip(todo, results):
        where = "%s:%d" % (doc, b["line"])
        if problem:
            failed += 1
            print("FAIL %s (%s):\n%s" % (where, b["transcript"], problem))
        else:
            print("ok   %s (%s)" % (where, b["transcript"]))
    problems, skipped = check_flags(args)
    problems += check_env(args.src)
    if problems:
        failed += 1
        print("FAIL flags and variables:\n" + "\n".join(problems))
    else:
        print("ok   every --flag given to a program exists, every AGENT_ "
              "and OTEL_ variable named is read%s" %
              (" (not built, not checked: %s)" % ", ".join(skipped)
               if skipped else ""))
    print("%d transcripts run, %d not run, %d failed" %
          (len(todo), n_none, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
