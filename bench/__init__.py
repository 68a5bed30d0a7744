"""The benchmark suite: queen-raft against the peers a user would pick instead.

Run a scenario alone with `python -m bench <scenario> [--quick]`, or every one with `make bench`.
The suite uses the project only from outside (processes, HTTP, signals, files), as a user
would run it.
"""
