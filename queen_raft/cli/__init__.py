"""The `queen-raft` command line (`python -m queen_raft`, the `queen-raft` script).

`main` and `build_parser` are those of queen_raft/cli/main.py, re-exported so that the script's
entry point (`queen_raft.cli:main`) names the package rather than a module inside it.
"""

from queen_raft.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
