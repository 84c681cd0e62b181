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

Embedding the ~1,300 sentences of the built-in grammar takes ~20 s of CPU, so a built index is kept on disk
(`IndexCache`, `<cache>/neighbours/<key>.npz`) and a later start reads it in milliseconds. What it promises, and
which way its errors may go:
- The key is the sha256 of everything the vectors depend on: the exact (intent, sentence) list embedded (so the
  grammar, its slot values, `WORDINGS_PER_TEMPLATE` and `SEED`), the sha256 of the encoder's files, the batch
  size and `CACHE_FORMAT`. A file is only ever used for the inputs that produced it; a change of any input is a
  miss (a rebuild), never stale vectors.
- A file is checked when read (format, shape, dtype, unit-length rows, and its stored intents and sentences equal
  to the ones about to be used); one that fails, or cannot be read at all, is logged and counts as a miss. A
  cache error can cost a rebuild, never a crash or a wrong neighbour.
- Files are written to a temporary name and renamed into place, so a server starting beside another never reads
  half a file; a cache that cannot be written is logged and the index is used from memory.
- At most `KEPT_INDEXES` files are kept (the most recently written or read): an old grammar's index is rebuilt
  if it comes back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from voxline import paths
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
CACHE_FORMAT = 1
"""Part of every cache key: raise it when the file layout or what goes into the vectors changes."""
KEPT_INDEXES = 8
"""Index files kept in the cache (one per grammar and encoder; ~2 MB each for the built-in grammar)."""
STALE_PART_S = 3600
"""A temporary file older than this was left by a server killed while writing it (a write takes milliseconds)."""
ENCODER_FILES = ("model.safetensors", "tokenizer.json")
"""What `SentenceEncoder` reads from its folder, so what an index's vectors depend on."""

log = logging.getLogger(__name__)


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
    """(intent, sentence) for a seeded sample of every template's wordings, slots filled with typical values. Each
    template's sample is seeded by its own text, so a template added or changed leaves the others' samples as they
    were (one generator for all made every later template's sample move)."""
    language = grammar.language(lang)
    examples: dict[tuple[str, str], None] = {}
    for template in language.templates:
        wordings = list(template.expansions)
        if len(wordings) > WORDINGS_PER_TEMPLATE:
            wordings = random.Random(f"{SEED}:{template.text}").sample(wordings, WORDINGS_PER_TEMPLATE)
        for wording in wordings:
            words = [typical_value(language.lists[e.list_name]) if isinstance(e, SlotRef) else e for e in wording]
            examples[(template.intent, " ".join(words))] = None
    return list(examples)


def embed(encoder, sentences: list[str], batch: int) -> np.ndarray:
    """One unit vector per sentence, in their order."""
    # Batches of similar lengths pad little; the vectors go back to the sentences' order.
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    vectors = np.concatenate([encoder.encode([sentences[i] for i in order[start:start + batch]])
                              for start in range(0, len(order), batch)])
    placed = np.empty_like(vectors)
    placed[order] = vectors
    return placed


def index_dir() -> Path:
    """Where built indexes live: `<cache>/neighbours/`, named by their key."""
    return paths.cache_dir() / "neighbours"


def encoder_digest(folder: Path) -> str:
    """The sha256 of the encoder's files (names and contents): hashed, not taken from the manifest's pins, so an
    altered or rebuilt model can never meet vectors of another (~0.1 s for MiniLM's 87 MiB)."""
    digest = hashlib.sha256()
    for name in ENCODER_FILES:
        digest.update(name.encode() + b"\0")
        with open(Path(folder) / name, "rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()


def index_key(examples: list[tuple[str, str]], encoder: str, batch: int) -> str:
    """The sha256 of everything an index's vectors depend on (`encoder`: `encoder_digest`)."""
    inputs = [CACHE_FORMAT, WORDINGS_PER_TEMPLATE, batch, encoder, examples]
    return hashlib.sha256(json.dumps(inputs, ensure_ascii=False).encode()).hexdigest()


@dataclass(frozen=True)
class IndexCache:
    """Built indexes on disk, for the encoder whose files hash to `encoder_digest` (see the module's docstring for
    what it promises)."""

    encoder_digest: str
    folder: Path = field(default_factory=index_dir)

    @classmethod
    def for_encoder(cls, folder: Path) -> IndexCache:
        return cls(encoder_digest(folder))

    def path(self, examples: list[tuple[str, str]], batch: int) -> Path:
        return self.folder / f"{index_key(examples, self.encoder_digest, batch)}.npz"

    def load(self, path: Path, examples: list[tuple[str, str]]) -> np.ndarray | None:
        """The vectors stored at `path` for exactly `examples`; None when absent, unreadable or of other inputs."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                vectors = stored["vectors"]
                intents, sentences = stored["intents"].tolist(), stored["sentences"].tolist()
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a bad file costs a rebuild, never the server
            log.warning("intent neighbours: cache file %s unreadable, rebuilding it", path, exc_info=True)
            return None
        if (vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(examples)
                or list(zip(intents, sentences)) != examples
                or not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)):
            log.warning("intent neighbours: cache file %s holds another index, rebuilding it", path)
            return None
        try:
            os.utime(path)  # used: the last to be pruned
        except OSError:
            pass
        return vectors

    def store(self, path: Path, examples: list[tuple[str, str]], vectors: np.ndarray) -> None:
        """Write `path` whole or not at all (temporary file, then rename); a failure is logged, not raised."""
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.folder, delete=False, suffix=".part") as handle:
                tmp = handle.name
                np.savez(handle, vectors=vectors.astype(np.float32),
                         intents=np.array([intent for intent, _ in examples], dtype=str),
                         sentences=np.array([sentence for _, sentence in examples], dtype=str))
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except Exception:  # noqa: BLE001 - the index works from memory
            log.warning("intent neighbours: index not cached in %s", self.folder, exc_info=True)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return
        self._prune()

    def _prune(self) -> None:
        def used(path: Path) -> float:
            try:
                return path.stat().st_mtime
            except OSError:  # removed meanwhile by another server's prune
                return time.time()

        stale = [part for part in self.folder.glob("*.part") if used(part) < time.time() - STALE_PART_S]
        for old in sorted(self.folder.glob("*.npz"), key=used, reverse=True)[KEPT_INDEXES:] + stale:
            try:
                old.unlink(missing_ok=True)
            except OSError:
                log.warning("intent neighbours: old index %s not removed", old, exc_info=True)


class IntentNeighbours:
    """The nearest-intent index of one language of a grammar, embedded with `encoder` at construction, or read
    from `cache` when it holds the index of these very inputs."""

    def __init__(self, encoder, grammar: Grammar, lang: str = "en", batch: int = 64, *,
                 cache: IndexCache | None = None) -> None:
        started = time.perf_counter()
        self.encoder = encoder
        examples = example_sentences(grammar, lang)
        self.intents = sorted({intent for intent, _ in examples})
        self._owner = np.array([self.intents.index(intent) for intent, _ in examples])
        path = cache.path(examples, batch) if cache is not None else None
        vectors = cache.load(path, examples) if cache is not None else None
        self.loaded_from = path if vectors is not None else None  # None: embedded here
        if vectors is None:
            vectors = embed(encoder, [sentence for _, sentence in examples], batch)
            if cache is not None:
                cache.store(path, examples, vectors)
        self._vectors = vectors
        log.info("intent neighbours: %d examples %s in %.2f s", len(examples),
                 f"read from {path}" if self.loaded_from else "embedded", time.perf_counter() - started)

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
