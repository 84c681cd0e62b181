"""Voxline: a low-latency voice assistant stack (backend, model supply chain, CLI)."""

__version__ = "0.1.0"
