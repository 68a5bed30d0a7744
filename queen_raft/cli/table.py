"""Human output of the client commands (`--output table`): rows as aligned columns, instants as ISO
8601 in UTC with the distance from now ("2026-12-02T16:00:00.000Z (in 23h59m)").

JSON stays the default whenever stdout is not a terminal, so scripts that pipe the output keep the
server's answer as it is (`--output json` forces it on a terminal).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

# Answer fields that hold an instant in ms since the epoch on the group clock.
INSTANT_FIELDS = frozenset({"deliverAt", "dueAt", "createdAt", "updatedAt", "expiresAt", "failedAt", "expires_at"})
# The lists an answer's rows live in, in the order they are looked for.
ROW_LISTS = ("results", "rows", "messages", "records", "entries")
MAX_CELL = 60


def relative(delta_ms: int) -> str:
    """'in 23h59m', '5m12s ago', 'now': the two largest units."""
    if abs(delta_ms) < 1000:
        return "now"
    seconds = abs(delta_ms) // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size or (parts and len(parts) < 2):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    text = "".join(parts)
    return f"in {text}" if delta_ms > 0 else f"{text} ago"


def instant(ms: int, now_ms: int) -> str:
    iso = datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{iso} ({relative(ms - now_ms)})"


def cell(name: str, value: Any, now_ms: int) -> str:
    if name in INSTANT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        return instant(value, now_ms)
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= MAX_CELL else text[:MAX_CELL - 3] + "..."


def columns(rows: list[dict[str, Any]]) -> list[str]:
    names: list[str] = []
    for row in rows:
        names += [k for k in row if k not in names]
    return names


def table(rows: list[dict[str, Any]], now_ms: int) -> str:
    names = columns(rows)
    grid = [names] + [[cell(n, row.get(n), now_ms) for n in names] for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(names))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in grid)


def render(answer: Any, now_ms: int | None = None) -> str:
    """The answer as text: its row list as a table (other fields as `name: value` lines above),
    or one `name: value` line a field."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if not isinstance(answer, dict):
        return cell("", answer, now)
    row_key = next((k for k in ROW_LISTS if isinstance(answer.get(k), list)
                    and all(isinstance(r, dict) for r in answer[k])), None)
    lines = [f"{name}: {cell(name, value, now)}" for name, value in answer.items() if name != row_key]
    if row_key is not None:
        rows = answer[row_key]
        lines.append(table(rows, now) if rows else f"({row_key}: none)")
    return "\n".join(lines)
