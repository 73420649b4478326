"""The emulated link: shaping checks and repairs, iperf3 validation, traces and their replay."""
