"""The suite's own promise to whoever runs it: no test touches their store or their files
(tests/helpers/store_guard.py)."""

pytest_plugins = ("store_guard",)
