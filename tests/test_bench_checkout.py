"""`voxline bench` reaches the benchmarks that drive Chromium in the checkout's e2e/bench/, and outside a checkout
says what they need; their options parse anywhere."""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from voxline.cli import BROWSER_BENCHES, build_parser

CHECKOUT = Path(__file__).resolve().parents[1]


def subcommand(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
    for name in names:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


@pytest.mark.parametrize("name", BROWSER_BENCHES)
def test_each_browser_bench_is_a_module_of_the_checkout_with_a_main(name):
    module = importlib.import_module(f"e2e.bench.{name.replace('-', '_')}")
    assert Path(module.__file__).parent == CHECKOUT / "e2e" / "bench"
    assert callable(module.main)
    assert build_parser().parse_args(["bench", name]).bench_command == name


def test_the_load_page_choices_are_the_benchmarks_own():
    from e2e.bench.load_page import RETURNING_MODES
    from e2e.bench.proxy import PROFILES

    choices = {a.dest: a.choices for a in subcommand(build_parser(), "bench", "load-page")._actions}
    assert set(choices["profile"]) == set(PROFILES)
    assert set(choices["returning"]) == set(RETURNING_MODES)


def test_load_page_compares_the_demo_page_with_other_settings_only(capsys):
    """`--baseline-query` visits the demo page twice over (its settings come from its URL); the widget has none."""
    from e2e.bench.load_page import main

    args = build_parser().parse_args(["bench", "load-page", "--baseline-query", "&vx.runtimeFirst=0", "--rounds", "2",
                                      "--page", "widget"])
    assert (args.baseline_query, args.rounds) == ("&vx.runtimeFirst=0", 2)
    assert main(args) == 2
    assert "compares the demo page" in capsys.readouterr().err


@pytest.fixture(scope="module")
def installed_elsewhere(tmp_path_factory):
    """The package copied alone into a folder outside the checkout, as a wheel installs it."""
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(CHECKOUT / "backend" / "voxline", site / "voxline", ignore=shutil.ignore_patterns("__pycache__"))
    found = subprocess.run([sys.executable, "-c", "import voxline; print(voxline.__file__)"], cwd=site,
                           env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
    assert Path(found.stdout.strip()).parent == site / "voxline"
    return site


def voxline(site: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, "-m", "voxline.cli", *argv], cwd=site, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", BROWSER_BENCHES)
def test_outside_a_checkout_a_browser_bench_says_it_needs_one(installed_elsewhere, name):
    done = voxline(installed_elsewhere, "bench", name)
    assert done.returncode == 2, done.stderr
    assert f"`voxline bench {name}` drives Chromium" in done.stderr
    assert "checkout" in done.stderr and "pip install -e '.[bench,test]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_outside_a_checkout_the_browser_benches_options_still_parse(installed_elsewhere):
    done = voxline(installed_elsewhere, "bench", "load-page", "--help")
    assert done.returncode == 0, done.stderr
    assert "--returning {same-context,same-profile,restart}" in done.stdout
    assert "--profile {50mbit-40ms}" in done.stdout
