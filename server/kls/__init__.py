"""kls: editor tooling for Jinja CUDA kernel templates."""

__version__ = "0.1.0"
