"""The performance page's charts, drawn from the benchmarks' own output.

    python tools/docs/charts.py                 rerun the charted benches, then draw
    python tools/docs/charts.py --only peers    rerun one of them (delegation, fanout, peers)
    python tools/docs/charts.py --render-only   draw from the stored results only

Each bench writes its figures with ``--json`` to docs/assets/bench/NAME.json (what was
measured, where and when); the charts, docs/assets/charts/*.svg, are drawn from those
files and nothing else, as plain SVG (no plotting library). tools/docs.sh redraws them
on every build (the drawing is deterministic, so an unchanged result gives the same
bytes), and ``tools/docs.sh charts`` reruns the benches first.

* peers.svg -- delegation overhead of dsh, openai-agents, pydantic-ai and Google ADK,
  measured in the same run (tools/bench/peers/bench_peers.py).
* concurrency.svg -- per-run cost at 1, 100, 1,000 and 10,000 concurrent delegations
  (tools/bench/bench_fanout.py).
* delegation.svg -- dsh's delegation overhead with in-memory sessions and with JSONL
  persistence (tools/bench/bench_delegation.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "assets" / "bench"
CHARTS = ROOT / "docs" / "assets" / "charts"
BENCHES = {
    "delegation": ["tools/bench/bench_delegation.py"],
    "fanout": ["tools/bench/bench_fanout.py"],
    "peers": ["tools/bench/peers/bench_peers.py"],
}

WIDTH = 760
FONT = "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
INK, MUTED, GRID = "#1f2330", "#5f6473", "#e3e5ec"
DSH, PEER, ACCENT = "#3f51b5", "#a3a8b8", "#e8710a"
SERIES = ["#3f51b5", "#e8710a", "#2e9d5b", "#7986cb"]


# -- a little SVG -----------------------------------------------------------------------


class Svg:
    def __init__(self, height: int, title: str) -> None:
        self.height = height
        self.parts: list[str] = [
            f'<rect x="0.5" y="0.5" width="{WIDTH - 1}" height="{height - 1}" rx="8"'
            f' fill="#ffffff" stroke="{GRID}"/>'
        ]
        self.title = title

    def text(self, x: float, y: float, text: str, **attrs: Any) -> None:
        style = {"fill": INK, "font_size": 13, **attrs}
        anchor = style.pop("anchor", "start")
        attributes = " ".join(f'{k.replace("_", "-")}="{v}"' for k, v in style.items())
        self.parts.append(
            f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {attributes}>'
            f"{escape(text)}</text>"
        )

    def rect(self, x: float, y: float, w: float, h: float, fill: str) -> None:
        self.parts.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{h:.1f}"'
            f' rx="2" fill="{fill}"/>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, **attrs: Any) -> None:
        extra = " ".join(f'{k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        self.parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
            f' stroke="{stroke}" {extra}/>'
        )

    def raw(self, element: str) -> None:
        self.parts.append(element)

    def render(self) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{self.height}"'
            f' viewBox="0 0 {WIDTH} {self.height}" font-family="{FONT}" role="img">\n'
            f"<title>{escape(self.title)}</title>\n" + "\n".join(self.parts) + "\n</svg>\n"
        )


def heading(svg: Svg, title: str, subtitle: str) -> None:
    svg.text(24, 34, title, font_size=17, font_weight=600)
    svg.text(24, 55, subtitle, fill=MUTED)


def footnote(svg: Svg, data: dict[str, Any], second: str = "") -> None:
    machine = data.get("machine", {})
    load = machine.get("load_average")
    where = (
        f"{machine.get('system', '?')}, {machine.get('cpus', '?')} cores,"
        f" {machine.get('implementation', 'Python')} {machine.get('python', '?')}"
        + (f", load {load[0]:.1f}" if load else "")
    )
    bottom = svg.height - (32 if second else 16)
    line = f"{data.get('bench', '')} · {data.get('measured_at', '')[:10]} · {where}"
    svg.text(24, bottom, line, fill=MUTED, font_size=11)
    if second:
        svg.text(24, bottom + 16, second, fill=MUTED, font_size=11)


def microseconds(value: float) -> str:
    return f"{value / 1000:,.2f} ms" if value >= 1000 else f"{value:,.0f} µs"


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is at least ``value``."""
    tops = [step * 10**power for power in range(-1, 10) for step in (1, 2, 2.5, 5)]
    return min((top for top in tops if top >= value), default=value)


# -- the charts --------------------------------------------------------------------------


def peers_chart(data: dict[str, Any]) -> str:
    frameworks = data["frameworks"]
    unavailable = data.get("unavailable", {})
    rows = len(frameworks) + len(unavailable)
    svg = Svg(100 + rows * 46 + 50, "Delegation overhead: dsh and its peers")
    heading(
        svg,
        "Delegation overhead per delegation (lower is better)",
        "turn with a child agent as the tool − turn with a constant tool; fake models"
        " answering at once; same run",
    )
    left, right = 190, WIDTH - 170

    def reach(framework: dict[str, Any]) -> float:
        return max([framework["overhead_us"], *(framework.get("overhead_per_round_us") or [])])

    top = max([reach(f) for f in frameworks] + [1])
    scale = (right - left) / nice_max(top)
    dsh = next((f["overhead_us"] for f in frameworks if f["framework"] == "dsh"), None)
    y = 84
    for framework in frameworks:
        value = framework["overhead_us"]
        ours = framework["framework"] == "dsh"
        svg.text(left - 12, y + 15, framework["framework"], anchor="end", font_weight=600)
        svg.text(left - 12, y + 31, framework["delegation"], anchor="end", fill=MUTED, font_size=11)
        svg.rect(left, y + 4, value * scale, 24, DSH if ours else PEER)
        spread = framework.get("overhead_per_round_us") or []
        if len(spread) > 1:  # the rounds' range
            low, high = min(spread) * scale + left, max(spread) * scale + left
            svg.line(low, y + 16, high, y + 16, INK, stroke_width=1.2)
            svg.line(low, y + 11, low, y + 21, INK, stroke_width=1.2)
            svg.line(high, y + 11, high, y + 21, INK, stroke_width=1.2)
        label = microseconds(value)
        if dsh and not ours:
            label += f"  ({value / dsh:,.1f}× dsh)"
        label_x = left + reach(framework) * scale + 8
        svg.text(label_x, y + 21, label, font_weight=600 if ours else 400)
        y += 46
    for name, why in unavailable.items():
        svg.text(left - 12, y + 21, name, anchor="end", font_weight=600, fill=MUTED)
        reason = why.strip().splitlines()[-1] if why.strip() else "could not run"
        svg.text(left, y + 21, f"not measured: {reason[:80]}", fill=MUTED, font_style="italic")
        y += 46
    versions = ", ".join(f["version"] for f in frameworks)
    footnote(svg, data, f"{versions}; the whiskers span the rounds' overheads")
    return svg.render()


def _line_y(points: list[tuple[float, float]], x: float) -> float | None:
    """The y of the polyline ``points`` (sorted by x) at ``x``; None outside it."""
    for (x1, y1), (x2, y2) in itertools.pairwise(points):
        if x1 <= x <= x2:
            return y1 if x2 == x1 else y1 + (y2 - y1) * (x - x1) / (x2 - x1)
    return None


def label_baseline(
    x: float, y: float, anchor: str, others: list[list[tuple[float, float]]]
) -> float:
    """Where a point's 11 px label goes: above the point, or below it when the other
    lines come closer to the label above than below (a label never sits on a line)."""
    span = {"start": (x, x + LABEL_WIDTH), "end": (x - LABEL_WIDTH, x)}.get(
        anchor, (x - LABEL_WIDTH / 2, x + LABEL_WIDTH / 2)
    )
    xs = [span[0] + (span[1] - span[0]) * i / 8 for i in range(9)]

    def clearances(baseline: float) -> list[float]:
        top, bottom = baseline - 11, baseline + 3
        gaps = []
        for line in others:
            ys = [v for v in (_line_y(line, at) for at in xs) if v is not None]
            gaps += [max(top - v, v - bottom, 0.0) for v in ys]
        return sorted(gaps) or [float("inf")]

    above, below = y - 10, y + 20
    return above if clearances(above) >= clearances(below) else below


HALO = {"stroke": "#ffffff", "stroke_width": 3, "stroke_linejoin": "round", "paint_order": "stroke"}
"""A white outline under a label's letters: a line passing near it stays behind it."""
LABEL_WIDTH = 84
"""Pixels: the width of a point label such as "69 µs · 1.03×" at 11 px, bold."""


def concurrency_chart(data: dict[str, Any]) -> str:
    scaling = data["scaling"]
    labels = {
        "on": "GC on, dsh's schedule",
        "cpython": "GC on, CPython's schedule",
        "off": "GC off",
    }
    series = [(name, scaling[name]) for name in ("on", "cpython", "off") if name in scaling]
    if not series:
        raise ValueError("fanout.json has no scaling figures")
    if all("per_run_cpu_us" in p for p in series[0][1]):  # steadier on a shared machine
        cpu = [{**p, "per_run_us": p["per_run_cpu_us"]} for p in series[0][1]]
        series.append(("cpu", cpu))
        labels["cpu"] = "CPU time, dsh's schedule"
    svg = Svg(400, "Per-run cost at 1 to 10,000 concurrent delegations")
    heading(
        svg,
        "Per-run cost by number of concurrent delegations (flat is the goal)",
        f"spawn children, instant model; {scaling.get('runs', 0):,} runs per setting,"
        f" median of {scaling.get('rounds', 1)} rounds; target ≤ 1.3× one at a time",
    )
    left, right, top, bottom = 80, WIDTH - 230, 80, 330
    points = series[0][1]
    levels = [p["concurrency"] for p in points]
    baseline = points[0]["per_run_us"]
    highest = max(p["per_run_us"] for _, rows in series for p in rows)
    y_max = nice_max(max(highest, baseline * 1.3) * 1.1)

    def y_of(value: float) -> float:
        return bottom - (bottom - top) * value / y_max

    step = (right - left) / max(1, len(levels) - 1)
    x_of = {level: left + i * step for i, level in enumerate(levels)}
    for tick in range(5):
        value = y_max * tick / 4
        svg.line(left, y_of(value), right, y_of(value), GRID)
        svg.text(
            left - 8, y_of(value) + 4, f"{value:,.0f} µs", anchor="end", fill=MUTED, font_size=11
        )
    for level, x in x_of.items():
        svg.text(x, bottom + 20, f"{level:,}", anchor="middle", fill=MUTED)
    svg.text(
        (left + right) / 2,
        bottom + 40,
        "concurrent delegations",
        anchor="middle",
        fill=MUTED,
        font_size=11,
    )
    target = baseline * 1.3
    svg.line(left, y_of(target), right, y_of(target), ACCENT, stroke_dasharray="5 4")
    legend_y = top + 10
    legend = right + 30
    svg.line(legend, legend_y, legend + 22, legend_y, ACCENT, stroke_dasharray="5 4")
    svg.text(legend + 28, legend_y + 4, "target: 1.3× one at a time", font_size=11)
    legend_y += 20
    for index, (name, rows) in enumerate(series):
        color = SERIES[index % len(SERIES)]
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{x_of[p['concurrency']]:.1f},{y_of(p['per_run_us']):.1f}"
            for i, p in enumerate(rows)
            if p["concurrency"] in x_of
        )
        width = 3 if index == 0 else 1.6
        dashes = ' stroke-dasharray="2 3"' if name == "cpu" else ""
        svg.raw(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="{width}"{dashes}/>')
        first = rows[0]["per_run_us"]
        for p in rows:
            if p["concurrency"] not in x_of:
                continue
            x, y = x_of[p["concurrency"]], y_of(p["per_run_us"])
            svg.raw(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if index == 0 else 3}" fill="{color}"/>'
            )
            if index == 0:
                edge = {levels[0]: "start", levels[-1]: "end"}
                anchor = edge.get(p["concurrency"], "middle")
                others = [
                    [(x_of[q["concurrency"]], y_of(q["per_run_us"])) for q in other]
                    for other_name, other in series
                    if other_name not in (name, "cpu")  # cpu follows this line by design
                ]
                svg.text(
                    x,
                    label_baseline(x, y, anchor, others),
                    f"{p['per_run_us']:,.0f} µs · {p['per_run_us'] / first:.2f}×",
                    anchor=anchor,
                    font_size=11,
                    font_weight=600,
                    **HALO,
                )
        svg.line(
            legend, legend_y, legend + 22, legend_y, color, stroke_width=width,
            **({"stroke_dasharray": "2 3"} if name == "cpu" else {}),
        )  # fmt: skip
        svg.text(legend + 28, legend_y + 4, labels.get(name, name), font_size=11)
        legend_y += 20
    side = []  # the same run's other figures
    for memory in data.get("memory", []):
        side.append(f"{memory['kib_per_delegation']:.1f} KiB per delegation")
        side.append(f"  with {memory['alive']:,} alive at once")
    if "wall" in data:
        wall = data["wall"]
        side.append(f"{wall['elapsed_s']:.3f} s for {wall['children']:,} children")
        side.append(f"  whose model takes {wall['model_delay_s'] * 1000:.0f} ms")
    legend_y += 16
    for row in side:
        svg.text(
            legend,
            legend_y,
            row.strip(),
            fill=INK if not row.startswith(" ") else MUTED,
            font_size=11,
        )
        legend_y += 16
    footnote(svg, data)
    return svg.render()


def delegation_chart(data: dict[str, Any]) -> str:
    modes = [("in_memory", "in-memory sessions"), ("jsonl", "JSONL persistence")]
    modes = [(key, label) for key, label in modes if key in data]
    svg = Svg(100 + len(modes) * 92 + 20, "dsh delegation overhead")
    heading(
        svg,
        "dsh: a parent's turn with one spawn delegation vs a constant tool",
        "the subagent tool on the spawn provider; the child's scripted model answers at once",
    )
    left, right = 190, WIDTH - 190
    top = max(data[key]["turn_with_delegation_us"] for key, _ in modes)
    scale = (right - left) / nice_max(top)
    y = 84
    for key, label in modes:
        figures = data[key]
        svg.text(left - 12, y + 30, label, anchor="end", font_weight=600)
        constant = figures["turn_with_constant_tool_us"]
        delegating = figures["turn_with_delegation_us"]
        svg.rect(left, y + 4, constant * scale, 22, PEER)
        svg.text(
            left + constant * scale + 8,
            y + 20,
            f"constant tool {microseconds(constant)}",
            fill=MUTED,
            font_size=12,
        )
        svg.rect(left, y + 32, constant * scale, 22, PEER)
        svg.rect(left + constant * scale, y + 32, (delegating - constant) * scale, 22, DSH)
        svg.text(
            left + delegating * scale + 8,
            y + 48,
            f"delegation {microseconds(delegating)}: +{microseconds(figures['overhead_us'])}",
            font_weight=600,
            font_size=12,
        )
        y += 92
    footnote(svg, data)
    return svg.render()


CHART_MAKERS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "peers": ("peers.svg", peers_chart),
    "fanout": ("concurrency.svg", concurrency_chart),
    "delegation": ("delegation.svg", delegation_chart),
}


def render(names: list[str]) -> int:
    CHARTS.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in names:
        chart, make = CHART_MAKERS[name]
        source = RESULTS / f"{name}.json"
        if not source.exists():
            print(
                f"charts: no {source.relative_to(ROOT)}: run tools/docs.sh charts", file=sys.stderr
            )
            status = 1
            continue
        svg = make(json.loads(source.read_text(encoding="utf-8")))
        target = CHARTS / chart
        if not target.exists() or target.read_text(encoding="utf-8") != svg:
            target.write_text(svg, encoding="utf-8")
            print(f"charts: drew {target.relative_to(ROOT)}", file=sys.stderr)
    return status


def rerun(name: str) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, *BENCHES[name], "--json", str(RESULTS / f"{name}.json")]
    print(f"charts: {' '.join(command[1:])}", file=sys.stderr)
    subprocess.run(command, cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--render-only", action="store_true", help="draw from stored results")
    parser.add_argument("--only", choices=sorted(BENCHES), action="append", help="repeatable")
    args = parser.parse_args(argv)
    names = args.only or sorted(BENCHES)
    if not args.render_only:
        for name in names:
            rerun(name)
    return render(names)


if __name__ == "__main__":
    sys.exit(main())
