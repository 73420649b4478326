"""A trial's completion time and its stages: the columns a sweep's trials.csv (`contracts.trials_file`)
and a stream's tasks.csv (`contracts.tasks`) both hold, defined once so the two files cannot name or
type them differently.

The stages are `contracts.stages.STAGES`, in the order they happen (the paper's Fig. 3); seconds,
empty (None) where a trial did not measure one (a local trial has only `t_total`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class StageTimes:
    """The stage columns, as a base of each file's record.

    A dataclass takes its bases' fields first, the last base's first, then its own; so a record that
    is `class TrialRecord(StageTimes, _TrialHead)` has `_TrialHead`'s columns, then these, then its
    own, which is the order of the file's columns (its header is the record's fields).
    """

    t_total: float | None = None
    t_client_encode: float | None = None
    t_comm: float | None = None
    t_server_decode: float | None = None
    t_server_compute: float | None = None
    t_server_encode: float | None = None
    t_client_decode: float | None = None


STAGE_TIMES = tuple(f.name for f in fields(StageTimes))  # ("t_total", *STAGES)
