#!/usr/bin/env python3
"""A picture of `make bench-ir`'s numbers: reads the newest instruction-count
record (bench/results/ir-<date>.md, written by ir_report.py) and writes
bench/results/ir-chart.svg: for each target of its "Targets" table, the cost
per operation of pyxbuf's side beside its peer's (or beside its budget), as
labelled bars, with the ratio pyxbuf ÷ peer, the goal and whether it was met.

Each pair of bars is drawn to its own scale (the costs run from 30 to 155 000
instructions), so compare the bars of one pair and read the numbers across
pairs. No plotting library: the SVG is written by hand, the same record
giving the same file byte for byte.

    bench/chart.py                      # newest bench/results/ir-*.md
    bench/chart.py --input bench/results/ir-2026-11-23.md --out /tmp/x.svg
"""

import argparse
import os
import re
import sys
from xml.sax.saxutils import escape

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
RECORD_NAME = re.compile(r"^ir-(\d{4}-\d{2}-\d{2})(.*)\.md$")

# Layout (pixels).
WIDTH = 1100
LEFT = 20                  # group headers
LABEL_X = 40               # bar labels
BAR_X, BAR_MAX = 340, 460  # bars; the longest of a pair is BAR_MAX long
RATIO_X = WIDTH - 20       # right-aligned ratio column
ROW, BAR_H = 20, 13
PYXBUF_COLOUR, PEER_COLOUR = "#2f6db5", "#a3acb9"
MET_COLOUR, MISSED_COLOUR = "#1e7b34", "#b3261e"


class ChartError(Exception):
    pass


class Target:
    """One row of the record's Targets table, read as pyxbuf against a peer."""

    def __init__(self, name, what, bars, unit, ratio, goal, met):
        self.name, self.what, self.unit = name, what, unit
        self.bars = bars    # [(label, value, figure as written, is_pyxbuf)]
        self.ratio = ratio  # pyxbuf ÷ peer
        self.goal = goal    # (op, value) in pyxbuf ÷ peer terms
        self.met = met


def newest_record(directory):
    """The newest ir-<date>*.md in `directory`; of one date, the plain
    ir-<date>.md before variants such as ir-<date>-free-threading.md."""
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise ChartError(f"cannot list {directory}: {e.strerror}") from None
    found = [(m.group(1), m.group(2) != "", n) for n in names if (m := RECORD_NAME.match(n))]
    if not found:
        raise ChartError(f"no instruction-count record (ir-<date>.md) in {directory}; "
                         "run `make bench-ir` first")
    date, _, name = max(found, key=lambda f: (f[0], not f[1]))
    return os.path.join(directory, name)


def table_rows(text):
    """The cells of the rows of the table under '## Targets'."""
    lines = text.splitlines()
    try:
        start = lines.index("## Targets")
    except ValueError:
        raise ChartError("has no '## Targets' section (is it an ir_report.py record?)") from None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    if len(rows) < 2 or rows[0][:3] != ["target", "what", "figures"]:
        raise ChartError("its '## Targets' section holds no table of target, what, figures, "
                         "ratio, goal")
    return rows[1:]


def split_top(text, seps):
    """(head, tail) at the first of `seps` outside brackets, else (text, "")."""
    depth = 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            for sep in seps:
                if text.startswith(sep, i):
                    return text[:i], text[i + len(sep):]
    return text, ""


def number(text, what):
    try:
        return float(text)
    except ValueError:
        raise ChartError(f"{what}: '{text}' is not a number") from None


def bar(label, figure, what, ours):
    """A bar: its label, its value, the figure as the record wrote it."""
    return label, number(figure, what), figure, ours


def goal_of(cell, name):
    m = re.fullmatch(r"(≤|≥) ([\d.]+)", cell)
    if not m:
        raise ChartError(f"target {name}: goal '{cell}' is not '≤ x' or '≥ x'")
    return m.group(1), number(m.group(2), f"target {name}'s goal")


def read_targets(path):
    """The record's targets, each as pyxbuf's bars against its peer's."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    heading = text.splitlines()[0] if text else ""
    targets, previous = [], None
    for cells in table_rows(text):
        if len(cells) < 6:
            raise ChartError(f"row '{' | '.join(cells)}' has {len(cells)} cells, not 6")
        name, what, figures, ratio_cell, goal_cell, verdict = cells[:6]
        ratio = number(ratio_cell, f"target {name}'s ratio")
        op, goal = goal_of(goal_cell, name)
        # "left ÷ right, context"; "the same, context" repeats the row above's sides.
        if what.startswith("the same, ") and previous is not None:
            left, right = previous
        else:
            left, sep, rest = what.partition(" ÷ ")
            if not sep:
                raise ChartError(f"target {name}: '{what}' is not 'this ÷ that'")
            right, _ = split_top(rest, (", ", " ("))
            if right == "raw" and previous is not None:  # "raw" = the row above's peer
                right = previous[1]
        previous = (left, right)
        # pyxbuf's side is the left one, unless only the right one names pyxbuf.
        swapped = "pyxbuf" not in left.lower() and "pyxbuf" in right.lower()
        budget = re.fullmatch(r"a budget of ([\d.]+) (\w+)", right)
        if budget:
            items = [m.groups() for m in re.finditer(r"(\S+) ([\d.]+) (\w+)", figures)]
            if not items:
                raise ChartError(f"target {name}: figures '{figures}' name no item")
            unit = budget.group(2)
            bars = [bar(f"{left.split()[0]} '{item}'", v, f"target {name}", True)
                    for item, v, _ in items]
            bars.append(bar("budget", budget.group(1), f"target {name}'s budget", False))
        else:
            m = re.match(r"([\d.]+) / ([\d.]+) (\w+)", figures)
            if not m:
                raise ChartError(f"target {name}: figures '{figures}' are not 'a / b unit'")
            a, b, unit = m.groups()
            ours, peer = ((right, b), (left, a)) if swapped else ((left, a), (right, b))
            bars = [bar(*ours, f"target {name}", True), bar(*peer, f"target {name}", False)]
        if swapped:  # the record's ratio is peer ÷ pyxbuf
            ratio, op, goal = 1 / ratio, "≤" if op == "≥" else "≥", 1 / goal
        targets.append(Target(name, what, bars, unit, ratio, (op, goal), verdict == "met"))
    if not targets:
        raise ChartError("its Targets table is empty")
    return heading.lstrip("# ").strip(), text, targets


def ratio_text(r):
    return f"{r:.2f}×" if r >= 0.1 else f"1/{1 / r:.0f}"


def value_text(figure, unit):
    """The figure as the record wrote it, thousands grouped: '155,148 Ir'."""
    return f"{int(figure):,} {unit}" if figure.isdigit() else f"{figure} {unit}"


def shorten(label, room=42):
    """At most `room` characters, cut at a word (the header gives it whole)."""
    if len(label) <= room:
        return label
    cut = label[:room - 1].rsplit(" ", 1)[0]
    return cut + " …"


def text(x, y, s, size=12, anchor="start", weight="normal", fill="#1a1a1a"):
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" '
            f'font-weight="{weight}" fill="{fill}">{escape(s)}</text>')


def svg(title, source, record_text, targets):
    out, y = [], 30
    out.append(text(LEFT, y, f"pyxbuf against its peers: cost per operation ({title})", 16,
                    weight="bold"))
    y += 20
    made = re.search(r"^`([^`]+)` at (\w+)", record_text, re.M)
    where = f"`{made.group(1)}` at {made.group(2)}, " if made else ""
    out.append(text(LEFT, y, f"{where}from {source}: instructions per operation "
                    "(Callgrind); target 8 in wall-clock time.", 12, fill="#444"))
    y += 17
    out.append(text(LEFT, y, "Each pair of bars is drawn to its own scale: compare the bars of "
                    "one pair, and the numbers across pairs. Shorter is cheaper.", 12,
                    fill="#444"))
    y += 24
    out.append(f'<rect x="{LEFT}" y="{y - 10}" width="12" height="12" fill="{PYXBUF_COLOUR}"/>')
    out.append(text(LEFT + 18, y, "pyxbuf"))
    out.append(f'<rect x="{LEFT + 80}" y="{y - 10}" width="12" height="12" fill="{PEER_COLOUR}"/>')
    out.append(text(LEFT + 98, y, "peer (or budget)"))
    out.append(text(RATIO_X, y, "pyxbuf ÷ peer (goal)", anchor="end", weight="bold"))
    y += 12
    for t in targets:
        y += 10
        out.append(f'<line x1="{LEFT}" y1="{y}" x2="{WIDTH - 20}" y2="{y}" stroke="#ddd"/>')
        y += 18
        out.append(f'<text x="{LEFT}" y="{y}" font-size="12" fill="#1a1a1a">'
                   f'<tspan font-weight="bold">{escape(t.name)}</tspan>'
                   f'<tspan dx="10" fill="#444">{escape(t.what)}</tspan></text>')
        op, goal = t.goal
        verdict = "met" if t.met else "MISSED"
        out.append(text(RATIO_X, y + ROW, f"{ratio_text(t.ratio)} (goal {op} {ratio_text(goal)}, "
                        f"{verdict})", 13, anchor="end", weight="bold",
                        fill=MET_COLOUR if t.met else MISSED_COLOUR))
        top = max(v for _, v, _, _ in t.bars) or 1
        for label, value, figure, ours in t.bars:
            y += ROW
            width = max(1.0, BAR_MAX * value / top)
            out.append(text(LABEL_X, y, shorten(label)))
            out.append(f'<rect x="{BAR_X}" y="{y - BAR_H + 3}" width="{width:.1f}" '
                       f'height="{BAR_H}" fill="{PYXBUF_COLOUR if ours else PEER_COLOUR}"/>')
            out.append(text(BAR_X + width + 6, y, value_text(figure, t.unit)))
    height = y + 24
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, '
            'sans-serif">\n'
            f'<title>{escape("pyxbuf against its peers: " + title)}</title>\n'
            f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>\n')
    return head + "\n".join(out) + "\n</svg>\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", help="the record to draw (default: the newest "
                    "bench/results/ir-<date>.md)")
    ap.add_argument("--out", default=os.path.join(RESULTS, "ir-chart.svg"))
    args = ap.parse_args(argv)
    path = args.input
    try:
        if path is None:
            path = newest_record(RESULTS)
        title, record_text, targets = read_targets(path)
    except ChartError as e:
        sys.exit(f"chart: {path or RESULTS}: {e}")
    except OSError as e:
        sys.exit(f"chart: cannot read {path}: {e.strerror}")
    source = os.path.relpath(path, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if source.startswith(".."):
        source = os.path.basename(path)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(svg(title, source, record_text, targets))
    print(f"chart: wrote {args.out} ({len(targets)} targets from {path})")


if __name__ == "__main__":
    main()
