"""One error family: every exception class fuzzdist defines is a FuzzdistError, failures are AssertionErrors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import hypothesis.errors
import pytest
import torch
from helpers.older_torch import REFUSE_ON_OLDER_TORCH

import fuzzdist
from fuzzdist.errors import (
    CallError,
    FuzzdistError,
    InvalidArgument,
    InvalidState,
    InvalidStrategyArgument,
    InvalidType,
    PoolGone,
    RankCrash,
    RankError,
    RankFailure,
    RankTimeout,
)

# Outside the family by design, with their subclasses (fuzzdist/errors.py says why).
# Classes whose name starts with "_" are control flow private to their module
# and never reach a user (e.g. conformance's _OutOfTime, a BaseException Hypothesis lets through).
OUTSIDE_THE_FAMILY = {
    "fuzzdist.errors.PoolGone",  # a BaseException: ends a torchrun campaign, not shrunk through
    "fuzzdist.errors.CampaignInterrupt",  # a KeyboardInterrupt: ends a campaign, example not saved
    "fuzzdist.pool.remote.RemoteException",  # stands in for the user's own exception from a rank
    # the findings catalogue imports the standard library only (docs/findings' scripts load it by path)
    "fuzzdist.known_bugs.catalogue.CatalogueError",
    "fuzzdist.known_bugs.catalogue_pages.PageError",
}


def _designed_refusal(name: str, exc: ImportError) -> bool:
    """Is ``exc`` ``name``'s own refusal of the installed torch (not a broken import inside it)?"""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    raised_by_module = tb is not None and tb.tb_frame.f_globals.get("__name__") == name
    return (
        name in REFUSE_ON_OLDER_TORCH
        and raised_by_module
        and type(exc) is ImportError
        and str(exc).startswith(f"torch {torch.__version__}")
    )


def _exception_classes() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.walk_packages(fuzzdist.__path__, prefix="fuzzdist."):
        if info.name.endswith(".__main__"):  # runs the CLI on import
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            if not _designed_refusal(info.name, exc):
                raise
            continue  # its classes are not defined on this torch: nothing to check
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def test_every_fuzzdist_exception_is_a_fuzzdist_error():
    classes = _exception_classes()
    assert "fuzzdist.errors.RankError" in classes and "fuzzdist.errors.ReorderTimeout" in classes
    allowed = tuple(classes[name] for name in OUTSIDE_THE_FAMILY)
    outside = sorted(
        name
        for name, cls in classes.items()
        if not issubclass(cls, (FuzzdistError, *allowed)) and not cls.__name__.startswith("_")
    )
    assert outside == [], (
        f"{outside} don't derive from fuzzdist.errors.FuzzdistError: derive them from it (with the builtin "
        "they must stay, e.g. (FuzzdistError, ValueError)), or document in fuzzdist/errors.py why not "
        "and add them here"
    )
    assert not any(issubclass(cls, FuzzdistError) for cls in allowed)


@pytest.mark.parametrize("cls", [RankFailure, RankError, RankTimeout, RankCrash])
def test_rank_failures_are_assertion_errors(cls):
    assert issubclass(cls, FuzzdistError) and issubclass(cls, AssertionError)


def test_every_public_exception_class_is_in_errors_py():
    """One place to read every error fuzzdist raises: classes private to a module ("_" names) are
    control flow that never reaches a user; RemoteException is the user's own error, rebuilt."""
    elsewhere = sorted(
        name
        for name, cls in _exception_classes().items()
        if not name.startswith("fuzzdist.errors.") and not cls.__name__.startswith("_")
    )
    assert elsewhere == [
        "fuzzdist.known_bugs.catalogue.CatalogueError",
        "fuzzdist.known_bugs.catalogue_pages.PageError",
        "fuzzdist.pool.remote.RemoteException",
    ], f"{elsewhere}: define public exception classes in fuzzdist/errors.py and import them where raised"


def test_failures_found_in_examples_are_assertion_errors():
    for name, cls in _exception_classes().items():
        if issubclass(cls, RankFailure) or name.endswith(("ConformanceFailure", "PropertyFailure")):
            assert issubclass(cls, AssertionError), name


@pytest.mark.parametrize(
    ("cls", "builtin"),
    [
        (InvalidArgument, ValueError),
        (CallError, TypeError),
        (InvalidState, RuntimeError),
        (InvalidType, TypeError),
        (InvalidStrategyArgument, hypothesis.errors.InvalidArgument),  # what every Hypothesis strategy raises
    ],
)
def test_validation_errors_keep_their_builtin(cls, builtin):
    """``except ValueError`` around RankPool(...) still catches a bad argument, as before the family."""
    assert issubclass(cls, FuzzdistError) and issubclass(cls, builtin)


def test_pool_gone_is_not_an_exception():
    """Hypothesis must not shrink through a spent torchrun group: PoolGone passes every ``except Exception``."""
    assert not issubclass(PoolGone, Exception)
    gone = PoolGone(RankCrash([1], {1: -9}, {}))
    assert "spent after: rank process died: rank 1 (SIGKILL)" in str(gone)


# Built-in exceptions fuzzdist may still raise itself, and why.
_BUILTINS_ALLOWED = {
    "IndexError",  # the sequence protocol: an index out of range (CompletionOrder, DDPConfig batches)
    "ImportError",  # a property module the installed torch can't support: its thin test skips
    "NotImplementedError",  # an abstract method
}
# The pool's pipe transport keeps multiprocessing.Connection's contract (EOFError: the other end closed;
# OSError: our end is closed): the pool catches both as a lost rank, and they never reach a user.
_TRANSPORT_BUILTINS_ALLOWED = {
    ("pool/framing.py", "EOFError"),
    ("pool/local.py", "OSError"),
    # the output writer keeps os's contract: an OSError with its errno, which
    # every caller reports as one "can't write PATH (why)" line
    ("campaign/output.py", "OSError"),
    ("campaign/output.py", "FileExistsError"),
    ("campaign/output.py", "IsADirectoryError"),
    # replay --export-script's writer too: replay reports it as "not exported: why"
    ("campaign/export_script.py", "OSError"),
}


def test_fuzzdist_raises_only_its_own_errors():
    """Every `raise SomeBuiltin(...)` in the package is a FuzzdistError instead, except the
    documented built-ins above and "fuzzdist bug" RuntimeErrors (an internal invariant broke)."""
    import ast
    import builtins
    from pathlib import Path

    offenders = []
    for path in sorted(Path(fuzzdist.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (
                isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name)
            ):
                continue
            name = node.exc.func.id
            builtin = getattr(builtins, name, None)
            if not (isinstance(builtin, type) and issubclass(builtin, BaseException)) or name in _BUILTINS_ALLOWED:
                continue
            if (path.relative_to(Path(fuzzdist.__file__).parent).as_posix(), name) in _TRANSPORT_BUILTINS_ALLOWED:
                continue
            message = ast.unparse(node.exc.args[0]) if node.exc.args else ""
            if name == "RuntimeError" and "fuzzdist bug" in message:
                continue
            offenders.append(f"{path.relative_to(Path(fuzzdist.__file__).parent.parent)}:{node.lineno}: raise {name}")
    assert not offenders, "raise a FuzzdistError (fuzzdist.errors) instead:\n" + "\n".join(offenders)
