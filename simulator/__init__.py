"""rlsim: a discrete-event cluster simulator for LLM reinforcement-learning post-training.

Public Python API (the same functions the CLI calls) is re-exported here as it is built.
"""
from .errors import RlsimError

__version__ = "0.1.0"
__all__ = ["RlsimError", "__version__"]
