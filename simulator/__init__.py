"""rlsim: a discrete-event cluster simulator for LLM reinforcement-learning post-training.

Public Python API (the same functions the CLI calls) is re-exported here as it is built.
"""
from .errors import RlsimError
from .version import __version__

__all__ = ["RlsimError", "__version__", "simulate", "compare", "SimulationResult", "ComparisonResult"]


def __getattr__(name: str):
    # Lazy: `import simulator` stays light; simulate / compare load the models on first use.
    if name in ("simulate", "compare", "SimulationResult", "ComparisonResult"):
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")
