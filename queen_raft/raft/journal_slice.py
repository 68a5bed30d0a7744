"""A run of journal entries read from the file when asked for (what pysyncobj slices the log into)."""

from __future__ import annotations

from collections.abc import Sequence


class JournalSlice(Sequence):
    """A run of journal entries, each read from the file when asked for (slicing one gives a list).

    pysyncobj slices the log to pick what to send and to apply (`log[diff:]`, then trims the result to
    a byte budget): reading every command of a long tail up front would copy it all on every send.
    Use a slice at once: it reads by position, and a later compaction moves positions.
    """

    __slots__ = ("_journal", "_positions")

    def __init__(self, journal, positions: range) -> None:
        self._journal = journal
        self._positions = positions

    def __len__(self) -> int:
        return len(self._positions)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return [self._journal.entry_at(p) for p in self._positions[item]]
        return self._journal.entry_at(self._positions[item])

    def __iter__(self):
        # Sequence's own __iter__ indexes one position at a time until IndexError; pysyncobj iterates
        # every slice it applies and sends.
        entry_at = self._journal.entry_at
        for position in self._positions:
            yield entry_at(position)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, JournalSlice)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"JournalSlice({list(self)!r})"
