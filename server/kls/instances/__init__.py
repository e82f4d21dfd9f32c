"""Instances: a template plus concrete tensors, scalars, CUTLASS op and arch, from TOML."""

from kls.instances.load import InstanceSet, find_config, load_instances
from kls.instances.schema import InstanceSpec, OpFilter, TensorSpec

__all__ = [
    "InstanceSet",
    "InstanceSpec",
    "OpFilter",
    "TensorSpec",
    "find_config",
    "load_instances",
]
