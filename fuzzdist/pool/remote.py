"""Carry an exception from a rank process to the driver without losing its identity.

Worker side: :func:`capture` turns an exception into a plain picklable record.
Driver side: :func:`rebuild` turns the record back into an exception of the
original type (or a :class:`RemoteException` standing in for it) whose
traceback ends at the remote raising site, so Hypothesis (which tells bugs
apart by type and raising location) sees remote bugs as distinct.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NoReturn


@dataclass(frozen=True)
class RemoteRecord:
    type_name: str  # "module.Qualname" of the original exception type
    message: str
    traceback: str  # formatted remote traceback
    filename: str | None  # remote raising site: last frame of the traceback
    lineno: int | None
    funcname: str | None
    pickled: bytes | None  # the exception itself, where it pickles


class RemoteException(Exception):
    """Stands in for a remote exception whose type could not be rebuilt in the driver."""

    def __init__(self, remote_type: str, message: str) -> None:
        super().__init__(message)
        self.remote_type = remote_type


def capture(exc: BaseException) -> RemoteRecord:
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    try:
        pickled = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - unpicklable payloads (locks, tensors on a dead device...)
        pickled = None
    cls = type(exc)
    return RemoteRecord(
        type_name=f"{cls.__module__}.{cls.__qualname__}",
        message=_safe_str(exc),
        traceback="".join(traceback.format_exception(cls, exc, exc.__traceback__)),
        filename=last.filename if last else None,
        lineno=last.lineno if last else None,
        funcname=last.name if last else None,
        pickled=pickled,
    )


def rebuild(record: RemoteRecord) -> BaseException:
    """The remote exception, re-raised once so its traceback ends at the remote site."""
    exc: BaseException | None = None
    if record.pickled is not None:
        try:
            exc = pickle.loads(record.pickled)
        except Exception:  # noqa: BLE001 - any payload that can't be rebuilt is shown as text
            exc = None
    if not isinstance(exc, BaseException):
        exc = RemoteException(record.type_name, record.message)
    exc.__traceback__ = None
    if record.filename and record.lineno:
        try:
            _raiser(record.filename, record.lineno, record.funcname or "<remote>")(exc)
        except BaseException as raised:  # noqa: BLE001 - we re-raise exactly what we passed in
            exc = raised
    # The remote exception's own chain did not travel; don't let the driver's invent one.
    exc.__context__ = None
    exc.__cause__ = None
    return exc


_MAX_LINE = 2**31 - 1  # a code object's line is a C int


@lru_cache(maxsize=1024)
def _raiser(filename: str, lineno: int, funcname: str) -> Callable[[BaseException], NoReturn]:
    """A function whose ``raise`` statement sits at ``filename:lineno``.

    Compiled once per site: the code object claims the remote file and line,
    which is all a traceback (and Hypothesis) looks at.  The line is set on the
    code object (``co_firstlineno``), not reached by padding the source with
    newlines: a remote line 10**8 cost seconds and hundreds of megabytes that way.
    """
    namespace: dict[str, Any] = {}
    exec(compile("def _raise(exc): raise exc\n", filename, "exec"), namespace)  # the raise on the def's line
    fn = namespace["_raise"]
    names: dict[str, Any] = {"co_name": funcname, "co_firstlineno": max(1, min(lineno, _MAX_LINE))}
    if hasattr(fn.__code__, "co_qualname"):  # Python >= 3.11
        names["co_qualname"] = funcname
    fn.__code__ = fn.__code__.replace(**names)
    return fn


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose str() raises
        return f"<unprintable {type(exc).__name__}>"
