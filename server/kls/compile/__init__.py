"""Compile: nvcc check/build of a rendered instance, errors mapped home, content-addressed cache."""

from kls.compile.run import CompileOptions, CompileResult, compile_instance

__all__ = ["CompileOptions", "CompileResult", "compile_instance"]
