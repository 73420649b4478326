"""The contracts every part of the testbed shares, and nothing else.

Host roles (`appliance`, `client`, `server`), the host agent, the orchestrator (`testbed`) and the
analysis all import this package; it imports none of them. A host of a real lab needs the roles, the
agent and this package, never the orchestrator. Modules here are small and import lazily what is
heavy (numpy only in the codec, operation, stats and marshal_speed modules), so `contracts.errors` costs nothing.

- `errors`: the one exception type for what a user can fix.
- `units`: link rates and what follows from a rate (HTB burst, TCP goodput).
- `profiles`: the link and client-CPU profiles, with their range checks.
- `trials`: the trial schema: stage names, CSV columns, the local marker, `Server-Timing`.
- `ops`, `wire`, `codecs`: the whitelisted operations and the marshalling methods (client and server
  must agree on them byte for byte); `limits`: what one request may cost the server, from its shapes.
- `marshal_speed`: timing a codec on this machine (the duration estimate and `testbed bench` alike).
- `stats`: the 95% confidence interval of a mean (cells, and the client's calibration).
- `command`: running external programs as argv lists; `processes`: stopping process groups.
"""

__version__ = "0.1.0"
