"""The figures' shared look: stage and method colours, hatches, labels and matplotlib settings.

Colours are Okabe-Ito: distinguishable with the common colour-vision deficiencies and in greyscale.
"""

from __future__ import annotations

from contracts.stages import STAGES

# "t_client_encode" -> "client encode"; communication is spelled out
STAGE_LABELS = {s: s.removeprefix("t_").replace("_", " ").replace("comm", "communication") for s in STAGES}
# in stage order
STAGE_COLORS = dict(
    zip(STAGES, ("#E69F00", "#56B4E9", "#009E73", "#0072B2", "#F0E442", "#D55E00"), strict=True)
)
OTHER_COLOR = "#BBBBBB"
# an undecided cell (not significant), the same in every decision figure
UNDECIDED_COLOR = "#FEE08B"
UNDECIDED_LABEL = "undecided (not significant)"
METHOD_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
# line hatches only: dot and circle hatches make multi-megabyte SVGs and slow renders
HATCHES = ["", "///", "\\\\\\", "xxx", "---", "|||", "+++", "//--"]
# matplotlib rc settings every figure is drawn with
STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "svg.hashsalt": "offload-analysis",
    "hatch.linewidth": 0.6,
}


def method_styles(methods: list[str]) -> dict[str, dict]:
    """A fixed colour and hatch per method, by its position in the run's method order."""
    return {
        m: {"color": METHOD_COLORS[i % len(METHOD_COLORS)], "hatch": HATCHES[i % len(HATCHES)]}
        for i, m in enumerate(methods)
    }


def rate_label(rate: float) -> str:
    return f"{rate:g}"
