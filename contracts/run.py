"""A run's files as one typed, versioned contract: `trials.csv` and `manifest.json`.

The sweep writes them and everything else (resume, the stopping rule, the analysis) reads them only
through this contract, so there is one reader per file and one meaning per field. This module is its
front door: the names the rest of the testbed imports, each from the module that holds it.

- `contracts.run_format`: the format version both files carry, and what each version changed.
- `contracts.trials_file`: trials.csv: `TrialRecord` (a row), `COLUMNS`, `TrialWriter`, `read_trials`.
- `contracts.manifest`: manifest.json: `Manifest` and its sections, `read_manifest`, `write_manifest`.
- `contracts.row_file`: appending a row so that a crash or a full disk loses at most that row, and
  `contracts.stage_times`: the stage columns; both shared with a stream's tasks.csv (`contracts.tasks`).

Writing a field the schema does not know is a bug and raises `TypeError` with its traceback (the
trial record and every manifest section are dataclasses, built with keywords). Reading a file of a
newer version is the user's to fix (a newer tool wrote it) and says so in one line.
"""

from __future__ import annotations

from contracts.manifest import (
    MANIFEST_FILE,
    Calibration,
    Counters,
    Device,
    Experiment,
    LinkCheck,
    Manifest,
    Repair,
    Session,
    Validation,
    read_manifest,
    write_manifest,
)
from contracts.row_file import RowWriter, repair
from contracts.run_format import FORMAT_VERSION
from contracts.trials_file import (
    COLUMNS,
    PACKED_TRIALS_FILE,
    REQUIRED,
    TRIALS_FILE,
    TRIALS_MARK,
    TrialRecord,
    Trials,
    TrialWriter,
    read_trials,
)

__all__ = [
    "COLUMNS",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "PACKED_TRIALS_FILE",
    "REQUIRED",
    "TRIALS_FILE",
    "TRIALS_MARK",
    "Calibration",
    "Counters",
    "Device",
    "Experiment",
    "LinkCheck",
    "Manifest",
    "Repair",
    "RowWriter",
    "Session",
    "TrialRecord",
    "TrialWriter",
    "Trials",
    "Validation",
    "read_manifest",
    "read_trials",
    "repair",
    "write_manifest",
]
