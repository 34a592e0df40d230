"""What code written against celery-redbeat 2.4.2 overrides, decided in one place.

Subclasses of 2.4.2's scheduler and entry change behaviour through hooks the batched
tick never calls (it decides from stored data). Whether a class, or an instance through
an attribute of its own, replaces one of them decides how this package treats it: the
per-entry path, one-by-one sends, statics through ``update_from_dict``, a subclass's
own due time, keys or constructor. Each decision is a function here, so a hook added or
renamed is changed once. The base classes are handed in by the caller (this module
imports no other module of the package, so every layer may use it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: Hooks of 2.4.2's scheduler that the batched tick never calls: overriding one sends
#: every due entry through them, one by one (``RedBeatScheduler.per_entry``).
SCHEDULER_HOOKS = ("maybe_due", "is_due", "reserve")
#: Hooks of 2.4.2's entry that the batched tick never calls (it builds entries without
#: their constructor and decides their runs from stored data).
ENTRY_HOOKS = ("__init__", "is_due", "due_at", "reschedule", "generate_key",
               "_next_instance", "next", "__next__")
#: How one slot is published: overriding one of these sends each slot through it.
PUBLISH_HOOKS = ("apply_async", "send_task", "send_slot")
#: Marks a method of this package that replaces a base class's hook with the same
#: behaviour (a schedule's ``remaining_estimate`` computed faster): not an override.
OWN = "redbeat"


def own(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``function`` as this package's own version of a base class's hook."""
    setattr(function, OWN, True)
    return function


def overrides(owner: object, base: type, name: str) -> bool:
    """Whether ``owner`` (a class, or an instance, whose own attributes count too)
    defines ``name`` otherwise than ``base`` does. Compared as stored on the classes
    (properties and static methods included), so an inherited hook is never taken for
    an override, and a method marked :func:`own` is not one either."""
    if not isinstance(owner, type) and name in getattr(owner, "__dict__", {}):
        return True
    cls = owner if isinstance(owner, type) else type(owner)
    if cls is base:
        return False  # most calls (no subclass): no walk of the class's MRO per entry
    found = stored(cls, name)
    if found is stored(base, name):
        return False
    return not getattr(getattr(found, "__func__", found), OWN, False)


def stored(cls: type, name: str) -> Any:
    """``name`` as stored on the first class of ``cls``'s MRO that defines it (None:
    none does): what ``inspect.getattr_static`` finds for a method, a property or a
    static method, without its checks of metaclasses and instance dictionaries, which
    made the scheduler's questions a tick asks cost more than its round trip."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def overridden(owner: object, base: type, names: Iterable[str]) -> list[str]:
    """Those of ``names`` that ``owner`` overrides (see :func:`overrides`)."""
    return [name for name in names if overrides(owner, base, name)]


# -- the decisions ------------------------------------------------------------------------

def per_entry(scheduler: Any, base: type) -> bool:
    """Whether ``scheduler`` (its class or the instance) or its entry class overrides a
    hook the batched tick does not call: then every due entry goes through the hooks
    one by one, as in 2.4.2. ``base`` is the package's scheduler class (its ``Entry``
    the package's entry class)."""
    return bool(overridden(scheduler, base, SCHEDULER_HOOKS)
                or overridden(scheduler.Entry, base.Entry, ENTRY_HOOKS))


def sends_one_by_one(scheduler: Any, base: type) -> bool:
    """Whether ``scheduler`` (its class or the instance) replaces how one slot is
    published: then each slot goes through that hook, not through the batched publish."""
    return bool(overridden(scheduler, base, PUBLISH_HOOKS))


def shapes_statics(scheduler: Any, base: type) -> bool:
    """Whether ``scheduler`` writes ``beat_schedule`` through its own
    ``update_from_dict`` (2.4.2's way), not the package's two-round-trip sync."""
    return overrides(scheduler, base, "update_from_dict")


def own_due_at(entry_class: type, base: type) -> bool:
    """Whether entries of ``entry_class`` say their own due time (scored from it, as
    2.4.2 scored them), instead of the package's rule."""
    return overrides(entry_class, base, "due_at")


def own_keys(entry_class: type, base: type) -> bool:
    """Whether ``entry_class`` names its keys itself (``generate_key``)."""
    return overrides(entry_class, base, "generate_key")


def own_constructor(entry_class: type, base: type) -> bool:
    """Whether ``entry_class`` has a constructor of its own, which 2.4.2's ``from_key``
    called and so loading an entry must call too."""
    return overrides(entry_class, base, "__init__")


def asks_estimate(schedule: Any, base: type) -> bool:
    """Whether ``schedule`` is a subclass that redefines ``remaining_estimate`` (a
    schedule written for Celery's beat): it is asked through that, not through the
    package's arithmetic for its base type."""
    return overrides(type(schedule), base, "remaining_estimate")


def accepted(function: Callable[..., Any], offered: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``offered`` that ``function`` takes: all of them when it
    takes ``**kwargs``. 2.4.2's ``from_key`` passed exactly its definition's and meta's
    keys, so a subclass constructor naming only those (no ``**kwargs``) must not be
    offered this package's own (``policy``)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin or C constructor: offer everything
        return dict(offered)
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return dict(offered)
    names = {parameter.name for parameter in parameters
             if parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                   inspect.Parameter.KEYWORD_ONLY)}
    return {name: value for name, value in offered.items() if name in names}
