"""The root of the test tree. Being here (next to tests/__init__.py) makes pytest put the repository on
`sys.path`, so test modules import the shared helpers as `tests.fakes`, `tests.helpers`,
`tests.isolation` and `tests.servers`. Fixtures live in the conftest.py of the tests that use them:
tests/unit (the fake testbed), tests/integration (servers on loopback), tests/privileged (leases)."""
