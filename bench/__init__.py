"""The benchmark suite of issue 6: queen-raft against the peers a user would pick instead.

Run a scenario alone with `python -m bench <scenario> [--quick]`, or every one with `make bench`.
The suite uses the project only from outside (processes, HTTP, signals, files), as DESIGN.md asks.
"""
