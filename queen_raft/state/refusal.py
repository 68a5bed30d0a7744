"""How a command is refused: raised while validating, before anything changed, and turned into
the answer `{"error": code, "message": text, "index"?}` by `TenantState.apply`.
"""

from __future__ import annotations


class Refusal(Exception):
    """A command refused whole; raised only while validating, before anything changed."""

    def __init__(self, code: str, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.index = index


def require(condition: bool, code: str, message: str, index: int | None = None) -> None:
    if not condition:
        raise Refusal(code, message, index)


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def answer_bound(value: object) -> int | None:
    """A command's bound on the bytes of stored values its answer carries (`maxAnswerBytes` of kv
    and transaction, `maxBytes` of pop); None, as in entries from before it existed, is no bound."""
    require(value is None or (is_int(value) and value >= 1), "bad_request",
            "maxAnswerBytes and maxBytes must be positive integers")
    return value
