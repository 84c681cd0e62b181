"""Server-side intent resolution with a small cache in front of the grammar.

Spoken traffic repeats itself: the same questions and the same out-of-grammar chatter come back many times. The
cache keys on (grammar version, language, normalised text), so it can only ever answer what `recognize` answered
for that exact input: a hit is never wrong, a miss only costs the grammar walk. Matches stay until evicted (the
grammar is fixed for the life of its version); negative entries expire after `NEGATIVE_TTL_S`, so a sentence
that failed once skips the grammar while it is being repeated, without growing the cache for ever.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from voxline.intents import Grammar, Match, normalize, recognize

NEGATIVE_TTL_S = 60.0
"""How long "not a command" is remembered for one sentence."""
MAX_ENTRIES = 4096
"""Least recently used entries go first past this many."""


@dataclass(frozen=True)
class Resolution:
    """The outcome for one utterance."""

    match: Match | None
    cached: bool
    """Whether the cache answered (the grammar was not walked)."""


class IntentResolver:
    """`recognize` behind an LRU cache with expiring negative entries; one instance is shared by all sessions."""

    def __init__(
        self,
        grammar: Grammar,
        *,
        negative_ttl_s: float = NEGATIVE_TTL_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.grammar = grammar
        self.negative_ttl_s = negative_ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str, str], tuple[Match | None, float]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        # The same utterances come back verbatim, so their normal form is remembered too (it costs more than
        # the cache lookup it keys).
        self._normalize = functools.lru_cache(maxsize=max_entries)(normalize)

    def resolve(self, text: str, lang: str) -> Resolution:
        """The command `text` is in `lang`, or a Resolution with no match."""
        key = (self.grammar.version, lang, self._normalize(text))
        now = self._clock()
        entry = self._entries.get(key)
        if entry is not None and entry[1] > now:
            self._entries.move_to_end(key)
            self.hits += 1
            return Resolution(entry[0], cached=True)
        self.misses += 1
        match = recognize(text, self.grammar, lang)
        expires = float("inf") if match is not None else now + self.negative_ttl_s
        self._entries[key] = (match, expires)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return Resolution(match, cached=False)

    def __len__(self) -> int:
        return len(self._entries)
