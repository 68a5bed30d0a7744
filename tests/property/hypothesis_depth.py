"""How hard the property suite searches: moderate by default, deeper with HYPOTHESIS_PROFILE=long.

The default keeps `tests/property` under about a minute on the shared 2-core machine, so it runs
with every `make test`; the long profile is for a deliberate soak before a release.
"""

import os

from hypothesis import HealthCheck, settings

DEPTH = os.environ.get("HYPOTHESIS_PROFILE", "default")

if DEPTH == "long":
    STATEFUL_EXAMPLES = 1500
    STATEFUL_STEPS = 120
    SEQUENCE_EXAMPLES = 1000
else:
    STATEFUL_EXAMPLES = 150
    STATEFUL_STEPS = 40
    SEQUENCE_EXAMPLES = 100

# Per test. Hypothesis stops shrinking after 300 s of its own; pytest-timeout (300 s in
# pyproject.toml) would kill it first and bury the counterexample under a Flaky error. The long
# profile's search alone takes a quarter of an hour or more on the shared machine.
PROPERTY_TIMEOUT_S = 3600 if DEPTH == "long" else 900

# No deadline: the reference model is deliberately slow (linear scans), and a slow step on a busy
# shared machine is not a bug. too_slow: the invariant reads every partition after every step.
# One bug at a time by default: shrinking several at once on 2 shared cores takes minutes.
STATEFUL_SETTINGS = settings(
    max_examples=STATEFUL_EXAMPLES,
    stateful_step_count=STATEFUL_STEPS,
    deadline=None,
    report_multiple_bugs=DEPTH == "long",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

SEQUENCE_SETTINGS = settings(
    max_examples=SEQUENCE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
