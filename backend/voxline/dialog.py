"""A session's conversation as the LLM sees it: bounded history, and what the user actually heard of a reply.

The history is the model's only memory, so after a barge-in it must hold the words the user heard, not the words
the model wrote: otherwise the next answer refers to things never said ("as I mentioned..."). `heard_text` cuts
a reply to its audio position using the duration of each synthesized clause.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

DEFAULT_MAX_EXCHANGES = 6
"""User/assistant exchanges kept; a spoken conversation rarely refers further back, and each costs prompt time."""
DEFAULT_MAX_CHARS = 3000
"""Character budget of the kept history (about 750 tokens): long answers push old exchanges out sooner."""
PLAYED_TOLERANCE_MS = 6.0
"""A clause counts as fully heard this close to its end: players report positions rounded to their render quantum
(128 samples, 5.3 ms at 24 kHz) and in milliseconds, and no word is this short."""


@dataclass(frozen=True)
class Message:
    """One chat message."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class Exchange:
    """A user turn and the assistant's reply as heard (empty when the user cut it off before any audio)."""

    user: str
    assistant: str


class DialogHistory:
    """The last exchanges of one session, oldest dropped first when over either bound."""

    def __init__(self, max_exchanges: int = DEFAULT_MAX_EXCHANGES, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_exchanges = max_exchanges
        self.max_chars = max_chars
        self._exchanges: deque[Exchange] = deque()

    def __len__(self) -> int:
        return len(self._exchanges)

    @property
    def exchanges(self) -> tuple[Exchange, ...]:
        return tuple(self._exchanges)

    def add(self, user: str, assistant: str) -> None:
        """Record an exchange and drop the oldest ones that no longer fit."""
        self._exchanges.append(Exchange(user, assistant))
        while len(self._exchanges) > self.max_exchanges:
            self._exchanges.popleft()
        while len(self._exchanges) > 1 and self._chars() > self.max_chars:
            self._exchanges.popleft()

    def amend_last(self, assistant: str) -> None:
        """Replace the last reply, when a late barge-in shows the user heard less of it than was recorded."""
        if self._exchanges:
            last = self._exchanges.pop()
            self._exchanges.append(Exchange(last.user, assistant))

    def messages(self, user: str) -> list[Message]:
        """The chat so far plus the new user turn (no system message: the LLM owns it, see `voxline.llm`)."""
        out: list[Message] = []
        for exchange in self._exchanges:
            out.append(Message("user", exchange.user))
            if exchange.assistant:
                # A reply cut off before any audio leaves no assistant message: the user heard nothing.
                out.append(Message("assistant", exchange.assistant))
        out.append(Message("user", user))
        return out

    def _chars(self) -> int:
        return sum(len(e.user) + len(e.assistant) for e in self._exchanges)


@dataclass(frozen=True)
class SpokenClause:
    """A clause of a reply and how long its synthesized audio lasts."""

    text: str
    duration_ms: float


def heard_text(clauses: Sequence[SpokenClause], played_ms: float) -> str:
    """The part of a reply the user heard after `played_ms` of its audio.

    Clauses that finished playing count whole. Of the clause playing at the cut, the words count in proportion to
    the time played (speech runs at a roughly even word rate within a clause), rounded down: a word is only
    counted once its share of the clause has fully played.
    """
    heard: list[str] = []
    start_ms = 0.0
    for clause in clauses:
        end_ms = start_ms + clause.duration_ms
        if played_ms >= end_ms - PLAYED_TOLERANCE_MS:
            heard.append(clause.text)
        else:
            words = clause.text.split()
            fraction = (played_ms - start_ms) / clause.duration_ms if clause.duration_ms > 0 else 0.0
            count = int(len(words) * max(fraction, 0.0))
            if count:
                heard.append(" ".join(words[:count]))
            break
        start_ms = end_ms
    return " ".join(heard)
