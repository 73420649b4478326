"""A transfer sweep's experiment file: `datasets:` in place of ops, sizes and methods (docs/transfers.md)."""

from __future__ import annotations

from contracts.config import Section
from contracts.datasets import DATASETS, FETCH, FETCH_METHOD


def transfer_doc(doc: Section) -> Section:
    """A transfer sweep's file (`datasets: [html, image, video]`): op fetch, method http, each
    dataset's size its number of files, no local baseline; ops, sizes and methods are not given."""
    names = doc.raw("datasets")
    if not isinstance(names, list) or not names or not all(n in DATASETS for n in names):
        raise doc.error(
            "datasets", f"{names!r} is not a list of datasets", f"use some of: {', '.join(DATASETS)}"
        )
    for key in ("ops", "sizes", "methods", "local"):
        if doc.has(key):
            raise doc.error(key, "a transfer sweep fetches its datasets (op fetch)", f"drop {key}")
    data = {**doc.data, "ops": [FETCH], "methods": [FETCH_METHOD], "local": False}
    data["sizes"] = [DATASETS[n].files for n in names]
    return Section(doc.path, doc.what, doc.keys, data, doc.node)
