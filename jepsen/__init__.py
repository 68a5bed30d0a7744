"""Fault injection for queen-raft, built on Jepsen's design: generator -> clients -> history ->
nemesis -> checkers. It drives real node processes from outside (processes, HTTP, signals, files).
"""
