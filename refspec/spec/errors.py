"""aclnn status codes as Python exceptions (README.md, "Error codes"; docs/api.md, "Errors").

Every documented rule that rejects an input names the aclnn status an implementation
reports; refspec raises the matching subclass of ``AclnnError``.
"""

from __future__ import annotations

__all__ = [
    "AclnnError",
    "ParamNullptrError",
    "ParamInvalidError",
    "InferShapeError",
    "TilingError",
    "InnerNullptrError",
    "ERROR_CLASSES",
    "error_class_for_code",
]


class AclnnError(Exception):
    """Base class: an argument the operator (or the chosen chip profile) rejects.

    Attributes: ``code`` (the aclnn status number) and ``status`` (its aclnn name).
    """

    code: int = 0
    status: str = "ACLNN_ERR"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __reduce__(self):  # keeps subclasses picklable across worker processes
        return (type(self), (self.message,))


class ParamNullptrError(AclnnError):
    """A required tensor is missing."""

    code = 161001
    status = "ACLNN_ERR_PARAM_NULLPTR"


class ParamInvalidError(AclnnError):
    """A dtype (or other parameter value) is not allowed."""

    code = 161002
    status = "ACLNN_ERR_PARAM_INVALID"


class InferShapeError(AclnnError):
    """Shape inference failed (listed for completeness; no rule of the pack uses it)."""

    code = 561001
    status = "ACLNN_ERR_INNER_INFERSHAPE_ERROR"


class TilingError(AclnnError):
    """Shapes, modes or attributes the kernel cannot tile."""

    code = 561002
    status = "ACLNN_ERR_INNER_TILING_ERROR"


class InnerNullptrError(AclnnError):
    """Internal null pointer (listed for completeness; no rule of the pack uses it)."""

    code = 561103
    status = "ACLNN_ERR_INNER_NULLPTR"


ERROR_CLASSES = (ParamNullptrError, ParamInvalidError, InferShapeError, TilingError, InnerNullptrError)


def error_class_for_code(code: int) -> type[AclnnError]:
    """The exception class for an aclnn status number."""
    for cls in ERROR_CLASSES:
        if cls.code == int(code):
            return cls
    raise KeyError(f"unknown aclnn status code {code}")


def one_line(value) -> str:
    """``value`` (an exception or a message) as one line of text for an error message; an
    exception without a message gives its type's name."""
    text = " ".join(str(value).split())
    return text or (type(value).__name__ if isinstance(value, BaseException) else "")
