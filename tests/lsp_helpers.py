"""Moved to tests/e2e/helpers.py (one `wait_diagnostics`); kept for tests that import it."""

from tests.e2e.helpers import (
    SERVER,
    change_doc,
    diagnostics_for,
    initialize,
    open_doc,
    wait_diagnostics,
)

__all__ = ["SERVER", "change_doc", "diagnostics_for", "initialize", "open_doc", "wait_diagnostics"]
