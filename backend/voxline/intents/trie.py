"""The index: every expanded template of one language merged into one token trie.

Each path from the root spells one expanded template, literal tokens on `TrieNode.words` edges and slots on
`TrieNode.slots` edges; `TrieNode.ends` says which templates end there. Matching walks the trie along the
utterance, so its cost follows the utterance and the branching it meets (the literal children are a dict lookup,
and only slot edges are tried one by one), not the number of templates: a grammar with thousands more templates
that start with other words costs the same walk.

Why it cannot change results: the trie is a lossless regrouping of the expanded templates. Every root-to-end path
is exactly one expansion and every expansion is exactly one path, and the walk abandons a branch only when the
next token is neither a child word nor the start of a value of a slot edge there, which is exactly when the
linear scan's match of every expansion through that node fails too. The pruning is necessary, not sufficient: it
can only be too lenient (enter branches that fail later), never too strict (lose a match). The test suite checks
that matching with the trie and with the linear scan (`recognize(..., index=False)`) give identical results.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxline.intents.expression import Element, SlotRef


@dataclass(frozen=True)
class TemplateEnd:
    """Where one expanded template ends: which template, and which of its expansions."""

    template: int
    """Position of the template in `LanguageGrammar.templates`."""
    expansion: int
    """Position of the expansion in `Template.expansions`."""


class TrieNode:
    """One state of the trie: the elements that may come next, and the templates complete here."""

    __slots__ = ("words", "slots", "ends")

    def __init__(self) -> None:
        self.words: dict[str, TrieNode] = {}
        self.slots: dict[SlotRef, TrieNode] = {}
        self.ends: list[TemplateEnd] = []

    def has_continuation(self) -> bool:
        """Whether some template goes on past this node."""
        return bool(self.words or self.slots)


class TemplateTrie:
    """The expanded templates of one language, merged by shared prefixes."""

    def __init__(self) -> None:
        self.root = TrieNode()
        self.size = 1
        """Number of nodes, for reports."""

    def add(self, elements: tuple[Element, ...], end: TemplateEnd) -> None:
        """Add one expanded template."""
        node = self.root
        for element in elements:
            edges = node.slots if isinstance(element, SlotRef) else node.words
            child = edges.get(element)  # type: ignore[call-overload]
            if child is None:
                child = edges[element] = TrieNode()  # type: ignore[index]
                self.size += 1
            node = child
        node.ends.append(end)
