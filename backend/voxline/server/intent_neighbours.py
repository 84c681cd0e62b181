"""Which intents an utterance is nearest to in meaning: a second opinion beside the LLM classifier.

The grammar's own sentences are the examples: every template of a language, each wording expanded (a bounded,
seeded sample of them) with every slot filled by a typical value ("the kitchen", "fifty", "ten minutes"), embedded
once with a sentence encoder (`voxline.sentence_encoder`, all-MiniLM-L6-v2). An utterance is embedded the same way;
an intent's similarity is its best example's cosine, and the verdict names the nearest intent, its similarity and
its margin over the next intent. Nothing here is written for an evaluation list: a grammar a user extends gets
neighbours for its new intents the same way.

Sentence embeddings place sentences by topic as much as by act ("the music was too loud yesterday" is near "turn
the volume down"), and near opposites (mute / unmute) close together, so a neighbour alone never decides: the
classifier accepts a command the LLM was unsure of only when both name the same intent (`intent_classifier`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from voxline.intents import Grammar
from voxline.intents.expression import SlotRef
from voxline.intents.slots import DurationRange, NumberRange, ValueList, Wildcard

WORDINGS_PER_TEMPLATE = 12
"""Expanded wordings kept per template (a seeded sample): enough to cover its alternatives' words, few enough that
the index is embedded in seconds."""
SEED = 0
TYPICAL_DURATION_S = 600
FILLER_TEXT = "something"
"""What fills a free-text slot in an example sentence."""


@dataclass(frozen=True)
class Neighbour:
    """The nearest intent to an utterance."""

    intent: str
    similarity: float
    """Cosine similarity of the utterance to the intent's nearest example (-1..1)."""
    margin: float
    """`similarity` minus the next intent's."""


def typical_value(slot_list) -> str:
    """A spoken value of `slot_list` to fill example sentences with."""
    if isinstance(slot_list, ValueList):
        return slot_list.values[0].synonyms[0]
    if isinstance(slot_list, NumberRange):
        return slot_list.spoken(round((slot_list.min + slot_list.max) / 2), slot_list.lang)
    if isinstance(slot_list, DurationRange):
        return slot_list.spoken(min(max(TYPICAL_DURATION_S, slot_list.min), slot_list.max), slot_list.lang)
    if isinstance(slot_list, Wildcard):
        return FILLER_TEXT
    raise TypeError(f"no typical value for {type(slot_list).__name__}")


def example_sentences(grammar: Grammar, lang: str = "en") -> list[tuple[str, str]]:
    """(intent, sentence) for a seeded sample of every template's wordings, slots filled with typical values."""
    language = grammar.language(lang)
    rng = random.Random(SEED)
    examples: dict[tuple[str, str], None] = {}
    for template in language.templates:
        wordings = list(template.expansions)
        if len(wordings) > WORDINGS_PER_TEMPLATE:
            wordings = rng.sample(wordings, WORDINGS_PER_TEMPLATE)
        for wording in wordings:
            words = [typical_value(language.lists[e.list_name]) if isinstance(e, SlotRef) else e for e in wording]
            examples[(template.intent, " ".join(words))] = None
    return list(examples)


class IntentNeighbours:
    """The nearest-intent index of one language of a grammar, embedded with `encoder` at construction."""

    def __init__(self, encoder, grammar: Grammar, lang: str = "en", batch: int = 64) -> None:
        self.encoder = encoder
        examples = example_sentences(grammar, lang)
        self.intents = sorted({intent for intent, _ in examples})
        self._owner = np.array([self.intents.index(intent) for intent, _ in examples])
        sentences = [sentence for _, sentence in examples]
        # Batches of similar lengths pad little; the vectors go back to the examples' order.
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
        vectors = np.concatenate([encoder.encode([sentences[i] for i in order[start:start + batch]])
                                  for start in range(0, len(order), batch)])
        self._vectors = np.empty_like(vectors)
        self._vectors[order] = vectors

    def __len__(self) -> int:
        return len(self._owner)

    def nearest(self, utterance: str) -> Neighbour | None:
        """The nearest intent to `utterance` (None for an empty one or a grammar of one intent)."""
        if not utterance.strip() or len(self.intents) < 2:
            return None
        similarities = self._vectors @ self.encoder.encode([utterance])[0]
        best = np.full(len(self.intents), -np.inf)
        np.maximum.at(best, self._owner, similarities)
        first, second = np.argsort(best)[::-1][:2]
        return Neighbour(self.intents[first], float(best[first]), float(best[first] - best[second]))
