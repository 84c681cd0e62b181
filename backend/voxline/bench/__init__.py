"""Benchmarks (`voxline bench ...`) and the test-audio and browser tools they share with the e2e tests."""
