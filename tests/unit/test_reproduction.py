"""A run shipped as a reproduction: what is shipped, and the check that its tables regenerate from its
trials. Every reproduction in the repository is regenerated here too."""

from __future__ import annotations

import gzip
import re
import shutil

import pytest

from analysis import reproduction
from contracts.errors import UserError
from tests.helpers import REPO

TINY = REPO / "tests" / "data" / "runs" / "v3-tiny"
SHIPPED = sorted(p.parent for p in (REPO / "reproductions").glob("*/trials.csv.gz"))


@pytest.fixture
def shipped(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    return reproduction.ship(run, tmp_path / "shipped")


def test_a_shipped_run_is_its_manifest_its_trials_compressed_and_its_analysis(shipped):
    assert (shipped / "manifest.json").read_bytes() == (TINY / "manifest.json").read_bytes()
    assert gzip.decompress((shipped / "trials.csv.gz").read_bytes()) == (TINY / "trials.csv").read_bytes()
    assert not (shipped / "trials.csv").exists(), "only the compressed trials are shipped"
    assert (shipped / "analysis" / "decision_vectors.csv").is_file()
    page = (shipped / "analysis" / "report.html").read_text()
    images = re.findall(r'<img [^>]*src="([^"]+)"', page)  # linked, not copied into the page
    assert images and all((shipped / "analysis" / src).is_file() for src in images)


def test_the_shipped_tables_regenerate_from_the_shipped_trials_and_an_edit_is_named(shipped, tmp_path):
    assert reproduction.regenerate(shipped, tmp_path / "again") == []
    table = shipped / "analysis" / "decision_vectors.csv"
    table.write_text(table.read_text().replace("1", "0"))
    (diff,) = reproduction.regenerate(shipped, tmp_path / "third")
    assert diff.startswith("decision_vectors.csv: differs from line")


def test_a_number_that_differs_in_its_last_digits_is_the_same_and_any_other_change_is_not():
    assert reproduction.same_row("inv,400,0.7222818109981483,x", "inv,400,0.7222818109981481,x")
    assert not reproduction.same_row("inv,400,0.7222818109981483,x", "inv,400,0.7222818,x")
    assert not reproduction.same_row("inv,400,0.72,x", "inv,400,0.72,y")
    assert not reproduction.same_row("inv,400,0.72", "inv,400,0.72,")
    assert not reproduction.same_row("a,nan", "a,1")


def test_a_shipped_run_loads_as_it_ships_and_a_cut_archive_is_named(shipped, tmp_path):
    """`testbed stream --model` and the analysis read a shipped run without unpacking it first."""
    from analysis.load import load_run

    packed = load_run(shipped)
    assert packed.manifest is not None
    assert packed.trials.equals(load_run(TINY).trials)
    cut = tmp_path / "cut"
    cut.mkdir()
    data = (shipped / "trials.csv.gz").read_bytes()
    (cut / "trials.csv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="trials.csv.gz: not a whole gzip file"):
        load_run(cut)
    middle = len(data) // 2  # garbled rather than cut: a bad deflate stream or CRC, also one line
    (cut / "trials.csv.gz").write_bytes(data[:middle] + bytes(64) + data[middle + 64 :])
    with pytest.raises(UserError, match="trials.csv.gz: not a whole gzip file"):
        load_run(cut)


def test_a_run_too_large_to_ship_is_refused_in_one_line(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(TINY, run)
    monkeypatch.setattr(reproduction, "MAX_BYTES", 1000)
    with pytest.raises(UserError, match="over the 0.001 MB a shipped run may take"):
        reproduction.ship(run, tmp_path / "shipped")
    with pytest.raises(UserError, match="has no manifest.json"):
        reproduction.ship(tmp_path / "nothing", tmp_path / "other")


@pytest.mark.parametrize("shipped_run", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_reproduction_regenerates(shipped_run, tmp_path):
    assert reproduction.regenerate(shipped_run, tmp_path / "work") == []
