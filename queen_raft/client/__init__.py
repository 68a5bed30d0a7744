"""The Python SDK of queen-raft: async, on aiohttp, failover across node URLs (docs/sdk.md).

    async with Queen(urls=["http://127.0.0.1:6632", "http://127.0.0.1:6633"], token="...") as q:
        await q.timer("reminders").key("order-9137").delay("24h").payload({"orderId": 9137}).schedule()
"""

from queen_raft.client.admin_results import QueueOptions, Usage
from queen_raft.client.batch import BatchInterrupted, TimerRow
from queen_raft.client.consumer import Message
from queen_raft.client.durations import Duration, DurationLike, duration_ms, duration_seconds
from queen_raft.client.errors import (
    AckRefused, AnswerTooLarge, AuthError, BadRequest, Conflict, ConnectionFailed, Forbidden, HorizonExceeded, LimitExceeded,
    NotFound, OutcomeUnknown, PayloadTooLarge, PreconditionFailed, PushRefused, QueenError, QuotaExceeded,
    RateLimited, Refused, ServerError, TimersDisabled, TransactionRefused, Unauthorized, Unavailable,
)
from queen_raft.client.pop_round import Batch, PopRound, Settlement
from queen_raft.client.queen import Queen, Record
from queen_raft.client.results import (AckResult, DlqPage, DlqRow, KvEntry, LeaseExtension, PushResult, TimerPage,
                                      TimerPeek, TimerResult, TransactionItemResult, TransactionResult)
from queen_raft.client.transport import RetryPolicy

__all__ = [
    "Queen", "RetryPolicy", "Message", "Batch", "PopRound", "Settlement", "Record", "Duration", "DurationLike", "duration_ms", "duration_seconds",
    "TimerRow", "BatchInterrupted", "AckResult", "TransactionItemResult", "Usage", "QueueOptions",
    "TimerResult", "TimerPeek", "TimerPage", "PushResult", "KvEntry", "TransactionResult", "LeaseExtension", "DlqRow",
    "DlqPage",
    "QueenError", "AuthError", "Unauthorized", "Forbidden", "BadRequest", "LimitExceeded", "QuotaExceeded",
    "HorizonExceeded", "PayloadTooLarge", "AnswerTooLarge", "RateLimited", "Unavailable", "TimersDisabled", "NotFound", "Conflict",
    "PreconditionFailed", "ServerError", "Refused", "TransactionRefused", "AckRefused", "PushRefused",
    "OutcomeUnknown", "ConnectionFailed",
]
