"""The format version a run's files carry (trials.csv and manifest.json share one), and what each
version changed.

Versions (Flent's `resultset.py` is the model: refuse newer, convert older on load):
- 1: runs written before versioning: no mark anywhere. They load as they are (the columns and keys
  are the same; version 1's manifest had no `format_version`).
- 2: `trials.csv` begins with the line `# offload-testbed trials format 2`; `manifest.json` has
  `"format_version": 2` and only the sections `contracts.manifest` types.
- 3: trials gain `repair` (what the sweep repaired before the row's trial ran again),
  `connection` (per-trial or persistent) and the server's measured stages (`wall_server_*`,
  `cpu_server_*`); the experiment its `connection` and `server_device`, the manifest
  `server_device`. Older files load as they are (empty columns; their experiment's connection reads
  as persistent, which is how their remote trials ran) and are rewritten in version 3's columns on
  resume.
- 4: the columns `t_server_start` and `cpu_server_start` (the cgi stack's per-request process
  start-up, wall and CPU seconds) and `replica` (which testbed of a sweep over several ran it, as
  the manifest's validation, counters, repairs, calibrations and sessions' `testbeds` say); the
  experiment's `server_stack` and `replicas`; a calibration's `replicas` (the testbeds on one machine
  that share it; absent: its own testbed's), and later within version 4 its `scale` (the slowdowns
  the trials applied), `machine` (the facts of the host it ran on) and `reused` (the later sessions
  that used it again; absent in older files, whose resumed sessions calibrate). Runs of versions 1
  to 3 load with the column empty and the stack `wsgi` (the only one they had); resuming one
  rewrites its trials.csv in version 4's columns first.
- 5: the column `server` (the language of the gRPC server a `grpc` row offloaded to, of
  `contracts.stages.GRPC_SERVERS`; `python` for every HTTP row; empty for local rows) and the
  experiment's `servers`. Older runs load with the column empty, which means Python (their only
  server), and `servers` `["python"]`; resuming one rewrites its trials.csv in version 5's columns.
- 6: the column `t_server_queue` (a request's wait at the server for a work slot once its body had
  arrived: `contracts.stages.SERVER_QUEUE`; communication excludes it, the completion time includes
  it). Older runs load with it empty (their communication includes what little queueing one client
  met); resuming one rewrites its trials.csv in version 6's columns.
- 7: the columns `client` (which client host of several ran the trial, 1..N) and `clients` (how many
  clients offloaded the cell at once), empty for a sweep with one client; the experiment's `clients`
  (client hosts), `contention` (the numbers of them offloading at once), `server_workers` and
  `arrivals_hz` (open loop; absent: closed loop); the transfer settings `parallelism` and `io_kb`,
  as columns and as the experiment's dimensions (empty: not varied). Older
  runs load with them empty and one client; resuming one rewrites its trials.csv in version 7's
  columns.
- 8: the columns `concurrency` (the requests one client had outstanding at once in the cell) and
  `stream` (which of them ran the trial, 1..concurrency), empty when the sweep does not vary it, and
  the experiment's `concurrency` dimension (empty: one request at a time). Older runs load with them
  empty; resuming one rewrites its trials.csv in version 8's columns.
- 9: the column `device` (the client device a row ran as, when the sweep's clients are of several
  devices: `clients: [{device, count}, ...]`), empty when the clients are of one device or none; the
  experiment's `client_devices` (each client host's device, client 1 first; empty: one device) and
  the manifest's `client_devices` (every client device after the first, which stays in `device`,
  each with its calibrations). Older runs load with them empty; resuming one rewrites its
  trials.csv in version 9's columns. Later within version 9, a calibration's `client`: the role
  of the further client host it calibrated (`client2` ...: the first client of a further device,
  and an SSH lab's client machines, which each calibrate, under their device's section); absent
  for client 1's, the server's and older files'.
  And the manifest's `client_device_names`: each client host's device by its profile's name, as the
  sweep loaded the profiles (older runs: empty, and the analysis reads the names off the
  experiment's references, a profile's name or its file's stem).
- 10: the column `codec_text` (the text the JSON codecs wrote: `compact`, or `era`, as the paper's
  software wrote it: issue 45), in every row, and the experiment's `codec_text` and `int_range`
  (the integer operands' [low, high) as `numpy.random.randint` draws them; null: each op's own
  range). Older runs load with the column empty and the experiment's `codec_text` `compact` and
  `int_range` null, which is what they ran; resuming one rewrites its trials.csv in version 10's
  columns.
- 11: the columns `delay_ms` (the link's one-way delay, added in each direction) and `loss_pct` (% per
  direction) a trial ran at, where the sweep varies them (`delays:`, `losses:`), and the experiment's
  `delays_ms` and `losses_pct` (empty: not varied); a link check's `delay_ms`, `loss_pct` and, for the
  round trip and loss netem adds, `measure`, `expected`, `measured`, `low`, `high` and `samples`
  (`testbed.link.delay_loss`); the counters' `delay_ms` and `loss_pct`. Older runs load with them
  empty, which is what they ran (the inventory's link); resuming one rewrites its trials.csv in
  version 11's columns.
- 12: the column `dataset` (a transfer sweep's row, op `fetch`: the energy study's dataset it fetched,
  `contracts.datasets`; its `size` is the dataset's number of files) and the experiment's `datasets`.
  Older runs load with the column empty and no datasets, which is what they ran; resuming one
  rewrites its trials.csv in version 12's columns.
- 13: the experiment's `image` (a file the image ops ran on, whose pixel count is among the sizes;
  null: generated images only), and rows of the image ops (`gray`, `bilateral`, `cartoon`,
  `filters3`), whose `size` is the image's pixel count (0.3MP: 307200; every matrix size is at most
  20000). The columns are version 12's. Older runs load with `image` null, which is what they ran.
- 14: an RPC study's rows (issue 46, `contracts.rpc_study`: its op an operation, SayHello, Average,
  GetRandNums or SendRcvLargeData, its size the operation's n or K, its method a transport, `tagless`
  or `grpc`) and their columns `calls`, `t_call_median`, `t_call_p99`, `cpu_server_call`, `wire_up`
  and `wire_down`; the unshaped link, a rate of `inf` in trials.csv and `none` among the manifest's
  `rates_mbps`; the experiment's `calls` and `op_sizes`; the appliance counters' `link` (what each
  port sent, by the kernel's count). Older runs load with them empty, which is what they ran;
  resuming one rewrites its trials.csv in version 14's columns. Later within version 14, beside
  them, `host_speed.csv` (`contracts.steadiness.HOST_SPEED_FILE`: the host's speed through the sweep,
  `at,probe_ms` per probe, appended by each session), where every testbed ran on the sweep's machine;
  older runs and SSH labs have none, and their analysis has no host-speed table.
"""

from __future__ import annotations

from pathlib import Path

from contracts.errors import UserError

FORMAT_VERSION = 14


def check_version(version: int, path: Path) -> None:
    """Refuse a file of a newer version than ours, in one line: a newer tool wrote it (older versions
    are converted on load, by each file's reader)."""
    if version > FORMAT_VERSION:
        raise UserError(
            f"{path} is format version {version}; this testbed reads versions 1 to {FORMAT_VERSION}",
            "analyse it with the newer testbed that wrote it",
        )
