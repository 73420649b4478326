import re
import textwrap
from pathlib import Path

import pytest

from contracts.errors import UserError
from testbed.experiment import Experiment, from_dict, load_experiment, override, parse_sizes

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(textwrap.dedent(text))
    return path


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
    assert exp.reps == 40


def test_smoke_loads():
    exp = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert exp.validation.enabled and exp.local


def test_good_file(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD))
    assert exp.sizes == (100, 200, 300)
    assert exp.rates_mbps == (10.0, 40.0)  # ascending
    assert exp.client_cpu.cpu_quota == 0.1
    assert exp.validation.duration == 1 and exp.validation.tolerance_pct == 5.0
    assert from_dict(exp.as_dict()) == exp  # what --resume reads back from the manifest


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
        load_experiment(write(tmp_path, GOOD.replace(*change)))
    assert "exp.yaml:" in str(info.value) and f"'{key}'" in str(info.value)


def test_malformed_yaml(tmp_path):
    with pytest.raises(UserError, match="malformed YAML"):
        load_experiment(write(tmp_path, "ops: [mul\n"))


def test_flags_override_the_file(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD))
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
