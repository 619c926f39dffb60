"""Read-only views of global stores (Kafka's ``AbstractReadOnlyDecorator``).

A global store is written only by its global processor (from the global topic, on every
instance); every other processor reads it. A task therefore hands its processors a view
that passes reads through and refuses every write, ``init``, ``flush`` and ``close``, as
Kafka's ``ProcessorContextImpl.getStateStore`` does for global stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.errors import StreamsError
from statestores.api import StateStore

#: What a processor may not call on a global store.
_REFUSED = frozenset(
    {"put", "put_if_absent", "put_all", "delete", "remove", "init", "flush", "close"}
)


class GlobalStoreReadOnlyError(StreamsError):
    """A processor tried to write (or init, flush, close) a global store. Global stores
    are filled from their topic by the global processor only: write to the topic."""


class ReadOnlyStore:
    """Wraps ``store``: reads pass through, writes raise :class:`GlobalStoreReadOnlyError`."""

    __slots__ = ("_store",)

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def __getattr__(self, attr: str) -> Any:
        if attr in _REFUSED:
            return self._refuse(attr)
        return getattr(self._store, attr)

    def _refuse(self, attr: str) -> Any:
        name = getattr(self._store, "name", "?")

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise GlobalStoreReadOnlyError(
                f"global store {name!r} is read-only to processors: {attr}() is not "
                "allowed; write to its global topic instead"
            )

        return refused

    def __repr__(self) -> str:
        return f"ReadOnlyStore({self._store!r})"


def read_only(stores: Mapping[str, StateStore]) -> dict[str, StateStore]:
    """Return read-only views of ``stores`` (a view is not wrapped twice)."""
    out: dict[str, StateStore] = {}
    for name, store in stores.items():
        view: Any = store if isinstance(store, ReadOnlyStore) else ReadOnlyStore(store)
        out[name] = view
    return out
