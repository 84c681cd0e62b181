"""An evaluation set of spoken commands (`sets/README.md`): its lines, and how a recognised intent is scored.

Shared by `voxline bench classify --set` (text) and the browser's `voxline bench intents --set` (speech).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from voxline.bench import SETS

DEFAULT_SET = SETS / "commands-en.jsonl"
KINDS = ("command", "one-word", "ood")
LANGUAGES = ("en", "zh")
"""The built-in skill packs' languages; a line without `lang` is English."""

QUERY_FILLER_WORDS = frozenset(
    "a an the some any me us my our your please now music songs song track tracks tunes by from of little bit "
    "something".split()) | frozenset("的 歌 曲 首 些 点 一 音 乐 吧".split())
"""Words dropped from both sides before free text (`query`) is compared: they carry no content, so the grammar may
keep them or not. A query left with no word counts as no query ("play some music"). Chinese is normalised one
character a token, so its fillers are characters ("周杰伦的歌" is "周杰伦")."""


@dataclass(frozen=True)
class SetItem:
    """One line of an evaluation set."""

    text: str
    intent: str | None
    """None: out of domain, nothing may act on it."""
    slots: dict
    kind: str
    also_accept: tuple[str, ...] = ()
    """Other intents the same words honestly name ("stop")."""
    lang: str = "en"
    """The language the line is in: the grammar's language its text is matched in."""

    def accepts(self, intent: str | None) -> bool:
        return intent == self.intent or (intent is not None and intent in self.also_accept)


class SetFormatError(ValueError):
    """Raised when an evaluation set file is malformed (the message names the line)."""


def first_texts(name: str, n: int) -> list[str]:
    """The `text` of the first `n` lines of the set `name` in `SETS` (any of its JSON-lines sets)."""
    with open(SETS / name, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()][:n]


def load_set(path: Path) -> list[SetItem]:
    items = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise SetFormatError(f"{path}:{number}: not JSON ({error.msg})") from None
        where = f"{path}:{number}"
        if not isinstance(row, dict) or set(row) - {"text", "intent", "slots", "kind", "also_accept", "lang"} \
                or not {"text", "intent", "kind"} <= set(row):
            raise SetFormatError(f"{where}: expected an object with text, intent, slots, kind (and also_accept, lang)")
        if not isinstance(row.get("text"), str) or not row["text"].strip():
            raise SetFormatError(f"{where}: text must be a non-empty string")
        if row.get("kind") not in KINDS:
            raise SetFormatError(f"{where}: kind must be one of {', '.join(KINDS)}")
        if not (row.get("intent") is None or isinstance(row["intent"], str)):
            raise SetFormatError(f"{where}: intent must be a string or null")
        if (row["kind"] == "ood") != (row["intent"] is None):
            raise SetFormatError(f"{where}: intent must be null exactly when kind is ood")
        if not isinstance(row.get("slots", {}), dict):
            raise SetFormatError(f"{where}: slots must be an object")
        also = row.get("also_accept", [])
        if not isinstance(also, list) or not all(isinstance(a, str) for a in also):
            raise SetFormatError(f"{where}: also_accept must be a list of intent names")
        lang = row.get("lang", "en")
        if lang not in LANGUAGES:
            raise SetFormatError(f"{where}: lang must be one of {', '.join(LANGUAGES)}")
        items.append(SetItem(row["text"], row["intent"], dict(row.get("slots", {})), row["kind"], tuple(also), lang))
    return items


def spoken_items(items: list[SetItem]) -> list[SetItem]:
    """`items`, when a speech benchmark can say and hear them all: the browser's recogniser (Whisper tiny.en) and
    the synthetic voices are English only, so a line in another language is refused, not silently misheard."""
    other = sorted({item.lang for item in items} - {"en"})
    if other:
        raise SetFormatError(f"the set has lines in {', '.join(other)}; speech benchmarks hear English only "
                             "(use `voxline bench classify --set FILE` for its text)")
    return items


def limit_items(items: list, limit: int | None) -> list:
    """`limit` items spread evenly over the file (which is grouped by intent and kind), so every part is sampled."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError("--limit must be at least 1")
    return [items[i * len(items) // limit] for i in range(limit)]


def _query_words(value: object) -> list[str]:
    from voxline.intents import normalize

    return [w for w in normalize(str(value)).split(" ") if w and w not in QUERY_FILLER_WORDS]


def slots_match(expected: dict, got: dict) -> bool:
    """Whether the slots an intent came with are the ones expected: numbers and value names equal, free text
    (`query`) equal in its content words; a slot that is absent on one side must be absent (or empty) on the other."""
    for name in set(expected) | set(got):
        want, have = expected.get(name), got.get(name)
        if name == "query":
            if _query_words(want or "") != _query_words(have or ""):
                return False
        elif isinstance(want, (int, float)) and not isinstance(want, bool):
            if not isinstance(have, (int, float)) or isinstance(have, bool) or float(have) != float(want):
                return False
        elif want != have:
            return False
    return True
