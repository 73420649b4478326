"""`testbed bench`: the tool's own costs, as ratios to the physical limits they should approach.

One module per benchmark, each returning `Row`s (`benchmarks.common`):

- `codecs`: marshalling throughput per codec and size, against `raw` and a plain memory copy;
- `memory`: peak RSS of a fresh server and client for one large `mul`, as a multiple of the operands;
- `efficiency`: completion time through the embedded testbed against the wire-time lower bound;
- `orchestration`: the sweep's rate change and per-trial bookkeeping against a trial's own time.

`benchmarks.runner` runs them in one go and writes the table, JSON and CSV. The first two need no
root (they run on this machine and on loopback); the last two need the testbed (`benchmarks.lab`).
"""
