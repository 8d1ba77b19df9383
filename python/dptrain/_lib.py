"""The compiled extension (ffi, lib), the module's exception and the status check."""

import os
import sys

# Open MPI loads its components with dlopen and expects libmpi's symbols to be global; Python
# opens extension modules RTLD_LOCAL, so the library (and libmpi with it) is loaded global.
_flags = sys.getdlopenflags()
sys.setdlopenflags(_flags | os.RTLD_GLOBAL)
try:
    from dptrain._dptrain_cffi import ffi, lib  # noqa: E402
finally:
    sys.setdlopenflags(_flags)


class Error(RuntimeError):
    """A dptrain call failed: `status` is the dpt_status value, `name` its symbol
    ("DPT_ERR_IO"), `message` the library's detailed message (dpt_last_error)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.name = ffi.string(lib.dpt_status_name(status)).decode()
        self.message = message
        short = ffi.string(lib.dpt_status_str(status)).decode()
        super().__init__(f"{short}: {message}" if message else short)


def last_error():
    """The calling thread's last error message."""
    return ffi.string(lib.dpt_last_error()).decode(errors="replace")


def check(status, message=None):
    """Raises Error for a failed status, with the library's message (or `message`)."""
    if status != lib.DPT_OK:
        raise Error(status, message if message is not None else last_error())


def cstr(text):
    """A Python str as a NUL-terminated char array kept alive by the caller (or NULL)."""
    return ffi.NULL if text is None else ffi.new("char[]", os.fsencode(text))


def string(ptr):
    return None if ptr == ffi.NULL else ffi.string(ptr).decode(errors="replace")
