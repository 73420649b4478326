"""The offload server: runs on the server host and executes whitelisted matrix operations over HTTP.

Modules: `handler` (one request, whatever stack runs it), `stages` (decode, compute, encode),
`refusals` (what each refusal answers), `timing` (Server-Timing); the `wsgi` stack: `app` (the Flask
application) and `wsgi` (gunicorn); the `cgi` stack: `lighttpd` (its plan) and `cgi` (one request,
one process); `grpc_service` (gRPC); `__main__` (the CLI).
"""
