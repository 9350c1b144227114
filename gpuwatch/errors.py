"""The one exception type the CLI turns into a one-line message and an exit code."""

from __future__ import annotations


class CliError(Exception):
    """A user error: printed as ``gpuwatch: error: MESSAGE``, exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code
