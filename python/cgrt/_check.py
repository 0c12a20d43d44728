"""What the package puts into a C field, checked on the way in: an integer must be an integer in
the range of the field's C type (ctypes would store it modulo 2**N: a token count of 2**64 + 4
would run as 4, a buffer of -8 bytes would claim 16 EiB), a string must hold no NUL (C would read
it cut there), and what a Python callback returns must be a C int (ctypes would hand cgrt
2**32 as 0, a success). Out of range: ValueError naming the field, the value and the range; not
an integer: TypeError. cgrt itself checks what each value means (tokens must not be negative...).
"""

import ctypes
import operator
import os


def _signed(t):
    bits = ctypes.sizeof(t) * 8
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _unsigned(t):
    return (0, (1 << (ctypes.sizeof(t) * 8)) - 1)


# The C types of the fields the package fills, by the name a message gives them.
RANGES = {
    "int": _signed(ctypes.c_int),
    "int32_t": _signed(ctypes.c_int32),
    "int64_t": _signed(ctypes.c_int64),
    "uint64_t": _unsigned(ctypes.c_uint64),
    "size_t": _unsigned(ctypes.c_size_t),
    "void *": _unsigned(ctypes.c_void_p),
}


def integer(value, what, ctype):
    """`value` as a Python int that fits C type `ctype` (a RANGES key), else TypeError or
    ValueError naming `what` ("step tokens", "Buffer bytes"). Accepts what has __index__ (int,
    bool, numpy and torch integers), never a float or a string."""
    lo, hi = RANGES[ctype]
    if type(value) is int and lo <= value <= hi:
        return value  # the common case, first
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{what} must be an integer, not {type(value).__name__} ({value!r})"
        ) from None
    if v < lo or v > hi:
        raise ValueError(f"{what} = {v} is out of range: its C type {ctype} holds {lo} to {hi}")
    return v


def c_string(value, what):
    """A str as the UTF-8 bytes C reads, refusing a NUL (C would stop there)."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{what} {value!r} holds a NUL character, where C would cut it")
    return value.encode("utf-8", "surrogateescape")


def c_path(value, what):
    """A path (str, bytes or os.PathLike) as the bytes C opens, refusing a NUL."""
    b = os.fsencode(value)
    if b"\0" in b:
        raise ValueError(f"{what} {value!r} holds a NUL character, where C would cut it")
    return b


def c_result(rc, what):
    """What a module callback returned, as the C int cgrt reads: None (or 0) is success; a
    nonzero integer fails the call and must fit an int; anything else is a TypeError."""
    if rc is None:
        return 0
    try:
        v = operator.index(rc)
    except TypeError:
        raise TypeError(
            f"{what} returned {type(rc).__name__}: return None or 0, or a nonzero int to fail "
            "the call"
        ) from None
    lo, hi = RANGES["int"]
    if v < lo or v > hi:
        raise ValueError(
            f"{what} returned {v}, which a C int cannot hold ({lo} to {hi}; ctypes would have "
            f"handed cgrt {ctypes.c_int(v).value}): return a nonzero int in range to fail the call"
        )
    return v
