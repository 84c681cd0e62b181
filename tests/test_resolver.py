"""The server's intent resolution cache: it answers exactly what the grammar answers, and forgets misses."""

from __future__ import annotations

import pytest

from voxline.intents import builtin_grammar, recognize
from voxline.server.resolver import IntentResolver


class Clock:
    """A hand-driven monotonic clock (time is an input of the cache, not a model)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def grammar():
    return builtin_grammar()


def test_a_command_resolves_like_recognize_and_is_cached(grammar):
    resolver = IntentResolver(grammar)
    first = resolver.resolve("Pause the music", "en")
    second = resolver.resolve("pause the music!", "en")  # same normalised text
    assert first.match == recognize("Pause the music", grammar) and first.match.intent == "media.pause"
    assert not first.cached and second.cached
    assert second.match == first.match


def test_a_miss_is_remembered_until_its_ttl(grammar):
    clock = Clock()
    resolver = IntentResolver(grammar, negative_ttl_s=30.0, clock=clock)
    assert resolver.resolve("what is the capital of France", "en").match is None
    clock.now += 29.0
    assert resolver.resolve("what is the capital of France", "en").cached
    clock.now += 2.0
    again = resolver.resolve("what is the capital of France", "en")
    assert again.match is None and not again.cached
    assert (resolver.hits, resolver.misses) == (1, 2)


def test_matches_do_not_expire(grammar):
    clock = Clock()
    resolver = IntentResolver(grammar, negative_ttl_s=1.0, clock=clock)
    resolver.resolve("next song", "en")
    clock.now += 10_000.0
    assert resolver.resolve("next song", "en").cached


def test_languages_are_cached_apart(grammar):
    resolver = IntentResolver(grammar)
    assert resolver.resolve("暂停音乐", "zh").match.intent == "media.pause"
    assert resolver.resolve("暂停音乐", "en").match is None


def test_the_cache_is_bounded_least_recently_used_first(grammar):
    resolver = IntentResolver(grammar, max_entries=2)
    resolver.resolve("pause", "en")
    resolver.resolve("mute", "en")
    resolver.resolve("pause", "en")  # now the most recent
    resolver.resolve("unmute", "en")
    assert len(resolver) == 2
    assert resolver.resolve("pause", "en").cached
    assert not resolver.resolve("mute", "en").cached
