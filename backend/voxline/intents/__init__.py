"""Voxline's intent engine: pure Python, standard library only, deterministic.

It runs on the server and, packaged as a wheel (`voxline.intents.wheel`), in the browser through Pyodide.

    >>> from voxline.intents import builtin_grammar, recognize
    >>> recognize("Turn the volume down to 30%", builtin_grammar()).slots
    {'level': 30}

Modules, one job each: `normalize` (the normalisation spec shared with the browser), `numbers` (spoken numbers
and durations), `expression` (template syntax), `slots` (slot lists), `grammar` (skill files and their compiled
form), `trie` (the index), `recognize` (matching and endpointing), `wheel` (packaging for Pyodide).
"""

from voxline.intents.errors import GrammarError
from voxline.intents.grammar import (
    Grammar,
    builtin_grammar,
    builtin_skill_paths,
    compile_documents,
    compile_yaml,
    load_grammar,
)
from voxline.intents.normalize import normalize
from voxline.intents.recognize import Match, MatchStats, could_change, is_prefix, recognize

__all__ = [
    "Grammar",
    "GrammarError",
    "Match",
    "MatchStats",
    "builtin_grammar",
    "builtin_skill_paths",
    "compile_documents",
    "compile_yaml",
    "could_change",
    "is_prefix",
    "load_grammar",
    "normalize",
    "recognize",
]
