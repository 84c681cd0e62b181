"""The error the intent engine raises: a grammar that cannot be loaded as written."""

from __future__ import annotations

from voxline.errors import VoxlineError


class GrammarError(VoxlineError):
    """A grammar file or compiled grammar is malformed: bad template syntax, an unknown list, rule or language."""

    code = "grammar_invalid"
