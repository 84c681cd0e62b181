"""The protocol has one source, voxline/server/protocol.py: the page's copy (web/voxline/protocol.js) is generated
from it, the page's modules use that copy instead of literals of their own, and docs/protocol.md agrees with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from voxline import client, errors
from voxline.server import protocol as p
from voxline.server import protocol_js

ROOT = Path(__file__).resolve().parents[1]
GENERATED = ROOT / "web" / "voxline" / "protocol.js"
DOC = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
PAGE_MODULES = sorted([*(ROOT / "web" / "voxline").glob("*.js"), *(ROOT / "web" / "widget").glob("*.js")])
"""The page's modules (the demo page, the widget and the core): none may spell a protocol name itself."""
PROTOCOL_USERS = ["link.js", "events.js", "voxline.js", "state.js", "assistant.js"]
"""Modules that speak the protocol or hand out its names; error code literals are checked in these (the workers
have page-local codes of their own, some of which the server also uses, e.g. `asr_failed`)."""


def _code(path: Path) -> str:
    """A JS module without its comments (a `//` inside a string cuts that line short: harmless for these checks)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(encoding="utf-8"), flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def test_the_committed_browser_copy_is_what_the_python_generates():
    assert GENERATED.read_text(encoding="utf-8") == protocol_js.render(), (
        f"web/voxline/protocol.js is stale: run `{protocol_js.COMMAND}`")


def test_a_python_change_alone_makes_the_copies_differ(monkeypatch):
    monkeypatch.setattr(p, "CLOSE_IDLE_TIMEOUT", 4409)
    assert GENERATED.read_text(encoding="utf-8") != protocol_js.render()
    monkeypatch.setattr(p, "BROWSER_EVENTS", {**p.BROWSER_EVENTS, "voxline:new": "a new event"})
    assert "new: 'voxline:new'" in protocol_js.render()


def test_a_browser_edit_alone_fails_the_check(tmp_path, capsys):
    edited = tmp_path / "protocol.js"
    edited.write_text(GENERATED.read_text(encoding="utf-8").replace("IDLE_TIMEOUT: 4408", "IDLE_TIMEOUT: 4409"))
    assert protocol_js.main(["--check", str(edited)]) == 1
    assert "stale" in capsys.readouterr().err
    assert protocol_js.main(["--check", str(GENERATED)]) == 0


def test_the_generated_file_says_it_is_generated_and_how():
    head = GENERATED.read_text(encoding="utf-8").splitlines()[:3]
    assert "GENERATED" in head[0] and "do not edit" in head[0]
    assert protocol_js.COMMAND in head[1]
    assert max(len(line) for line in GENERATED.read_text(encoding="utf-8").splitlines()) <= protocol_js.WIDTH


def test_page_modules_spell_no_close_code_themselves():
    closes = sorted(set(protocol_js.close_codes().values()))
    app_codes = "|".join(str(code) for code in closes if code >= 4000)
    stray = []
    for path in PAGE_MODULES:
        if path == GENERATED:
            continue
        code = _code(path)
        stray += [f"{path.name}: {m.group(0)}" for m in re.finditer(rf"\b({app_codes})\b", code)]
        # RFC 6455's codes (1000 ...) are also ordinary numbers (ms per second): only where a close code would go
        stray += [f"{path.name}: {m.group(0)}" for m in re.finditer(
            r"(close\(\s*|code\s*[!=]==?\s*|case\s+|\[\s*)(10(0\d|1[0-5]))\b", code)]
    assert stray == [], "use CLOSE from protocol.js"


def test_page_modules_spell_no_event_name_or_message_type_themselves():
    types = {*p.CLIENT_MESSAGE_TYPES, *protocol_js.message_types(p.ServerMessage).values()}
    stray = []
    for path in PAGE_MODULES:
        if path == GENERATED:
            continue
        code = _code(path)
        stray += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"""['"`]voxline:[a-z-]+['"`]""", code)]
        if path.name == "link.js":
            stray += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"(type:\s*|case\s+)'([a-z._]+)'", code)
                      if m.group(2) in types]
    assert stray == [], "use EVENTS, CLIENT_MESSAGES and SERVER_MESSAGES from protocol.js"


def test_protocol_users_spell_no_protocol_error_code_themselves():
    codes = "|".join(re.escape(code) for code in p.ERROR_CODES)
    stray = []
    for path in PAGE_MODULES:
        if path.name in PROTOCOL_USERS:
            stray += [f"{path.name}: {m.group(0)}" for m in re.finditer(rf"'({codes})'", _code(path))]
    assert stray == [], "use ERRORS from protocol.js"


def test_the_protocol_users_import_the_generated_copy():
    for name in PROTOCOL_USERS:
        (path,) = [path for path in PAGE_MODULES if path.name == name]
        assert re.search(r"from '(\./|\.\./voxline/)protocol\.js'", path.read_text(encoding="utf-8")), name


def test_every_error_the_server_can_send_is_a_wire_error():
    def family(root: type) -> set[type]:
        return {root, *(c for sub in root.__subclasses__() for c in family(sub))}

    server_sent = family(errors.ProtocolError) | family(errors.TurnError) | family(errors.ModelError)
    assert server_sent - {errors.ProtocolError} == set(p.WIRE_ERRORS)
    assert set(p.CLOSING_ERRORS) <= set(p.ERROR_CODES)


def test_the_python_client_prints_only_the_browser_event_names():
    source = Path(client.__file__).read_text(encoding="utf-8")
    names = set(re.findall(r'"(voxline:[a-z-]+)"', source))
    assert names and names <= set(p.BROWSER_EVENTS), names - set(p.BROWSER_EVENTS)


# ---------------------------------------------------------------------------------------------- docs/protocol.md


def _table(heading: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first table from `heading` on (a heading, or the table's header row)."""
    after = DOC[DOC.index(heading):]
    rows = []
    for line in after.splitlines():
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # past the header and the --- line


def test_the_docs_close_code_table_is_the_protocols():
    rows = _table("## Close codes")
    documented = {row[1].strip("`").removeprefix("CLOSE_"): int(row[0]) for row in rows}
    assert documented == protocol_js.close_codes()


def test_the_docs_error_table_has_every_wire_error_and_no_other():
    rows = _table("| code | when | then |")
    documented = set()
    for row in rows:
        documented |= set(re.findall(r"`([a-z_]+)`", row[0]))
    assert documented == {error.code for error in p.WIRE_ERRORS}


@pytest.mark.parametrize(("heading", "fields"), [("### Uplink audio frames", p.UPLINK_HEADER_FIELDS),
                                                 ("### Reply audio frames", p.REPLY_HEADER_FIELDS)])
def test_the_docs_frame_layouts_are_the_protocols(heading, fields):
    block = DOC[DOC.index(heading):].split("```")[1]
    layout = re.findall(r"offset (\d+)\s+(u8|u16|u32)\s+(\w+)", block)
    widths = {"B": "u8", "H": "u16", "I": "u32"}
    assert [(int(at), width, name) for at, width, name in layout] == [
        (p.header_offsets(fields)[name], widths[code], name) for name, code in fields]


def test_the_docs_welcome_example_has_the_fields_a_client_obeys():
    example = DOC[DOC.index("### `welcome`"):].split("```json")[1].split("```")[0]
    welcome = json.loads(example)
    for field in ("asr_confidence_gate", "max_turn_audio_s", "max_opus_turn_bytes", "max_pcm16_turn_bytes",
                  "max_frame_bytes", "max_text_chars"):
        assert field in welcome["limits"], field
    assert welcome["limits"]["max_opus_turn_bytes"] == p.MAX_OPUS_TURN_BYTES
    assert welcome["reply_audio"]["sample_rate"] == p.REPLY_AUDIO_RATE_HZ
