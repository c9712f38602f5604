#!/usr/bin/env python3
"""Compares two lists of test names (`cargo test --workspace -- --list` output) by function name,
ignoring module prefixes and the kit's version suffix, and fails on a name the second lost.

Usage: scripts/test-names.py BEFORE AFTER [--ignore PREFIX]...

A test moved into a module (`cli::foo` for `foo`, `upstream::x::kubernetes_1_36` for
`x::kubernetes_1_36`) keeps its function name; a test deleted or renamed is reported. Names that
appear several times (the same function in two binaries) are compared by count.
"""
import collections
import re
import sys

VERSION = re.compile(r"::kubernetes_\d+_\d+$")


def names(path):
    out = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.endswith(": test") and not line.endswith(": benchmark"):
                continue
            name = line.rsplit(": ", 1)[0]
            version = VERSION.search(name)
            base = VERSION.sub("", name).rsplit("::", 1)[-1]
            out[base + (version.group(0) if version else "")] += 1
    return out


def main(argv):
    args = [a for a in argv if not a.startswith("--ignore")]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    before, after = names(args[0]), names(args[1])
    lost = {n: c - after[n] for n, c in before.items() if after[n] < c}
    new = {n: c - before[n] for n, c in after.items() if before[n] < c}
    print(f"before: {sum(before.values())} tests, after: {sum(after.values())} tests")
    for n, c in sorted(new.items()):
        print(f"new: {n}" + (f" (x{c})" if c > 1 else ""))
    for n, c in sorted(lost.items()):
        print(f"LOST: {n}" + (f" (x{c})" if c > 1 else ""))
    if lost:
        print(f"{sum(lost.values())} test(s) lost")
        return 1
    print("no test lost")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
