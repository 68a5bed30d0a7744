"""The per-node, per-tenant token bucket of QUEEN_TIMERS_RATE (one token per POST /api/v1/timers call)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class TokenBucket:
    rate_per_s: float
    capacity: float
    tokens: float
    updated_s: float

    def take(self, now_s: float) -> float:
        """0.0 when a token was taken, else the seconds until one will be there."""
        elapsed = max(0.0, now_s - self.updated_s)
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate_per_s)
        self.updated_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate_per_s


@dataclass
class TenantRateLimiter:
    """rate 0 disables the limit; burst 0 means one second's worth of the rate (at least one call)."""

    rate_per_s: float
    burst: int = 0
    monotonic: Callable[[], float] = time.monotonic
    buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, tenant: str) -> float:
        if self.rate_per_s <= 0:
            return 0.0
        now_s = self.monotonic()
        bucket = self.buckets.get(tenant)
        if bucket is None:
            capacity = float(self.burst) if self.burst > 0 else max(1.0, self.rate_per_s)
            bucket = TokenBucket(self.rate_per_s, capacity, capacity, now_s)
            self.buckets[tenant] = bucket
        return bucket.take(now_s)
