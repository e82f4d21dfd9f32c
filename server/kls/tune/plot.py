"""The tune plot as a self-contained SVG: no plotting library needed, viewable in any browser,
in VS Code and on code hosts, and small enough to commit.

One panel per shape: each verified stage-1 candidate as a dot (TFLOP/s), grouped and coloured by
op family (kernel schedule / epilogue); a ring on the stage-2 best (with its runtime variables);
cuBLAS's TFLOP/s measured in the same run as a line for each stage: dashed with the short
stage-1 timing the dots had, solid with the stage-2 timing the ring had (a short timing runs
at higher clocks, so each mark is read against its own line).
"""

from __future__ import annotations

import math
from html import escape

from kls.tune.results import TuneResult, flops, vars_text

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
    "#17becf", "#d62728", "#393b79", "#637939",
)  # fmt: skip
CUBLAS = {1: "#f08080", 2: "#d62728"}  # the stage-1 and stage-2 bars
PANEL_W, PANEL_H = 300, 210
PAD_L, PAD_R, PAD_T, PAD_B = 46, 10, 28, 18


def svg(result: TuneResult) -> str:
    ops = {b.unit: b for b in result.builds}
    families = sorted({b.family for b in result.builds if b.ok})
    color = {f: PALETTE[i % len(PALETTE)] for i, f in enumerate(families)}
    shapes = result.shapes
    cols = min(4, max(1, len(shapes)))
    rows = math.ceil(len(shapes) / cols)
    legend_h = 22 * math.ceil((len(families) + 3) / 4) + 10
    width, height = cols * PANEL_W + 20, rows * PANEL_H + 50 + legend_h
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(_title(result))}</text>',
    ]
    bars = {stage: result.cublas_ms(stage) for stage in (1, 2)}
    best = {b.shape: b for b in result.best}
    for i, shape in enumerate(shapes):
        x0 = 10 + (i % cols) * PANEL_W
        y0 = 34 + (i // cols) * PANEL_H
        points = [
            m
            for m in result.measurements
            if m.shape == shape and m.stage == 1 and m.ok and m.tflops
        ]
        points.sort(key=lambda m: (ops[m.unit].family if m.unit in ops else "", -(m.tflops or 0)))
        lines = {
            stage: flops(shape) / (bar[shape] * 1e-3) / 1e12
            for stage, bar in bars.items()
            if shape in bar
        }
        top = best.get(shape)
        values = (
            [m.tflops or 0.0 for m in points]
            + list(lines.values())
            + [top.tflops or 0.0 if top else 0]
        )
        ymax = _nice(max(values) if values else 1.0)
        pw, ph = PANEL_W - PAD_L - PAD_R, PANEL_H - PAD_T - PAD_B

        def y(v: float, y0: int = y0, ph: int = ph, ymax: float = ymax) -> float:
            return y0 + PAD_T + ph - v / ymax * ph

        out.append(
            f'<rect x="{x0 + PAD_L}" y="{y0 + PAD_T}" width="{pw}" height="{ph}" '
            'fill="none" stroke="#ccc"/>'
        )
        out.append(f'<text x="{x0 + PAD_L}" y="{y0 + PAD_T - 6}" font-size="11">{shape}</text>')
        for t in range(5):
            v = ymax * t / 4
            out.append(
                f'<text x="{x0 + PAD_L - 4}" y="{y(v) + 3:.1f}" text-anchor="end">{v:.0f}</text>'
            )
        n = max(1, len(points))
        for j, m in enumerate(points):
            fam = ops[m.unit].family if m.unit in ops else ""
            cx = x0 + PAD_L + (j + 0.5) * pw / n
            out.append(
                f'<circle cx="{cx:.1f}" cy="{y(m.tflops or 0):.1f}" r="2.6" '
                f'fill="{color.get(fam, "#000")}"><title>{escape(_label(result, m.unit))} '
                f"{m.tflops:.0f} TFLOP/s</title></circle>"
            )
        for stage, tflops in lines.items():
            dash = ' stroke-dasharray="4 3"' if stage == 1 else ""
            out.append(
                f'<line x1="{x0 + PAD_L}" x2="{x0 + PAD_L + pw}" y1="{y(tflops):.1f}" '
                f'y2="{y(tflops):.1f}" stroke="{CUBLAS[stage]}"{dash}/>'
            )
            left = stage == 1  # the two labels at either end, so they never overlap
            out.append(
                f'<text x="{x0 + PAD_L + (2 if left else pw - 2)}" y="{y(tflops) - 3:.1f}" '
                f'text-anchor="{"start" if left else "end"}" fill="{CUBLAS[stage]}">'
                f"cuBLAS {tflops:.0f}</text>"
            )
        if top is not None and top.tflops and top.unit:
            fam = ops[top.unit].family if top.unit in ops else ""
            at = next((k for k, m in enumerate(points) if m.unit == top.unit), None)
            cx = x0 + PAD_L + ((at + 0.5) * pw / n if at is not None else pw - 8)
            ratio = f" {top.vs_cublas:.2f}x" if top.vs_cublas else ""
            out.append(
                f'<circle cx="{cx:.1f}" cy="{y(top.tflops):.1f}" r="6" fill="none" '
                f'stroke="{color.get(fam, "#000")}" stroke-width="2"><title>best: '
                f"{escape(_label(result, top.unit))} ({escape(vars_text(top.vars))}) "
                f"{top.tflops:.0f} TFLOP/s</title></circle>"
            )
            out.append(
                f'<text x="{x0 + PAD_L + 4}" y="{y0 + PAD_T + 12}">best {top.tflops:.0f}'
                f"{ratio} ({escape(vars_text(top.vars))})</text>"
            )
    ly = 34 + rows * PANEL_H + 8
    entries = [(f, color[f], "dot") for f in families]
    entries += [
        ("cuBLAS, stage-1 timing (dots)", CUBLAS[1], "dash"),
        ("cuBLAS, stage-2 timing (ring)", CUBLAS[2], "line"),
        ("stage-2 best", "#000", "ring"),
    ]
    for k, (label, col, kind) in enumerate(entries):
        lx = 14 + (k % 4) * ((width - 20) // 4)
        yy = ly + (k // 4) * 22
        if kind == "dot":
            out.append(f'<circle cx="{lx + 5}" cy="{yy}" r="4" fill="{col}"/>')
        elif kind in ("dash", "line"):
            dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
            out.append(f'<line x1="{lx}" x2="{lx + 12}" y1="{yy}" y2="{yy}" stroke="{col}"{dash}/>')
        else:
            out.append(f'<circle cx="{lx + 5}" cy="{yy}" r="5" fill="none" stroke="{col}"/>')
        out.append(f'<text x="{lx + 16}" y="{yy + 3}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _title(result: TuneResult) -> str:
    device = result.device.get("name", "")
    return f"kls tune {result.instance}: TFLOP/s of each verified candidate (stage 1) vs cuBLAS" + (
        f" on {device}" if device else ""
    )


def _label(result: TuneResult, unit: str) -> str:
    b = next((b for b in result.builds if b.unit == unit), None)
    return f"{b.tile} {b.family}" if b else unit


def _nice(v: float) -> float:
    if v <= 0:
        return 1.0
    step = 10.0 ** math.floor(math.log10(v))
    for mult in (1.0, 2.0, 2.5, 5.0, 10.0):
        if v <= mult * step:
            return float(mult * step)
    return float(10 * step)
