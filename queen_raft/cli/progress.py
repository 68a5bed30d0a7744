"""Progress of the long CLI commands (`timer schedule --file`, `cluster backup`, `cluster restore`,
`dlq list --all`): a tqdm bar on stderr while stderr is a terminal, and nothing otherwise.

stdout keeps the command's answer alone (JSON or a table), so `... > rows.json` still shows the bar
on the terminal, while a script or CI that captures stderr (`2>&1 | tee`, a pipe, a file) gets no
bar and no carriage-return noise. The bar is drawn over one line and removed when the work ends
(`leave=False`): what remains on the terminal is the command's own summary.

tqdm rather than hand-drawn bars: it is maintained, small (no dependency of its own), rate-limits
its redraws, sizes itself to the terminal and shows the rate and time left.
"""

from __future__ import annotations

import sys
from typing import IO, Protocol

from tqdm import tqdm


class Bar(Protocol):
    def update(self, n: float = 1) -> object: ...

    def close(self) -> None: ...


class QuietBar:
    """A bar that draws nothing: what library code gets when no terminal watches."""

    def update(self, n: float = 1) -> None:
        return None

    def close(self) -> None:
        return None


def shows_progress(stream: IO[str] | None = None) -> bool:
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: no terminal to draw on
        return False


def open_bar(description: str, total: int | None = None, unit: str = "it", stream: IO[str] | None = None) -> Bar:
    """A bar on the stream (stderr by default) when it is a terminal, else a QuietBar. With
    unit="B" the counts are shown scaled (kB, MB, ...)."""
    stream = sys.stderr if stream is None else stream
    if not shows_progress(stream):
        return QuietBar()
    return tqdm(total=total, desc=description, unit=unit, unit_scale=unit == "B",
                file=stream, leave=False, dynamic_ncols=True, mininterval=0.2)


def print_line(line: str) -> None:
    """A line of the command's answer on stdout, printed above any bar being drawn (tqdm clears
    the bar, prints, and draws it again below)."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()
