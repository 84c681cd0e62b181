"""The benchmarks that drive Chromium (`voxline bench asr|intents|cutoffs|turn|load-page`), on the e2e harness.

They live in the checkout, not in the `voxline` package: they need Chromium, Playwright (the `test` extra) and
`e2e/harness.py`. `voxline bench NAME` imports them from the checkout the running package comes from (an editable
install); the benchmarks that need no browser, the evaluation sets and the test audio stay in `voxline.bench`.
"""
