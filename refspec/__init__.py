"""refspec: the executable specification of Ascend RoPE and NormRopeConcat backward operators.

Pure NumPy functions that mirror the documented formulas line by line (see ``docs/``):

    y = refspec.rotary_position_embedding(x, cos, sin, mode=0)
    dx, dcos, dsin = refspec.rotary_position_embedding_grad(dy, cos, sin, x=None, mode=0)
    fwd = refspec.norm_rope_concat(query, key, value, ...)
    bwd = refspec.norm_rope_concat_backward(grad_query_output, grad_key_output, ...)

All arithmetic is float64 on the exact inputs; outputs are rounded once (half to even) to the
documented dtype, or returned exact with ``out_dtype=np.float64``. ``soc="A2"|"A3"|"950"`` adds a
chip profile's validation; rejected arguments raise ``AclnnError`` subclasses.

``import refspec`` loads the specification alone (``refspec.spec``, NumPy and ml_dtypes). The
layers above it load when first used: ``refspec.compare(golden, actual)`` (the comparator),
``refspec.ops``, ``refspec.goldens``, ``refspec.comparator``, ``refspec.testing``.
"""

import importlib

from ._version import __version__
from .spec import *  # noqa: F401,F403  (the public spec API, listed in refspec.spec.__all__)
from .spec import __all__ as _spec_all

__all__ = ["__version__", "compare", *_spec_all]

#: layers above the spec, imported on first use (PEP 562)
_LAZY_MODULES = ("ops", "goldens", "comparator", "testing", "cli")


def __getattr__(name):
    if name == "compare":
        from .comparator import compare
        return compare
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"compare", *_LAZY_MODULES})
