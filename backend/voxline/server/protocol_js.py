"""The browser's copy of the protocol, `web/voxline/protocol.js`, generated from `voxline.server.protocol`.

    python -m voxline.server.protocol_js > web/voxline/protocol.js      # after changing the protocol
    python -m voxline.server.protocol_js --check web/voxline/protocol.js  # exit 1 when the file is stale

The output is a plain ES module of frozen constants (no imports, no logic), deterministic for a given protocol, so
the committed file can be compared with a fresh rendering (tests/test_protocol_source.py does).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import sys
import textwrap
from pathlib import Path

from voxline.server import protocol as p

COMMAND = "python -m voxline.server.protocol_js > web/voxline/protocol.js"
"""How the committed file is made; its header says so."""
WIDTH = 120
"""The generated file's longest line, as the repo's other sources."""
LIMITS = ("PCM16_UPLINK_RATE_HZ", "REPLY_AUDIO_RATE_HZ", "MAX_TEXT_CHARS", "MAX_TEXT_FRAME_BYTES",
          "MAX_TURN_AUDIO_SECONDS", "MAX_OPUS_TURN_BYTES", "MAX_PCM16_TURN_BYTES", "MAX_FRAME_BYTES")
"""The protocol's own limits: what a server of this version enforces, and what a page assumes when an older server's
`welcome` leaves one out."""


def camel(name: str) -> str:
    """`turn.audio_end` → `turnAudioEnd`, `voxline:reply-audio` → `replyAudio`, `bad_message` → `badMessage`."""
    name = name.removeprefix("voxline:")
    head, *rest = re.split(r"[._-]", name)
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def close_codes() -> dict[str, int]:
    """`CLOSE_NORMAL = 1000` … as `{"NORMAL": 1000, …}`, in the order protocol.py defines them."""
    return {name.removeprefix("CLOSE_"): value for name, value in vars(p).items()
            if name.startswith("CLOSE_") and isinstance(value, int)}


def message_types(union: object) -> dict[str, str]:
    """The `type` tags of a message union, keyed by their camel-case names (`turn.start` → `turnStart`)."""
    tags = [kind.__struct_config__.tag for kind in union.__args__]
    return {camel(tag): tag for tag in tags}


def _object(value: dict, docs: dict[str, str] | None = None, literal=None) -> str:
    """A frozen JS object literal, one entry a line, each after its one-line doc when `docs` has one."""
    literal = literal or _value
    lines = []
    for key, v in value.items():
        if docs and docs.get(key):
            lines.append(_jsdoc(docs[key], "  "))
        name = key if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", key) else json.dumps(key)
        lines.append(f"  {name}: {literal(v)},")
    return "Object.freeze({\n" + "\n".join(lines) + "\n})"


def _attribute_docs() -> dict[str, str]:
    """The docstring of each documented module constant of protocol.py (the string right after it)."""
    tree = ast.parse(inspect.getsource(p))
    docs = {}
    for node, after in zip(tree.body, tree.body[1:]):
        if (isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            text = " ".join(after.value.value.split()).replace("*/", "* /")
            for target in targets:
                if isinstance(target, ast.Name):
                    docs[target.id] = text
    return docs


def _value(value: object) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value) if not float(value).is_integer() or isinstance(value, int) else str(int(value))
    raise TypeError(f"no JS literal for {value!r}")


def _jsdoc(text: str, indent: str = "") -> str:
    """`/** text */` on one line, or wrapped into a block under 120 characters."""
    if len(indent) + len(text) + 7 <= WIDTH:
        return f"{indent}/** {text} */"
    lines = textwrap.wrap(text, WIDTH - len(indent) - 3, break_long_words=False, break_on_hyphens=False)
    return "\n".join([f"{indent}/**", *(f"{indent} * {line}" for line in lines), f"{indent} */"])


def _const(doc: str, name: str, literal: str) -> str:
    return f"{_jsdoc(doc)}\nexport const {name} = {literal};\n"


def render() -> str:
    """The whole of `web/voxline/protocol.js`."""
    docs = _attribute_docs()
    uplink = {**p.header_offsets(p.UPLINK_HEADER_FIELDS), "bytes": p.UPLINK_HEADER_BYTES}
    reply = {**p.header_offsets(p.REPLY_HEADER_FIELDS), "bytes": p.REPLY_HEADER_BYTES}
    errors = {camel(code): code for code in p.ERROR_CODES}
    events = {camel(name): name for name in p.BROWSER_EVENTS}
    event_docs = {camel(name): doc for name, doc in p.BROWSER_EVENTS.items()}
    closes = close_codes()
    close_docs = {name: docs.get(f"CLOSE_{name}", "") for name in closes}
    kinds = {"opus": p.FRAME_OPUS, "pcm16": p.FRAME_PCM16, "replyAudio": p.FRAME_REPLY_AUDIO}
    kind_docs = {"opus": docs["FRAME_OPUS"], "pcm16": docs["FRAME_PCM16"], "replyAudio": docs["FRAME_REPLY_AUDIO"]}
    sections = [
        _const(docs["PROTOCOL_VERSION"], "PROTOCOL_VERSION", _value(p.PROTOCOL_VERSION)),
        _const("The `type` of every message a client sends.", "CLIENT_MESSAGES",
               _object(message_types(p.ClientMessage))),
        _const("The `type` of every message a server sends (ignore any other: a newer server's).", "SERVER_MESSAGES",
               _object(message_types(p.ServerMessage))),
        _const("Binary frame kinds (the header's first byte).", "FRAME_KIND",
               _object(kinds, kind_docs, literal=lambda kind: f"0x{kind:02x}")),
        _const(docs["FLAG_CLAUSE_END"], "FLAG_CLAUSE_END", _value(p.FLAG_CLAUSE_END)),
        _const(_header_doc("Uplink audio", p.UPLINK_HEADER_FIELDS), "UPLINK_HEADER", _object(uplink)),
        _const(_header_doc("Reply audio", p.REPLY_HEADER_FIELDS), "REPLY_HEADER", _object(reply)),
        _const("Close codes (docs/protocol.md, \"Close codes\").", "CLOSE", _object(closes, close_docs)),
        _const(docs["CLOSING_ERRORS"], "CLOSING_ERRORS", _object(dict(p.CLOSING_ERRORS))),
        _const(docs["ERROR_CODES"], "ERRORS", _object(errors)),
        _const("The page's public events (DESIGN.md), dispatched on `document` (detail fields besides `t`, "
               "`audio_t`).", "EVENTS", _object(events, event_docs)),
    ]
    limits = [_const(docs[name], name, _value(getattr(p, name))) for name in LIMITS]
    header = ("// GENERATED from backend/voxline/server/protocol.py: do not edit. After changing the protocol, run\n"
              f"//   {COMMAND}\n"
              "// (tests/test_protocol_source.py fails while this file and the Python disagree). Described in "
              "docs/protocol.md.\n")
    limits_note = "// The limits of protocol v1, for a server whose `welcome` leaves one out.\n"
    return header + "\n" + "\n".join(sections) + "\n" + limits_note + "".join(limits)


def _header_doc(what: str, fields: tuple[tuple[str, str], ...]) -> str:
    layout = ", ".join(f"{name} {_WIDTHS[code]}" for name, code in fields)
    return f"{what} frame header: the byte offset of each field ({layout}; little-endian), and its size."


_WIDTHS = {"B": "u8", "H": "u16", "I": "u32"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m voxline.server.protocol_js", description=__doc__.splitlines()[0])
    parser.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE is not what would be generated")
    args = parser.parse_args(argv)
    text = render()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    if args.check.read_text(encoding="utf-8") != text:
        print(f"{args.check} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
