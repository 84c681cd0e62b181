"""The one Voxline exception tree, shared by the server, the CLI and the Python client.

Each class carries the `code` string the browser sees in `voxline:error` and a message that says what happened
and what to do.
"""

from __future__ import annotations


class VoxlineError(Exception):
    """Base of every error Voxline raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ModelError(VoxlineError):
    """A model is missing, altered, or could not be built."""

    code = "model_unavailable"


class DigestMismatch(ModelError):
    """A downloaded package or a built artifact does not have the pinned sha256."""

    code = "digest_mismatch"


class ModelMissing(ModelError):
    """A model the configuration needs has not been built yet."""

    code = "model_missing"


class FetchError(ModelError):
    """A registry client failed to download a pinned package."""

    code = "fetch_failed"
