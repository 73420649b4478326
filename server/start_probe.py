"""`python -m server.start_probe`: a process that starts as a cgi stack request's does, and says what
its start-up cost in CPU.

The server device's calibration (`Grid.start_argv`) times the cgi stack's `server_start` stage with
it: the interpreter and the imports of the generated CGI script (`server.cgi` and, through it, NumPy
and the codecs), up to where `server.cgi.main` reads its clock. It prints `time.process_time()` there
(all threads: OpenBLAS starts its own at import), which is what a request reports as `cpu=` of its
`server_start` stage, and exits without tearing down the interpreter (a request's answer is written
before its process ends, so the end is in no stage).
"""

import os
import sys
import time

from server.cgi import main  # noqa: F401  what the CGI script imports before it reads the clock

sys.stdout.write(f"{time.process_time()!r}\n")
sys.stdout.flush()
os._exit(0)
