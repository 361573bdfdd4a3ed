#!/usr/bin/env python3
"""release_units.py FULL MIN: compiles, in the configured Release tree
FULL (Unix Makefiles), each translation unit the Release tree MIN does not
compile as FULL would, and fails on the first that does not compile
(warnings are errors).

A unit of FULL is compiled as MIN would compile it when MIN has a unit of
the same file whose command is the same but for the PL_WITH_* switches and
the include folders, and whose preprocessed text is the same byte for byte:
the compiler is then given the same program with the same options, and
warns the same.  Everything else (the PostgreSQL store, what speaks HTTP,
ledger-web, the benchmark, the files that test a switch) is compiled here.
Objects only: the tree is not linked (the default tree links them)."""
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def units(tree):
    with open(os.path.join(tree, "compile_commands.json")) as f:
        return json.load(f)


def args(entry):
    """The command, without its -o OUTPUT and -c."""
    a = shlex.split(entry["command"])
    i = a.index("-o")
    del a[i:i + 2]
    return [x for x in a if x != "-c"]


def options(a):
    """The command but for the switches and include folders."""
    out, skip = [], False
    for x in a:
        if skip:
            skip = False
        elif x in ("-isystem", "-I"):
            skip = True
        elif not x.startswith(("-DPL_WITH_", "-I")):
            out.append(x)
    return tuple(out)


def preprocessed(entry):
    r = subprocess.run(args(entry) + ["-E", "-P"], cwd=entry["directory"],
                       capture_output=True)
    return r.stdout if r.returncode == 0 else None


def main():
    full, mini = sys.argv[1:3]
    there = {}
    for e in units(mini):
        there.setdefault(e["file"], []).append(e)
    if not there:
        sys.exit("release_units: %s compiles nothing" % mini)
    todo, same = [], 0
    for e in units(full):
        mine = options(args(e))
        cands = [m for m in there.get(e["file"], [])
                 if options(args(m)) == mine]
        text = preprocessed(e) if cands else None
        if text is not None and any(preprocessed(m) == text for m in cands):
            same += 1
        else:
            todo.append(e)

    def make(e):
        a = shlex.split(e["command"])
        obj = os.path.relpath(
            os.path.join(e["directory"], a[a.index("-o") + 1]), full)
        rules = os.path.join(obj[:obj.index(".dir/") + 4], "build.make")
        return subprocess.run(["make", "-s", "-f", rules, obj], cwd=full,
                              capture_output=True, text=True), obj

    failed = 0
    with ThreadPoolExecutor(2) as pool:
        for r, obj in pool.map(make, todo):
            if r.returncode != 0:
                failed += 1
                print("FAIL: %s\n%s%s" % (obj, r.stdout, r.stderr))
    if failed:
        sys.exit("release_units: %d of %d units fail to compile" %
                 (failed, len(todo)))
    print("ok: Release build of the %d units the minimal tree does not "
          "compile as this one would (it compiles the other %d)" %
          (len(todo), same))


if __name__ == "__main__":
    main()
