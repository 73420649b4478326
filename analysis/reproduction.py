"""A run shipped in the repository as a reproduction, and the check that it regenerates.

`ship(RUN_DIR, DEST)` writes what a reader needs to see and re-derive the run's findings, and nothing
that only the machine that ran it had: `manifest.json` as the sweep left it, `trials.csv.gz` (the
trials, byte for byte, compressed: a paper grid's file is tens of MB as text), and `analysis/` (every
table, the figures and the report, as `testbed analyze` writes them, but for the report linking its
figures rather than carrying them: the paper grid's report was 8.3 MB of base64 copies of the PNGs
beside it). The sweep's logs stay behind.
The whole is kept under `MAX_BYTES` so the repository stays clonable.

`regenerate(DEST, WORK)` unpacks the trials next to the manifest in `WORK`, analyses them again with
this tool (no root, no testbed) and compares every table with the shipped one: a difference means
the shipped figures are not what the shipped trials give (a changed analysis, or edited files), and
is reported per table. Tables are compared line by line as text, both written by the same code path;
a number may differ in its last digits only (`same_row`: another SciPy release sums in another
order), anything else is a difference.

`python -m analysis.reproduction ship RUN_DIR DEST` and `... check DEST` do the same from the shell.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
import shutil
import sys
from pathlib import Path

from analysis.load import writable_dir
from contracts.errors import UserError
from contracts.run import MANIFEST_FILE, PACKED_TRIALS_FILE, TRIALS_FILE

MAX_BYTES = 20_000_000

ANALYSIS = "analysis"


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def ship(run_dir: Path, dest: Path) -> Path:
    """Copy the run's manifest and compressed trials to `dest`, and analyse them there."""
    from analysis import analyze

    for name in (MANIFEST_FILE, TRIALS_FILE):
        if not (run_dir / name).is_file():
            raise UserError(f"{run_dir} has no {name}", "pass the directory of a run made by `testbed sweep`")
    writable_dir(dest, "pass a writable destination")
    shutil.copyfile(run_dir / MANIFEST_FILE, dest / MANIFEST_FILE)
    # mtime 0: the same trials make the same bytes, so a re-ship changes nothing in git
    with (
        open(run_dir / TRIALS_FILE, "rb") as src,
        open(dest / PACKED_TRIALS_FILE, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as packed,
    ):
        shutil.copyfileobj(src, packed)
    unpacked = dest / TRIALS_FILE
    shutil.copyfile(run_dir / TRIALS_FILE, unpacked)
    try:
        if (dest / ANALYSIS).exists():
            shutil.rmtree(dest / ANALYSIS)
        analyze(dest, out=io.StringIO(), embed=False)  # the PNGs are beside it: not twice
    finally:
        unpacked.unlink()
    if (total := size_of(dest)) > MAX_BYTES:
        raise UserError(
            f"{dest} is {total / 1e6:.1f} MB, over the {MAX_BYTES / 1e6:g} MB a shipped run may take",
            "ship the tables without figures (testbed analyze --no-plots), or a smaller run",
        )
    return dest


def tables(analysis_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(analysis_dir.glob("*.csv"))}


def regenerate(shipped: Path, work: Path) -> list[str]:
    """Analyse the shipped trials again in `work`; what differs from the shipped tables (none: [])."""
    from analysis import analyze

    if not (shipped / PACKED_TRIALS_FILE).is_file() or not (shipped / MANIFEST_FILE).is_file():
        raise UserError(
            f"{shipped} holds no shipped run", f"it needs {MANIFEST_FILE} and {PACKED_TRIALS_FILE}"
        )
    writable_dir(work, "pass a writable --work")
    shutil.copyfile(shipped / MANIFEST_FILE, work / MANIFEST_FILE)
    with gzip.open(shipped / PACKED_TRIALS_FILE, "rb") as packed, open(work / TRIALS_FILE, "wb") as out:
        shutil.copyfileobj(packed, out)
    analyze(work, plots=False, out=io.StringIO())
    before, after = tables(shipped / ANALYSIS), tables(work / ANALYSIS)
    out = [f"{name}: shipped, not regenerated" for name in sorted(set(before) - set(after))]
    out += [f"{name}: regenerated, not shipped" for name in sorted(set(after) - set(before))]
    for name in sorted(set(before) & set(after)):
        old, new = before[name].splitlines(), after[name].splitlines()
        first = next(
            (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if not same_row(a, b)),
            None if len(old) == len(new) else min(len(old), len(new)),
        )
        if first is not None:
            out.append(f"{name}: differs from line {first + 1} ({len(old)} lines shipped, {len(new)} now)")
    return out


def same_row(shipped: str, now: str, rel: float = 1e-9) -> bool:
    """A table's line as shipped and as regenerated: the same text, or numbers that differ only in
    their last digits (the statistics library's summation order differs between releases: measured,
    a p-value's 16th digit between SciPy releases), field by field."""
    if shipped == now:
        return True
    a, b = next(csv.reader([shipped])), next(csv.reader([now]))
    return len(a) == len(b) and all(x == y or _close(x, y, rel) for x, y in zip(a, b, strict=True))


def _close(x: str, y: str, rel: float) -> bool:
    try:
        return math.isclose(float(x), float(y), rel_tol=rel, abs_tol=1e-12)
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m analysis.reproduction", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("ship", help="copy a run and its analysis into the repository")
    p.add_argument("run_dir", type=Path)
    p.add_argument("dest", type=Path)
    p = sub.add_parser("check", help="analyse a shipped run again and compare its tables")
    p.add_argument("dest", type=Path)
    p.add_argument("--work", type=Path, help="where to regenerate (default: a temporary directory)")
    args = parser.parse_args(argv)
    try:
        if args.action == "ship":
            dest = ship(args.run_dir, args.dest)
            print(f"shipped {args.run_dir} to {dest} ({size_of(dest) / 1e6:.1f} MB)")
            return 0
        import tempfile

        with tempfile.TemporaryDirectory(prefix="regenerate-") as tmp:
            diffs = regenerate(args.dest, args.work or Path(tmp))
    except UserError as exc:
        print(f"reproduction: error: {exc}", file=sys.stderr)
        return 2
    for line in diffs:
        print(line)
    print(f"{args.dest}: {'every table regenerates' if not diffs else f'{len(diffs)} table(s) differ'}")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
