"""The paper's quantitative statements (section III of "The Effect of Data Marshalling on Computation
Offloading Decisions") as checks on a run's cells: one row per statement, with the paper's figure,
the measured one (with its 95% CI where it is a number), the tolerance, whether it holds, its role
(`held out`, `fit` or `the paper's anomaly`, below) and, where its words admit two readings, the
reading it is judged by.

The statements are numbered as the reproduction issue lists them (docs/device-emulation.md, "The
paper's devices"). The same checks judge a model's cells (`scripts/paper_model.py`, no noise) and a
measured run's (`analysis.cells.cell_table`): one implementation for both (the judges, the
verdicts and the CIs are in `analysis.paper_judges`).

Each statement has a role, decided before any run judged it (issue 45), and the score counts one role
only: `held out` (17 statements: the device profiles were not derived from them, so they validate
the profiles; the score is how many hold, over all 17, measured or not), `fit` (6: the profiles were
derived from them, so they check the emulation, not the profiles) and `the paper's anomaly` (14, 15,
17: the paper's own account of an abnormal stretch of its RAW runs, "due to the anomaly described
above", "the abnormal behavior continued": 14 and 17 cannot hold beside 19 and 22 on any device
whose stages grow with the data, and 15 beside fit 16 only on a server 1.6 times slower per flop at
800 than at 1200), so they are measured and reported but not scored. A statement whose words admit
two readings carries the one it is judged by and why (`reading`), printed beside its verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from analysis.paper_judges import (
    GAP_REL,
    HOLDS,
    NOT_MEASURED,
    RATIO_POINTS,
    UNDECIDED_VERDICT,
    Cells,
    NotMeasured,
    Verdict,
    all_zero,
    border_falls,
    close_behind,
    gap,
    gap_between,
    marshalling_at,
    offloads_at,
    ordering,
    other_marshalling,
    practically_never,
    ratio_constant,
    raw_half_of_json,
    raw_lowest,
    same_vectors,
    to_json_at,
    ujson_first_at_600,
    unchanged,
)

# a statement's role (the `use` column): which statements are which is set in STATEMENTS, once
HELD_OUT = "held out"  # the profiles were not derived from it: it validates them, and is scored
FIT = "fit"  # paper-p4 and paper-i3 were derived from it (their files say how; 7 and 16: RAW's figure)
ANOMALY = "the paper's anomaly"  # the paper's account of its own abnormal runs: reported, not scored
ROLES = (HELD_OUT, FIT, ANOMALY)


@dataclass(frozen=True)
class Statement:
    number: int
    text: str
    paper: str  # the paper's figure, as it states it
    tolerance: str
    judge: Callable[[Cells], Verdict]
    role: str  # HELD_OUT, FIT or ANOMALY
    reading: str = ""  # for words that admit two readings: the one judged, and why it and not the other

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"statement {self.number}: role {self.role!r} is not one of {ROLES}")


DECISIONS = "decisions exact"
RATIO = f"within {RATIO_POINTS * 100:.0f} points"
GAP = f"within {GAP_REL:.0%}"
# readings shared by several statements (each said once, here)
FASTEST = (
    "read at the fastest rate (100 Mbit/s), not as the largest share over the rates (that is at 10 "
    "Mbit/s, where the wire is most of it): the profiles were fitted to 7's and 16's figures there, so "
    "every marshalling figure (7, 15, 16) is read where they were"
)
PENALTY_GAP = (
    "the difference of two cumulative penalties, each the signed remote-less-local time summed over all "
    "six rates (the paper: penalties are 'the difference between the remote and local completion times', "
    "summed 'along all bandwidths'), not over the wrongly decided cells alone: the local time cancels, "
    "so the gap does not jump when a cell crosses the border"
)
STATEMENTS = (
    Statement(1, "inv and log: every decision vector zero, every size and rate", "all zero", DECISIONS, all_zero,
              HELD_OUT),
    Statement(2, "inv and log: marshalling-to-completion 90-99%", "90%-99%", RATIO, other_marshalling, HELD_OUT,
              "every inv and log cell, at every size, rate and method ('for all cases in this subset'), not a "
              "typical cell: the paper exempts none"),
    Statement(3, "inv and log: RAW's completion as low as 25% of JSON's", "25%", RATIO, raw_lowest, HELD_OUT,
              "the lowest RAW-to-JSON completion ratio over every inv and log cell: 'as low as' names the "
              "extreme, not a typical value"),
    Statement(4, "inv and log: method-to-JSON ratio about constant across sizes, varying with the rate",
              "constant across sizes", "spread across sizes <= 10 points, less than across rates", ratio_constant,
              HELD_OUT,
              "'rather constant' as a spread across sizes of at most 10 points at any one rate, and 'changes "
              "based on the bandwidth' as moving more across rates than across sizes, for uJSON and RAW each"),
    Statement(5, "mul 400: remote above local in practically every cell", "practically every", "at least 8 in 9",
              practically_never, HELD_OUT,
              "'practically all cases' as all but at most one in nine of the 18 cells, and 'above' as the "
              "decision (not offloading), as Fig. 4-(a)'s bars are read against the local line, not as a "
              "significant difference"),
    Statement(6, "mul 400: RAW offloads at exactly one rate", "1 of 6", DECISIONS, offloads_at(400, "raw", 1), FIT,
              "'one case where offloading is convenient' as exactly one rate of six, Fig. 5's count"),
    Statement(7, "mul 400: marshalling-to-completion up to 72% (RAW), 82% (uJSON), 90% (JSON), fastest rate",
              "raw 72%, ujson 82%, json 90%", RATIO, marshalling_at(400, {"raw": 0.72, "ujson": 0.82, "json": 0.90}),
              FIT, f"'up to' {FASTEST}"),
    Statement(8, "mul 400: RAW-to-JSON completion about 50%, every rate", "about 50%", "40%-60%", raw_half_of_json,
              HELD_OUT,
              "every rate's ratio ('for all cases at this matrix size'), 'around 50%' as 40-60%: 'twice as "
              "fast' rounds"),
    Statement(9, "mul 400: RAW's cumulative penalty below JSON's", "3.34 s", GAP, gap(400, "json", 3.34), HELD_OUT,
              PENALTY_GAP),
    Statement(10, "mul 500: RAW offloads at four of six rates", "4 of 6", DECISIONS, offloads_at(500, "raw", 4), FIT,
              "'the data method' as RAW data (the paragraph's subject), at exactly four rates"),
    Statement(11, "mul 600: uJSON's first offloading rate (none at 400 and 500)", "first at 600", DECISIONS,
              ujson_first_at_600, FIT,
              "'finally has a case' as at least one offloading rate at 600 and none at 400 or 500, not as "
              "exactly one"),
    Statement(12, "mul 600: RAW-JSON penalty gap", "10.11 s", GAP, gap(600, "json", 10.11), HELD_OUT, PENALTY_GAP),
    Statement(13, "mul 800: the same decision vector for all three methods", "the same", DECISIONS, same_vectors(800),
              HELD_OUT,
              "the three vectors identical rate by rate ('the offloading decision vector is the same'), not "
              "only the same number of offloading rates"),
    Statement(14, "mul 800: RAW-uJSON penalty gap under 1 s", "under 1 s", "0 s to 1 s", gap_between(800, 0.0, 1.0),
              ANOMALY,
              "RAW ahead by less than a second ('even in this case using RAW data is more convenient'), not "
              "a gap of either sign; " + PENALTY_GAP),
    Statement(15, "mul 800: marshalling up to 50% (uJSON) and 25% (RAW) of completion, fastest rate",
              "ujson 50%, raw 25%", RATIO, marshalling_at(800, {"ujson": 0.50, "raw": 0.25}), ANOMALY,
              f"'going up to' {FASTEST}"),
    Statement(16, "large sizes (1200): marshalling-to-completion 64% (JSON), 53% (uJSON), 24% (RAW), fastest rate",
              "json 64%, ujson 53%, raw 24%", RATIO, marshalling_at(1200, {"json": 0.64, "ujson": 0.53, "raw": 0.24}),
              FIT,
              "at 1200, not 800: the figures follow 'as the matrix size increase', the 800 figures of 15 come "
              f"before them in the same paragraph, and Fig. 4-(c) shows 1200; {FASTEST}"),
    Statement(17, "mul 900: RAW ahead of uJSON by almost 1 s", "almost 1 s", "0.5 s to 1.5 s",
              gap_between(900, 0.5, 1.5), ANOMALY,
              "the advantage over uJSON, RAW's nearest rival ('both RAW and uJSON exceeded again the JSON "
              "method'), not over JSON; " + PENALTY_GAP),
    Statement(18, "mul 1000: decision vectors unchanged from 900", "unchanged", DECISIONS, unchanged(900, 1000),
              HELD_OUT, "every method's vector at 1000 identical to its own at 900 rate by rate, not only in count"),
    Statement(19, "mul 1000: RAW-uJSON penalty gap", "8.34 s", GAP, gap(1000, "ujson", 8.34), HELD_OUT,
              "'grows up to 8.34 seconds' as the gap at 1000 being 8.34 s, not a bound; " + PENALTY_GAP),
    Statement(20, "mul 1200: RAW offloads at all six rates", "6 of 6", DECISIONS, offloads_at(1200, "raw", None),
              FIT),
    Statement(21, "mul 1200: the others close behind", "close behind", "at least 4 of 6 each", close_behind,
              HELD_OUT,
              "'close behind regarding the offloading decision' as JSON and uJSON each offloading at four or "
              "more of the six rates (within two of RAW's six)"),
    Statement(22, "mul 1200: RAW-uJSON penalty gap", "12.94 s", GAP, gap(1200, "ujson", 12.94), HELD_OUT,
              PENALTY_GAP),
    Statement(23, "mul 1200: RAW-JSON penalty gap", "29.38 s", GAP, gap(1200, "json", 29.38), HELD_OUT, PENALTY_GAP),
    Statement(24, "mul 1200: uJSON up to 77% faster than JSON, RAW up to 67%",
              "ujson 77%, raw 67% of JSON's completion", RATIO, to_json_at(1200, {"ujson": 0.77, "raw": 0.67}),
              HELD_OUT,
              "completion time over JSON's (the paper's 'method-to-JSON ratio'), not JSON's over the method's "
              "(1.77, 1.67): fit 16 gives uJSON/JSON = (1 - 0.64)/(1 - 0.53) = 0.77 exactly (the server's "
              "compute is the same for both), while JSON/uJSON = 1.77 contradicts it at any tolerance; "
              "'up to' read at the fastest rate as in 7, 15 and 16, where 16's figures are. Under this "
              "reading fit 16 gives RAW/JSON = 0.36/0.76 = 0.47, so RAW's half may fail on any platform"),
    Statement(25, "every size: RAW offloads in at least as many cells as uJSON, uJSON as JSON", "holds", DECISIONS,
              ordering, HELD_OUT,
              "'favored more times when using RAW' as at least as many offloading rates at every size, not "
              "strictly more: 13 has all three equal at 800"),
    Statement(26, "the lowest rate at which offloading pays falls as matrices grow", "falls", DECISIONS, border_falls,
              HELD_OUT,
              "per method, the lowest paying rate never rises from one size to the next (sizes where no rate "
              "pays skipped), not a strict fall at every step"),
)  # fmt: skip
COLUMNS = ["n", "statement", "paper", "measured", "tolerance", "holds", "use", "reading"]


def numbers(role: str) -> frozenset[int]:
    """The statements of one role (HELD_OUT, FIT or ANOMALY), as STATEMENTS sets them."""
    return frozenset(s.number for s in STATEMENTS if s.role == role)


def paper_checks(cells: pd.DataFrame) -> pd.DataFrame:
    """Every statement judged on these cells (`analysis.cells.cell_table`'s columns), in order, with
    its role and reading: the anomaly's statements are judged like the rest, so the table shows what
    the run measured there, and only `held_out_summary` leaves them out of the score."""
    lookup = Cells(cells)
    rows = []
    for s in STATEMENTS:
        try:
            verdict = s.judge(lookup)
        except NotMeasured as missing:
            verdict = Verdict(f"not in the run: {missing}", NOT_MEASURED)
        rows.append(
            [s.number, s.text, s.paper, verdict.measured, s.tolerance, verdict.holds, s.role, s.reading]
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def judged(checks: pd.DataFrame) -> bool:
    """Whether the run measured anything the paper states (its report then has "Against the paper")."""
    return bool((checks["holds"] != NOT_MEASURED).any())


def held_out_summary(checks: pd.DataFrame) -> str:
    """ "k of 17 held-out statements hold (u undecided, m not measured)": the reproduction's score. The
    denominator is every held-out statement, judged or not, so that a run which measures less does not
    score higher; fit statements and the paper's anomaly are not counted."""
    held = checks[checks["use"] == HELD_OUT]
    counts = held["holds"].value_counts()
    extra = [f"{counts[v]} {v}" for v in (UNDECIDED_VERDICT, NOT_MEASURED) if counts.get(v, 0)]
    text = f"{counts.get(HOLDS, 0)} of {len(held)} held-out statements hold"
    return text + (f" ({', '.join(extra)})" if extra else "")
