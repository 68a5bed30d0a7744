"""The deterministic tenant state machine: `TenantState.apply(command) -> answer`.

See docs/commands.md for the commands and answers. Nothing in this package reads a clock, a
random source or the environment: replicas that apply the same entries hold the same value. So
it never imports time, random, uuid, os, threading, pysyncobj or aiohttp; what only a node knows
(its clock, ids, nonces, settings that change `apply`) arrives in the command.
"""

from .tenant import TenantState

__all__ = ["TenantState"]
