"""The browser wheel: pure Python, self-contained, deterministic, and it recognises with no YAML around."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile

import pytest

from voxline.intents import builtin_grammar, recognize
from voxline.intents.wheel import build_wheel

# Runs in a bare interpreter (-S: no site-packages, so neither PyYAML nor the editable voxline is importable).
PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
try:
    import yaml
    has_yaml = True
except ImportError:
    has_yaml = False
import voxline
from voxline.intents import builtin_grammar, is_prefix, recognize
from voxline.intents.grammar import COMPILED_BUILTIN_PATH
grammar = builtin_grammar()
match = recognize("Turn the volume down to 30%", grammar)
zh = recognize("打开厨房的灯", grammar, "zh")
print(json.dumps({
    "has_yaml": has_yaml,
    "voxline_file": voxline.__file__,
    "compiled_shipped": COMPILED_BUILTIN_PATH.is_file(),
    "version": grammar.version,
    "match": match.to_dict(),
    "zh": zh.to_dict(),
    "prefix": is_prefix("turn the volume", grammar),
    "none": recognize("what's the tallest mountain", grammar),
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return build_wheel(tmp_path_factory.mktemp("dist"))


def test_wheel_name_and_layout(wheel):
    assert wheel.name.endswith("-py3-none-any.whl") and wheel.name.startswith("voxline_intents-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "voxline/__init__.py" in names and "voxline/errors.py" in names
    assert "voxline/intents/recognize.py" in names and "voxline/intents/skills/builtin.json" in names
    assert not [n for n in names if n.endswith((".yaml", ".pyc"))]
    assert "voxline/intents/wheel.py" not in names
    (dist_info,) = {n.split("/")[0] for n in names if ".dist-info/" in n}
    assert {f"{dist_info}/{f}" for f in ("METADATA", "WHEEL", "RECORD")} <= set(names)


def test_record_lists_every_file_with_its_hash(wheel):
    archive = zipfile.ZipFile(wheel)
    record_name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
    rows = [line.split(",") for line in archive.read(record_name).decode().splitlines()]
    assert {row[0] for row in rows} == set(archive.namelist())
    for name, digest, size in rows:
        if name == record_name:
            assert digest == size == ""
            continue
        data = archive.read(name)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={expected}" and int(size) == len(data)


def test_wheel_metadata(wheel):
    archive = zipfile.ZipFile(wheel)
    wheel_file = next(n for n in archive.namelist() if n.endswith(".dist-info/WHEEL"))
    text = archive.read(wheel_file).decode()
    assert "Root-Is-Purelib: true" in text and "Tag: py3-none-any" in text


def test_shipped_grammar_is_the_builtin_one(wheel):
    shipped = json.loads(zipfile.ZipFile(wheel).read("voxline/intents/skills/builtin.json"))
    assert shipped == builtin_grammar().to_dict()


def test_build_is_deterministic(wheel, tmp_path):
    again = build_wheel(tmp_path)
    assert again.read_bytes() == wheel.read_bytes()


def test_installed_wheel_recognises_without_yaml(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    result = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(site)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["has_yaml"] is False
    assert report["voxline_file"].startswith(str(site))
    assert report["compiled_shipped"] is True
    assert report["version"] == builtin_grammar().version
    assert report["match"]["intent"] == "media.volume_set" and report["match"]["slots"] == {"level": 30}
    assert report["zh"]["intent"] == "lights.on" and report["zh"]["slots"] == {"area": "kitchen"}
    assert report["prefix"] is True and report["none"] is None


def test_a_server_with_its_own_skill_files_ships_their_grammar_to_the_page(tmp_path):

    from voxline.config import Settings
    from voxline.intents import builtin_skill_paths
    from voxline.server.app import IntentsWheel

    mine = tmp_path / "mine.yaml"
    mine.write_text("language: en\nintents:\n  home.coffee:\n    sentences: ['(make|brew) [me] [a] coffee']\n")
    settings = Settings(skill_files=",".join(str(p) for p in [*builtin_skill_paths(), mine]))
    grammar = settings.grammar()
    assert recognize("brew me a coffee", grammar).intent == "home.coffee"
    assert recognize("pause the music", grammar).intent == "media.pause"
    built = IntentsWheel.build(settings)
    assert built.grammar_version == grammar.version != IntentsWheel.build(Settings()).grammar_version
    wheel_path = tmp_path / built.file_name
    wheel_path.write_bytes(built.data)
    compiled = json.loads(zipfile.ZipFile(wheel_path).read("voxline/intents/skills/builtin.json"))
    assert "home.coffee" in compiled["languages"]["en"]["intents"]
