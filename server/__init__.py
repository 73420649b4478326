"""The offload server: runs on the server host and executes whitelisted matrix operations over HTTP.

Modules: `ops` (the operations table), `wire` and `codecs` (marshalling, shared with the client),
`timing` (Server-Timing), `app` (the Flask application), `wsgi` (gunicorn), `__main__` (the CLI).
"""
