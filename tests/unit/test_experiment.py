import re
from pathlib import Path

import pytest

from contracts.errors import UserError
from contracts.grid import parse_sizes
from testbed.experiment import Experiment, load_experiment, trial_range
from testbed.overrides import override
from tests.helpers import write_experiment

REPO = Path(__file__).resolve().parents[2]


GOOD = """\
name: tiny
ops: [mul, inv]
sizes: 100-300:100
rates: [40, 10]
methods: [json, raw]
reps: 2
client_cpu:
  cpu_quota: 0.1
validation:
  duration: 1
"""


def test_the_paper_grid_is_the_papers_design():
    exp = load_experiment(REPO / "experiments" / "marshalling-paper.yaml")
    assert exp.ops == ("mul", "inv", "log")
    assert exp.sizes == (400, 500, 600, 700, 800, 900, 1000, 1100, 1200)
    assert exp.rates_mbps == (10, 20, 40, 60, 80, 100)
    assert exp.methods == ("json", "ujson", "raw")
    assert (exp.min_reps, exp.reps, exp.replicas) == (3, 40, 4)  # adaptive, the paper's 40 at most
    assert (exp.client_device, exp.server_device, exp.mode) == ("paper-p4", "paper-i3", "scaled")


def test_smoke_loads():
    exp = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert exp.validation.enabled and exp.local
    assert (exp.client_device, exp.server_device) == ("paper-p4", "paper-i3")  # the paper's two machines


def test_good_file(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, GOOD))
    assert exp.sizes == (100, 200, 300)
    assert exp.rates_mbps == (10.0, 40.0)  # ascending
    assert exp.client_cpu.cpu_quota == 0.1
    assert exp.validation.duration == 1 and exp.validation.tolerance_pct == 5.0
    assert Experiment.from_dict(exp.as_dict()) == exp  # what --resume reads back from the manifest


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (("ops: [mul, inv]", "ops: [mul, exec]"), "ops"),
        (("methods: [json, raw]", "methods: [json, pickle]"), "methods"),
        (("rates: [40, 10]", "rates: [40, 0]"), "rates"),
        (("rates: [40, 10]", "rates: [fast]"), "rates"),
        (("reps: 2", "reps: 0"), "reps"),
        (("reps: 2", "reps: two"), "reps"),
        (("sizes: 100-300:100", "sizes: 300-100:100"), "sizes"),
        (("name: tiny", "name: tiny\ncolour: blue"), "colour"),
        (("  duration: 1", "  duration: 1\n  speed: 3"), "validation.speed"),
        (("  cpu_quota: 0.1", "  cpu_quota: 2"), "client_cpu.cpu_quota"),
    ],
)
def test_bad_values_name_file_key_and_reason(tmp_path, change, key):
    with pytest.raises(UserError) as info:
        load_experiment(write_experiment(tmp_path, GOOD.replace(*change)))
    assert "exp.yaml:" in str(info.value) and f"'{key}'" in str(info.value)


def test_malformed_yaml(tmp_path):
    with pytest.raises(UserError, match="malformed YAML"):
        load_experiment(write_experiment(tmp_path, "ops: [mul\n"))


def test_flags_override_the_file(tmp_path):
    exp = load_experiment(write_experiment(tmp_path, GOOD))
    changed = override(
        exp,
        {
            "sizes": "400-1200:100",
            "rates": "10,20,40,60,80,100",
            "reps": 40,
            "methods": "json,ujson,raw",
            "no_validate": True,
        },
    )
    assert changed.sizes[0] == 400 and changed.sizes[-1] == 1200 and len(changed.sizes) == 9
    assert changed.rates_mbps == (10, 20, 40, 60, 80, 100)
    assert changed.reps == 40 and not changed.validation.enabled
    assert changed.ops == exp.ops  # untouched keys keep the file's values


def test_flags_alone_need_the_whole_grid():
    with pytest.raises(UserError, match="--sizes"):
        override(None, {"ops": "mul", "rates": "10", "methods": "raw", "reps": 1})
    exp = override(None, {"ops": "mul", "sizes": "400", "rates": "10", "methods": "raw", "reps": 1})
    assert isinstance(exp, Experiment) and exp.sizes == (400,)


@pytest.mark.parametrize("bad", ["a-b", "0", "abc", "5-"])
def test_bad_sizes(bad):
    with pytest.raises(UserError):
        parse_sizes(bad)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("seed: -1", "key 'seed': -1 is out of range"),
        ("trial_timeout: -5", "key 'trial_timeout': -5 is out of range"),
        ("reps: 99999999999999999999999", "key 'reps': 1e+23 is out of range"),
        ("reps: 10000\nsizes: 2-20000:1", "the grid has"),
        ("name: ../../escape", "key 'name': '../../escape' is not a run name"),
        ("connection: keepalive", "key 'connection': unknown connection policy 'keepalive'"),
    ],
)
def test_file_values_are_checked_like_flags(tmp_path, line, words):
    """One check for both: a file's values get the same ranges as the flags, with file and line."""
    base = {"ops": "ops: [mul]", "sizes": "sizes: [100]", "rates": "rates: [10]", "methods": "methods: [raw]",
            "reps": "reps: 2"}  # fmt: skip
    keys = {part.split(":")[0] for part in line.split("\n")}
    text = "\n".join(v for k, v in base.items() if k not in keys) + "\n" + line + "\n"
    path = tmp_path / "e.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert str(path) in exc.value.message and words in exc.value.message


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"name": "../../escape"}, "--name: '../../escape' is not a run name"),
        ({"seed": -1}, "--seed: -1 is out of range"),
        ({"reps": 0}, "--reps: 0 is out of range"),
        ({"reps": 10**23}, "--reps: 1e+23 is out of range"),
        ({"connection": "sometimes"}, "--connection: unknown connection policy 'sometimes'"),
    ],
)
def test_flags_are_checked_by_the_same_function(flags, words):
    base = {"ops": "mul", "sizes": "100", "rates": "10", "methods": "raw", "reps": 2}
    with pytest.raises(UserError, match=re.escape(words)):
        override(None, {**base, **flags})


def test_a_non_utf8_file_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserError, match="is not UTF-8 text") as exc:
        load_experiment(path)
    assert exc.value.fix == "save the file as UTF-8"


# ------------------------------------------------------------------ adaptive repetitions
GRID = {"ops": "mul", "sizes": "100,200", "rates": "10,20", "methods": "raw,json"}


@pytest.mark.parametrize(
    ("reps", "expected"),
    [("reps: 40", (None, 40, None)), ("reps: 5..40", (5, 40, None)),
     ("reps: {min: 3, max: 12, precision: 0.05}", (3, 12, 0.05)), ("reps: {min: 4, max: 4}", (4, 4, None))],
)  # fmt: skip
def test_reps_in_a_file_are_a_number_a_range_or_a_mapping(tmp_path, reps, expected):
    path = tmp_path / "e.yaml"
    path.write_text(f"ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\n{reps}\n")
    exp = load_experiment(path)
    assert (exp.min_reps, exp.reps, exp.precision) == expected
    assert exp.adaptive == (expected[0] is not None)
    assert Experiment.from_dict(exp.as_dict()) == exp  # what --resume reads back from the manifest


def test_reps_flags_give_fixed_or_adaptive_and_the_trial_range():
    fixed = override(None, {**GRID, "reps": "6"})
    assert (fixed.min_reps, fixed.reps, fixed.adaptive) == (None, 6, False)
    assert trial_range(fixed) == (2 * 6 * 5,) * 2  # 2 sizes x 6 reps x (local + 2 rates x 2 methods)
    adaptive = override(None, {**GRID, "reps": "3..10", "precision": 0.1})
    assert (adaptive.min_reps, adaptive.reps, adaptive.precision) == (3, 10, 0.1)
    assert trial_range(adaptive) == (2 * 3 * 5, 2 * 10 * 5)
    assert adaptive.describe_reps() == "3..10 rep(s) (adaptive, precision 0.1)"


def test_a_fixed_reps_flag_replaces_an_adaptive_file(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(
        "ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\nreps: {min: 3, max: 9, precision: 0.1}\n"
    )
    exp = override(load_experiment(path), {"reps": "5"})
    assert (exp.min_reps, exp.reps, exp.precision) == (None, 5, None)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"reps": "1..10"}, "--reps: minimum 1 is out of range"),
        ({"reps": "12..10"}, "--reps: minimum 12 is out of range"),
        ({"reps": "3..20000"}, "--reps: 20000 is out of range"),
        ({"reps": "3-10"}, "--reps: '3-10' is not a number of repetitions"),
        ({"reps": "5", "precision": 0.05}, "--precision: applies only to adaptive repetitions"),
        ({"reps": "3..9", "precision": 0}, "--precision: 0 is out of range"),
        ({"reps": "3..9", "precision": 1.5}, "--precision: 1.5 is out of range"),
    ],
)
def test_bad_adaptive_flags_are_one_line_with_the_fix(flags, words):
    with pytest.raises(UserError, match=re.escape(words)) as exc:
        override(None, {**GRID, **flags})
    assert exc.value.fix


@pytest.mark.parametrize(
    ("reps", "words"),
    [
        ("reps: {min: 1, max: 10}", "key 'reps': minimum 1 is out of range"),
        ("reps: {min: 3, max: 10, spread: 2}", "key 'reps.spread': unknown key"),
        ("reps: {min: 3, max: 10, precision: 2}", "key 'precision': 2 is out of range"),
        ("reps: 3..10\nlocal: false", "key 'reps': adaptive repetitions compare each cell with the local"),
        ("reps: 3..10\nprecision: 0.1", "key 'precision': unknown key"),
    ],
)
def test_bad_adaptive_files_name_the_file_and_key(tmp_path, reps, words):
    path = tmp_path / "e.yaml"
    path.write_text(f"ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw]\n{reps}\n")
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    assert str(path) in exc.value.message and words in exc.value.message, exc.value.message


def test_the_connection_policy_is_per_trial_unless_a_file_or_flag_says_persistent(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("ops: [mul]\nsizes: [100]\nrates: [10]\nmethods: [raw, grpc]\nreps: 2\n")
    assert load_experiment(path).connection == "per-trial"
    path.write_text(path.read_text() + "connection: persistent\n")
    assert load_experiment(path).connection == "persistent"
    assert override(load_experiment(path), {"connection": "per-trial"}).connection == "per-trial"
