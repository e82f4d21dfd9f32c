"""Checks: static (text only), render-time (per instance), rendered CUDA syntax; noqa."""

from kls.checks.run import CheckResult, check_file, check_paths

__all__ = ["CheckResult", "check_file", "check_paths"]
