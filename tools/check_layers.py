#!/usr/bin/env python3
"""make check-layers: every arrow in the C core points down.

c/LAYERS declares the layers, bottom first, and what belongs to each: a
folder under c/ (`base/`: every source and private header in it) or one file
(`acquire.c`). An arrow is a call (an object's undefined symbol that
another object of the library defines, read with `nm`) or a private include
(`#include "layer/x.h"` of a header under c/). An arrow is allowed when it runs to a
lower layer, or within a layer without closing a loop there. Every other arrow
fails the check with its file pair and the symbol or header that ties them.

An arrow being removed may be listed, once, in a `known:` line of c/LAYERS
(there are none today: issue 26 removed the circle the core had): a known
arrow is reported, not failed; an arrow that is not known fails; a known
arrow that is gone fails too, so the list only ever shrinks and always tells
the truth.

Usage: check_layers.py --objects DIR [--layers c/LAYERS] [--sources c]
"""

import argparse
import pathlib
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(path):
    """({folder/ or file: (layer index, layer name)}, known arrows as
    (from, to, what))."""
    order, layer_of, known = [], {}, set()
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        head, _, rest = line.partition(":")
        head = head.strip()
        if head == "known":
            parts = rest.split()
            if len(parts) != 4 or parts[1] != "->":
                sys.exit(f"{path}:{number}: write a known arrow as "
                         "'known: from.c -> to.c symbol_or_header' (paths under c/)")
            known.add((parts[0], parts[2], parts[3]))
            continue
        if not rest.strip() or head in order:
            sys.exit(f"{path}:{number}: write each layer once, as "
                     "'name: folder/ file.c ...'")
        order.append(head)
        for name in rest.split():
            if name in layer_of:
                sys.exit(f"{path}:{number}: {name} is in two layers")
            layer_of[name] = (len(order) - 1, head)
    return layer_of, known


def place(files, members):
    """{file: (layer index, layer name)} for each file a member names (the file
    itself, or a folder holding it); files no member names are left out."""
    placed = {}
    for f in files:
        for member, layer in members.items():
            if f == member or (member.endswith("/") and f.startswith(member)):
                placed[f] = layer
    return placed


def nm(obj, *flags):
    out = subprocess.run(["nm", *flags, str(obj)], check=True, capture_output=True, text=True)
    return [line.split()[-1] for line in out.stdout.splitlines() if line.strip()]


def call_arrows(objects, sources):
    """(from.c, to.c, symbol) for every symbol one object uses and another
    object of the library defines. Objects of sources that are gone (a build
    directory keeps them after a file is split) are skipped."""
    defined, used = {}, {}
    for obj in sorted(objects.rglob("*.c.o")):
        source = obj.relative_to(objects).as_posix()[:-2]  # base/x.c.o -> base/x.c
        if not (sources / source).exists():
            continue
        for symbol in nm(obj, "--defined-only", "-g"):
            defined[symbol] = source
        used[source] = set(nm(obj, "-u"))
    if not defined:
        sys.exit(f"check-layers: no objects in {objects}; build first (make build)")
    arrows = set()
    for source, symbols in used.items():
        for symbol in symbols:
            target = defined.get(symbol)
            if target is not None and target != source:
                arrows.add((source, target, symbol))
    return arrows, set(used)


def include_arrows(sources):
    """(file, header, header) for every private include in the library's
    sources and headers (paths relative to c/, which is the include root; the
    C tests and fuzzers are not the library)."""
    arrows = set()
    for path in sorted(list(sources.rglob("*.c")) + list(sources.rglob("*.h"))):
        name = path.relative_to(sources).as_posix()
        if name.split("/")[0] in ("tests", "fuzz"):
            continue
        for header in INCLUDE.findall(path.read_text()):
            if (sources / header).exists():
                arrows.add((name, header, header))
    return arrows


def loops_within(arrows, layer_of):
    """Arrows inside one layer that lie on a loop of that layer."""
    graph = {}
    for a, b, _ in arrows:
        if layer_of[a][0] == layer_of[b][0]:
            graph.setdefault(a, set()).add(b)

    def reaches(start, goal):
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False

    return {(a, b, w) for a, b, w in arrows
            if layer_of[a][0] == layer_of[b][0] and reaches(b, a)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", required=True, type=pathlib.Path,
                        help="the library's object files (x.c.o), e.g. "
                             "build/CMakeFiles/pyxbuf_static.dir/c")
    parser.add_argument("--layers", type=pathlib.Path, default=pathlib.Path("c/LAYERS"))
    parser.add_argument("--sources", type=pathlib.Path, default=pathlib.Path("c"))
    args = parser.parse_args()

    members, known = read_layers(args.layers)
    calls, compiled = call_arrows(args.objects, args.sources)
    arrows = calls | include_arrows(args.sources)
    files = sorted({f for a, b, _ in arrows for f in (a, b)} | compiled)
    layer_of = place(files, members)
    unplaced = [f for f in files if f not in layer_of]
    if unplaced:
        sys.exit(f"check-layers: {', '.join(unplaced)} in no layer of {args.layers}; add each "
                 "to the layer it belongs to")

    upward = {(a, b, w) for a, b, w in arrows if layer_of[b][0] > layer_of[a][0]}
    wrong = upward | loops_within(arrows, layer_of)
    new = sorted(wrong - known)
    gone = sorted(known - wrong)
    still = sorted(wrong & known)

    def show(a, b, w):
        why = "up" if layer_of[b][0] > layer_of[a][0] else "a loop in"
        return (f"  {a} ({layer_of[a][1]}) -> {b} ({layer_of[b][1]}): {w} runs {why} "
                f"{'layer ' + layer_of[b][1] if why == 'up' else 'layer ' + layer_of[a][1]}")

    print(f"check-layers: {len(arrows)} arrows between {len(layer_of)} files in "
          f"{len({l for _, l in layer_of.values()})} layers; {len(still)} known arrows "
          f"(listed as exceptions in {args.layers})")
    if new:
        print(f"check-layers: {len(new)} arrow(s) run up or close a loop; call down instead "
              "(inline downward, or report by return value):")
        for arrow in new:
            print(show(*arrow))
    if gone:
        print(f"check-layers: {len(gone)} known arrow(s) no longer exist; delete their "
              "'known:' lines from c/LAYERS:")
        for a, b, w in gone:
            print(f"  known: {a} -> {b} {w}")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
