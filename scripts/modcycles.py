#!/usr/bin/env python3
"""Finds cycles between sibling modules of each crate in crates/*/src and src/.

A module's uses of `crate::a::b` or `super::x` are edges to the module that holds the item. An edge
between a module and its own ancestor is not counted (a parent declares its children and a child
may use its parent's items); any other edge is lifted to the two siblings under their nearest common
ancestor, and a cycle among siblings is reported. Exit 1 when there is one.

    scripts/modcycles.py [ROOT]
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text):
    """Removes // and /* */ comments and the contents of string literals (roughly)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            i += len(m.group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = tree.strip()
    if not tree:
        return []
    depth = 0
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                prefix = tree[:k]
                inner = tree[k + 1:tree.rindex("}")]
                parts, d, start = [], 0, 0
                for m, c2 in enumerate(inner):
                    if c2 == "{":
                        d += 1
                    elif c2 == "}":
                        d -= 1
                    elif c2 == "," and d == 0:
                        parts.append(inner[start:m])
                        start = m + 1
                parts.append(inner[start:])
                res = []
                for p in parts:
                    p = p.strip()
                    if not p:
                        continue
                    if p == "self":
                        res.append(prefix.rstrip(":"))
                    else:
                        res.extend(prefix + e for e in expand_use(p))
                return res
            depth += 1
    return [tree.split(" as ")[0].strip()]


class Crate:
    def __init__(self, name, src):
        self.name, self.src = name, src
        self.modules = {}  # path tuple -> file
        root = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.walk((), os.path.join(src, root), src)

    def walk(self, path, file, dirpath):
        self.modules[path] = file
        text = strip_comments(open(file, encoding="utf-8").read())
        for m in re.finditer(r"(?m)^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            name = m.group(1)
            sub = os.path.join(dirpath, name)
            for cand in (sub + ".rs", os.path.join(sub, "mod.rs")):
                if os.path.exists(cand):
                    self.walk(path + (name,), cand, sub)
                    break

    def resolve(self, here, ref):
        """The module holding `ref` (a path as written in module `here`), or None."""
        parts = [p for p in ref.split("::") if p]
        if not parts:
            return None
        if parts[0] == "crate":
            base, parts = (), parts[1:]
        elif parts[0] in ("super", "self"):
            base = here
            while parts and parts[0] in ("super", "self"):
                if parts[0] == "super":
                    base = base[:-1]
                parts = parts[1:]
        else:
            return None
        mod = base
        for p in parts:
            if mod + (p,) in self.modules:
                mod = mod + (p,)
            else:
                break
        return mod

    def edges(self):
        out = {}
        for path, file in self.modules.items():
            text = strip_comments(open(file, encoding="utf-8").read())
            refs = []
            for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
                refs.extend(expand_use(re.sub(r"\s+", " ", m.group(1))))
            for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super)(?:::" + IDENT + ")+)", text):
                refs.append(m.group(1))
            for r in refs:
                tgt = self.resolve(path, r)
                if tgt is None or tgt == path:
                    continue
                out.setdefault(path, {}).setdefault(tgt, r)
        return out


def cycles(crate):
    graph = {}  # parent -> {child_a: {child_b: example}}
    for a, targets in crate.edges().items():
        for b, ref in targets.items():
            if a[:len(b)] == b or b[:len(a)] == a:
                continue  # ancestor edge
            k = 0
            while a[k] == b[k]:
                k += 1
            parent = a[:k]
            sa, sb = a[:k + 1], b[:k + 1]
            graph.setdefault(parent, {}).setdefault(sa, {}).setdefault(sb, (a, ref))
    found = []
    for parent, g in sorted(graph.items()):
        index, low, stack, on, sccs = {}, {}, [], set(), []

        def strong(v):
            index[v] = low[v] = len(index)
            stack.append(v)
            on.add(v)
            for w in g.get(v, {}):
                if w not in index:
                    strong(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    sccs.append(sorted(comp))

        for v in sorted(g):
            if v not in index:
                strong(v)
        for comp in sccs:
            lines = []
            for v in comp:
                for w, (src, ref) in sorted(g.get(v, {}).items()):
                    if w in comp:
                        lines.append(f"    {'::'.join(v) or 'crate'} -> {'::'.join(w)}  ({'::'.join(src) or 'crate'}: {ref})")
            found.append((parent, comp, lines))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    crates = []
    cdir = os.path.join(root, "crates")
    for name in sorted(os.listdir(cdir)):
        if os.path.isdir(os.path.join(cdir, name, "src")):
            crates.append(Crate(name, os.path.join(cdir, name, "src")))
    if os.path.isdir(os.path.join(root, "src")):
        crates.append(Crate("dranet", os.path.join(root, "src")))
    bad = 0
    for c in crates:
        for parent, comp, lines in cycles(c):
            bad += 1
            where = "::".join(parent) or "crate root"
            print(f"{c.name}: cycle under {where}: {' <-> '.join('::'.join(m) for m in comp)}")
            print("\n".join(lines))
    total = sum(len(c.modules) for c in crates)
    print(f"modcycles: {bad} cycle(s) among {total} modules of {len(crates)} crates")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.setrecursionlimit(10000)
    sys.exit(main())
