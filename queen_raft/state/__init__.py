"""The deterministic tenant state machine: `TenantState.apply(command) -> answer`.

See docs/commands.md for the commands and answers. Nothing in this package reads a clock, a
random source or the environment: replicas that apply the same entries hold the same value.
"""

from .tenant import TenantState

__all__ = ["TenantState"]
