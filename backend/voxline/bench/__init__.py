"""Benchmarks (`voxline bench ...`) that need no browser, the evaluation sets, and the test audio they share with
the e2e tests. The benchmarks that drive Chromium live in the checkout's `e2e/bench/`, beside the e2e harness."""

from pathlib import Path

SETS = Path(__file__).with_name("sets")
"""The evaluation sets (`sets/README.md`), shipped with the package: `bench readings` reads them too."""
