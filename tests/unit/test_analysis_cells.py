"""Every number of the three analysis CSVs for a hand-made trials.csv, against answers worked out here.

The fixture tests/data/analysis/handmade/trials.csv holds the samples in SAMPLES / LOCAL / FAILED below
(shuffled, with `ok` spelt five ways, rates as 10 and 10.0, and an extra column). Expected values use
explicit formulas and a table of Student t quantiles; only Welch's fractional degrees of freedom take
their quantile from scipy directly.
"""

import csv
import math
import shutil
from io import StringIO
from pathlib import Path

import pytest
from scipy import stats

from analysis import analyze

FIXTURE = Path(__file__).parent.parent / "data" / "analysis" / "handmade"
T975 = {1: 12.706204736174694, 2: 4.302652729749462, 3: 3.1824463052837078, 4: 2.7764451051977934}
STAGE_CONST = {  # every remote row: these stages, and server compute = total - their sum
    "default": {
        "t_client_encode": 0.25,
        "t_comm": 0.5,
        "t_server_decode": 0.125,
        "t_server_encode": 0.125,
        "t_client_decode": 0.25,
    },
    "msgpack": {
        "t_client_encode": 0.125,
        "t_comm": 0.125,
        "t_server_decode": 0.125,
        "t_server_encode": 0.125,
        "t_client_decode": 0.125,
    },
}
# (size, rate, method) -> successful completion times
SAMPLES = {
    (100, 10, "json"): [3.0, 3.5, 4.0],
    (100, 20, "json"): [1.75, 2.0, 2.25],
    (100, 10, "ujson"): [2.5, 3.0],
    (100, 20, "ujson"): [1.5, 1.75, 2.0],
    (100, 10, "raw"): [2.25],  # its t_server_decode is empty
    (100, 10, "msgpack"): [1.0, 1.0, 1.0],
    (200, 10, "json"): [2.0, 2.5, 3.0],
    (200, 10, "ujson"): [3.0, 3.0],
    (200, 20, "ujson"): [5.0, 6.0, 7.0],
    (200, 10, "raw"): [1.0, 1.5, 2.0],
}
FAILED = {(100, 10, "ujson"): 1, (100, 10, "raw"): 2, (100, 20, "raw"): 3, (200, 20, "json"): 2}
LOCAL = {100: [1.5, 2.0, 2.5], 200: [4.0, 4.0, 4.0]}  # plus one failed local trial at size 100
ABSENT = {(100, 20, "msgpack"), (200, 10, "msgpack"), (200, 20, "msgpack"), (200, 20, "raw")}  # no row at all
METHODS = ["json", "ujson", "raw", "msgpack"]


def mean(xs):
    return sum(xs) / len(xs)


def sd(xs):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def ci(xs):
    return T975[len(xs) - 1] * sd(xs) / math.sqrt(len(xs)) if len(xs) >= 2 else None


def welch_half(a, b):
    va, vb = sd(a) ** 2 / len(a), sd(b) ** 2 / len(b)
    if va + vb == 0:
        return 0.0, None
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = T975[round(dof)] if abs(dof - round(dof)) < 1e-9 else stats.t.ppf(0.975, dof)
    return t * math.sqrt(va + vb), dof


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "handmade"
    shutil.copytree(FIXTURE, run)
    text = StringIO()
    out_dir = analyze(run, plots=False, out=text)
    return out_dir, text.getvalue()


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(text):
    return None if text == "" else float(text)


def close(actual: str, expected):
    if expected is None:
        return actual == ""
    return actual != "" and math.isclose(float(actual), expected, rel_tol=1e-9, abs_tol=1e-12)


def test_fixture_holds_the_samples_listed_here():
    rows = read(FIXTURE / "trials.csv")
    got, failed, local = {}, {}, {}
    for r in rows:
        ok = r["ok"].lower() in ("true", "1")
        if r["method"] == "local":
            if ok:
                local.setdefault(int(r["size"]), []).append(float(r["t_total"]))
            continue
        key = (int(r["size"]), int(float(r["rate_mbps"])), r["method"])
        if ok:
            got.setdefault(key, []).append(float(r["t_total"]))
        else:
            failed[key] = failed.get(key, 0) + 1
    assert {k: sorted(v) for k, v in got.items()} == SAMPLES
    assert failed == FAILED
    assert {k: sorted(v) for k, v in local.items()} == LOCAL


def test_every_cell_is_listed_once_in_order_and_none_dropped(out):
    rows = read(out[0] / "cells.csv")
    keys = [(int(r["size"]), float(r["rate_mbps"]), r["method"]) for r in rows]
    assert keys == [(s, float(r), m) for s in (100, 200) for r in (10, 20) for m in METHODS]
    assert {r["op"] for r in rows} == {"mul"}
    # cells with no row at all come from crossing the run's sizes, rates and methods
    absent = {(s, int(r), m) for s, r, m in keys} - set(SAMPLES) - set(FAILED)
    assert absent == ABSENT


def test_cell_numbers(out):
    rows = {(int(r["size"]), int(float(r["rate_mbps"])), r["method"]): r for r in read(out[0] / "cells.csv")}
    for key, r in rows.items():
        size, rate, method = key
        xs = SAMPLES.get(key, [])
        base = LOCAL[size]
        assert int(r["n"]) == len(xs), key
        assert int(r["failed"]) == FAILED.get(key, 0), key
        assert r["missing"] == ("true" if not xs else "false"), key
        assert close(r["local_mean"], mean(base)) and close(r["local_ci95"], ci(base)), key
        assert r["local_n"] == "3"
        if not xs:
            for column in (
                "mean",
                "ci95",
                "offload",
                "significant",
                "penalty",
                "diff_ci95",
                "marshalling_ratio",
                "json_ratio",
                "t_client_encode_mean",
                "t_server_compute_ci95",
            ):
                assert r[column] == "", (key, column)
            continue
        m = mean(xs)
        assert close(r["mean"], m), key
        assert close(r["ci95"], ci(xs)), key
        assert r["offload"] == ("1" if m < mean(base) else "0"), key
        assert close(r["penalty"], m - mean(base)), key
        if len(xs) < 2:
            assert r["significant"] == "" and r["diff_ci95"] == "", key
        else:
            half, dof = welch_half(xs, base)
            assert close(r["diff_ci95"], half), key
            assert close(r["welch_dof"], dof), key
            assert r["significant"] == ("true" if abs(m - mean(base)) > half else "false"), key
        const = STAGE_CONST.get(method, STAGE_CONST["default"])
        compute = [x - sum(const.values()) for x in xs]
        assert close(r["t_server_compute_mean"], mean(compute)), key
        assert close(r["t_server_compute_ci95"], ci(compute)), key
        for stage, value in const.items():
            if key == (100, 10, "raw") and stage == "t_server_decode":
                assert r[f"{stage}_mean"] == "" and r[f"{stage}_ci95"] == ""
                continue
            assert close(r[f"{stage}_mean"], value), (key, stage)
            assert close(r[f"{stage}_ci95"], 0.0 if len(xs) >= 2 else None), (key, stage)
        assert close(r["marshalling_ratio"], (m - mean(compute)) / m), key
        ref = SAMPLES.get((size, rate, "json"))
        assert close(r["json_ratio"], m / mean(ref) if ref else None), key


def test_worked_examples_by_hand(out):
    """A few cells with the arithmetic written out, so a reader can check them on paper."""
    rows = {(int(r["size"]), int(float(r["rate_mbps"])), r["method"]): r for r in read(out[0] / "cells.csv")}
    # size 100, json, 10 Mbit/s: 3.0 3.5 4.0 vs local 1.5 2.0 2.5; both sd 0.5
    r = rows[(100, 10, "json")]
    assert close(r["mean"], 3.5) and close(r["ci95"], 4.302652729749462 * 0.5 / math.sqrt(3))
    # Welch: se = sqrt(0.25/3 + 0.25/3), dof = 4 -> half = 2.7764 * 0.40825 = 1.1335 < 1.5: significant
    assert close(r["diff_ci95"], 2.7764451051977934 * math.sqrt(0.5 / 3)) and r["significant"] == "true"
    assert r["offload"] == "0" and close(r["penalty"], 1.5)
    # size 100, json, 20 Mbit/s: mean 2.0 equals the local mean: not below, so stay local, not significant
    r = rows[(100, 20, "json")]
    assert r["offload"] == "0" and close(r["penalty"], 0.0) and r["significant"] == "false"
    # size 200, ujson, 10 Mbit/s: 3.0 3.0 vs 4.0 4.0 4.0, no spread at all: the difference is exact
    r = rows[(200, 10, "ujson")]
    assert close(r["ci95"], 0.0) and close(r["diff_ci95"], 0.0) and r["welch_dof"] == ""
    assert r["significant"] == "true" and r["offload"] == "1" and close(r["penalty"], -1.0)
    # size 200, raw, 10 Mbit/s: local sd 0 -> dof = n - 1 = 2; half = 4.3027 * 0.5/sqrt(3) = 1.2421 < 2.5
    r = rows[(200, 10, "raw")]
    assert close(r["welch_dof"], 2.0) and r["significant"] == "true" and close(r["penalty"], -2.5)
    assert close(r["json_ratio"], 1.5 / 2.5) and close(r["marshalling_ratio"], 1.25 / 1.5)
    # size 200, ujson, 20 Mbit/s: slower than local, and no json cell to compare with (all json trials failed)
    r = rows[(200, 20, "ujson")]
    assert r["offload"] == "0" and close(r["penalty"], 2.0) and r["json_ratio"] == ""
    # a cell whose every trial failed is missing but keeps its failure count
    r = rows[(100, 20, "raw")]
    assert (r["n"], r["failed"], r["missing"], r["mean"], r["offload"]) == ("0", "3", "true", "", "")


def test_decision_vectors(out):
    """1/0 only where Welch's test separates remote from local (the `significant` column of
    test_cell_numbers), ? where it does not or cannot (n = 1), - where the cell is missing."""
    rows = {(int(r["size"]), r["method"]): r for r in read(out[0] / "decision_vectors.csv")}
    assert [(int(r["size"]), r["method"]) for r in read(out[0] / "decision_vectors.csv")] == [
        (s, m) for s in (100, 200) for m in METHODS
    ]
    expected = {  # (vector, offload_count, undecided_rates, missing_rates, significant)
        (100, "json"): ("0 ?", 0, 1, 0, "1 0"),  # 20 Mbit/s: mean equal to local's
        (100, "ujson"): ("? ?", 0, 2, 0, "0 0"),  # 20 Mbit/s: below local, but not significantly
        (100, "raw"): ("? -", 0, 1, 1, "- -"),  # 10 Mbit/s: one trial, nothing to test
        (100, "msgpack"): ("? -", 0, 1, 1, "0 -"),
        (200, "json"): ("1 -", 1, 0, 1, "1 -"),
        (200, "ujson"): ("1 ?", 1, 1, 0, "1 0"),
        (200, "raw"): ("1 -", 1, 0, 1, "1 -"),
        (200, "msgpack"): ("- -", 0, 0, 2, "- -"),
    }
    for key, want in expected.items():
        r = rows[key]
        assert r["rates"] == "10 20", key
        got = (r["vector"], int(r["offload_count"]), int(r["undecided_rates"]), int(r["missing_rates"]))
        assert (*got, r["significant"]) == want, key


def test_cumulative_penalties(out):
    rows = {(int(r["size"]), r["method"]): r for r in read(out[0] / "cumulative_penalty.csv")}
    expected = {  # (cumulative, partial over known rates)
        (100, "json"): (1.5 + 0.0, 1.5),
        (100, "ujson"): (0.75 - 0.25, 0.5),
        (100, "raw"): (None, 0.25),
        (100, "msgpack"): (None, -1.0),
        (200, "json"): (None, -1.5),
        (200, "ujson"): (-1.0 + 2.0, 1.0),
        (200, "raw"): (None, -2.5),
        (200, "msgpack"): (None, None),
    }
    for key, (total, partial) in expected.items():
        assert close(rows[key]["cumulative_penalty"], total), key
        assert close(rows[key]["partial_penalty"], partial), key


def test_terminal_summary(out):
    text = out[1]
    assert "run handmade-1: 41 trials (32 ok, 9 failed); 16 cells, 6 missing" in text
    assert "? = undecided: remote and local not significantly different (Welch, 95%)" in text
    assert (
        "mul 100: json 0 ? (0/2, 1 undecided)  ujson ? ? (0/2, 2 undecided)  raw ? - (0/2, 1 undecided, "
        "1 missing)  msgpack ? - (0/2, 1 undecided, 1 missing) | cumulative penalty [json 1.5 s, ujson 0.5 s, "
        "raw - (known rates: 0.25 s), msgpack - (known rates: -1 s)]"
    ) in text
    assert "mul 200: json 1 - (1/2, 1 missing)  ujson 1 ? (1/2, 1 undecided)" in text


def test_the_summary_gives_each_undecided_cell_its_penalty_and_welch_interval(out):
    lines = out[1].splitlines()
    half = {key: welch_half(SAMPLES[key], LOCAL[key[0]])[0] for key in SAMPLES if len(SAMPLES[key]) > 1}
    mul100 = lines[lines.index(next(x for x in lines if x.startswith("mul 100:"))) + 1]
    assert mul100 == (
        "  undecided, penalty (Welch 95% CI): "
        f"json 20 Mbit/s +0 s (+-{half[(100, 20, 'json')]:.3g}); "
        f"ujson 10 Mbit/s +0.75 s (+-{half[(100, 10, 'ujson')]:.3g}); "
        f"ujson 20 Mbit/s -0.25 s (+-{half[(100, 20, 'ujson')]:.3g}); "
        "raw 10 Mbit/s +0.25 s (untested: n 1, local n 3); "
        f"msgpack 10 Mbit/s -1 s (+-{half[(100, 10, 'msgpack')]:.3g})"
    )
    # 5 6 7 against 4 4 4: +2 s, within 4.303 x 1/sqrt(3) = 2.48
    assert "  undecided, penalty (Welch 95% CI): ujson 20 Mbit/s +2 s (+-2.48)" in lines


def test_the_summary_counts_offloading_and_undecided_cells_per_method(out):
    assert (
        "offloading (significant only): json offloads in 1 of 4 cells, 1 undecided, 1 missing; "
        "ujson offloads in 1 of 4 cells, 3 undecided; raw offloads in 1 of 4 cells, 1 undecided, 2 missing; "
        "msgpack offloads in 0 of 4 cells, 1 undecided, 3 missing"
    ) in out[1].splitlines()
