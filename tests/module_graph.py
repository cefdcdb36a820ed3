#!/usr/bin/env python3
"""Fails (exit 1) when the top-level modules of src/ import each other in a circle.

A module is a top-level file or folder of src/ (`config/` and everything under it is `config`).
Module A depends on B when a file of A names `crate::B` (also inside `use crate::{B, ...}` and in
doc comments: a contract that points at `crate::B` is a dependency in the reader's eyes). Unit
test tails (`#[cfg(test)] mod tests` to the end of a file) do not count. Usage:
`python3 tests/module_graph.py [src]`; prints each circle with the files behind every arrow.
"""

import collections
import os
import re
import sys


def edges_of(root):
    edges = collections.defaultdict(lambda: collections.defaultdict(set))
    modules = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            module = rel.split("/")[0].removesuffix(".rs")
            modules.add(module)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            cut = text.find("#[cfg(test)]\nmod tests")
            if cut >= 0:
                text = text[:cut]
            named = set(re.findall(r"crate::(\w+)", text))
            for group in re.findall(r"crate::\{([^}]*)\}", text):
                named.update(re.findall(r"(?:^|[,\s{])(\w+)(?:::|\s*[,}]|$)", group))
            for target in named - {module, "self"}:
                edges[module][target].add(rel)
    return modules, edges


def circles(modules, edges):
    """Tarjan's strongly connected components with more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "src"
    modules, edges = edges_of(root)
    found = circles(modules, edges)
    for component in found:
        print("CYCLE:", component)
        for a in component:
            for b in component:
                if b in edges[a]:
                    print(f"  {a} -> {b}: {sorted(edges[a][b])[:4]}")
    if found:
        sys.exit(1)
    print(f"module graph: {len(modules)} top-level modules, no circle")


if __name__ == "__main__":
    main()
