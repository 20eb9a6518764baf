"""Exceptions for libfathom's status codes.

Every C function that fails returns a negative ``fathom_status`` and leaves a
message for the calling thread (``fathom_last_error``). The binding raises the
subclass of :class:`FathomError` for that status; it carries the status code,
the library's fixed name for it (``fathom_status_name``) and the message.
Arguments the Python layer rejects before calling C (a wrong dtype, shape or
memory layout) raise ``TypeError`` or ``ValueError`` instead.
"""


class FathomError(Exception):
    """A libfathom call failed.

    ``status`` is the negative C status code, ``status_name`` its name as
    ``fathom_status_name`` gives it (e.g. ``"invalid argument"``), ``message``
    the text of ``fathom_last_error`` at the failure.
    """

    status = None  # set on each subclass; an unknown code keeps the instance's

    def __init__(self, status, status_name, message):
        Exception.__init__(self, f"{status_name}: {message}" if message else status_name)
        self.status = status
        self.status_name = status_name
        self.message = message

    def __str__(self):
        return f"{self.status_name}: {self.message}" if self.message else self.status_name

    def __reduce__(self):
        return (type(self), (self.status, self.status_name, self.message))


class InvalidArgumentError(FathomError, ValueError):
    """FATHOM_ERR_INVALID_ARG: a NULL pointer, zero size or out-of-range value."""

    status = -1


class OutOfMemoryError(FathomError, MemoryError):
    """FATHOM_ERR_NOMEM: an allocation failed or a size overflowed."""

    status = -2


class FathomIOError(FathomError, OSError):
    """FATHOM_ERR_IO: open, read, write or mmap failed."""

    status = -3

    def __init__(self, status, status_name, message):  # OSError's own init reads errno from args
        FathomError.__init__(self, status, status_name, message)


class FormatError(FathomError):
    """FATHOM_ERR_FORMAT: a file (capture, GGUF) is malformed."""

    status = -4


class NonFiniteError(FathomError, ValueError):
    """FATHOM_ERR_NONFINITE: NaN or infinity where finite values are needed."""

    status = -5


class UnsupportedError(FathomError):
    """FATHOM_ERR_UNSUPPORTED: valid but not handled (a dtype, a quant type, ...)."""

    status = -6


class NumericError(FathomError, ArithmeticError):
    """FATHOM_ERR_NUMERIC: LAPACK or another numeric routine failed."""

    status = -7


class StateError(FathomError):
    """FATHOM_ERR_STATE: the object is not in a state that allows the call."""

    status = -8


class DeviceError(FathomError):
    """FATHOM_ERR_DEVICE: a CUDA call failed or no device is present."""

    status = -9


ERRORS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        OutOfMemoryError,
        FathomIOError,
        FormatError,
        NonFiniteError,
        UnsupportedError,
        NumericError,
        StateError,
        DeviceError,
    )
}


def error_for(status, status_name, message):
    """The exception instance for a negative status code."""
    return ERRORS.get(status, FathomError)(status, status_name, message)
