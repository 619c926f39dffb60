"""Processors of the stateless KStream operators (filter, map, flat_map, peek, branch, ...).

Each calls its user function inside ``try`` so that a failure names the node and the
function, and forwards through the pre-bound children of its context.
"""

from __future__ import annotations

import inspect
import sys
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from types import FunctionType
from typing import Any, TextIO

from topology.api.processor import Processor
from topology.api.record import Record
from topology.engine.columnar import Batch, BatchForward, Repeated, expanded
from topology.engine.context import NodeContext
from topology.engine.nodes import user_error

_new = tuple.__new__
AnyRecord = Record[Any, Any]


class _Stateless(Processor[Any, Any, Any, Any]):
    """Keeps the node name, the user function and the forward callable."""

    context: NodeContext

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn

    def init(self, context: Any) -> None:
        """Bind ``forward``."""
        self.context = context
        self.forward = context.forward

    def fail(self, exc: Exception) -> Exception:
        """Return the error naming this node and its function."""
        return user_error(self.name, self.fn, exc)


class FilterProcessor(_Stateless):
    """Forward records for which ``fn(key, value)`` is true (false with ``negate``)."""

    def __init__(self, name: str, fn: Callable[[Any, Any], bool], negate: bool) -> None:
        super().__init__(name, fn)
        self.negate = negate

    def process(self, record: AnyRecord) -> None:
        """Test and forward."""
        try:
            keep = bool(self.fn(record[0], record[1]))
        except Exception as exc:
            raise self.fail(exc) from exc
        if keep is not self.negate:
            self.forward(record)

    def process_batch(self, batch: Batch) -> None:
        """Test each record; forward the batch of those kept."""
        fn, ks, vs, negate = self.fn, batch.keys, batch.values, self.negate
        try:
            keep = [i for i, ok in enumerate(map(fn, ks, vs)) if bool(ok) is not negate]
        except Exception as exc:
            raise self.fail(exc) from exc
        self.context.forward_batch(batch if len(keep) == len(ks) else batch.take(keep))


class MapProcessor(_Stateless):
    """Forward ``fn(key, value) -> (new_key, new_value)``."""

    def process(self, record: AnyRecord) -> None:
        """Map and forward."""
        try:
            key, value = self.fn(record[0], record[1])
        except Exception as exc:
            raise self.fail(exc) from exc
        self.forward(_new(Record, (key, value, record[2], record[3])))

    def process_batch(self, batch: Batch) -> None:
        """Map each record; forward the batch."""
        fn, vs = self.fn, batch.values
        try:
            pairs = list(map(fn, batch.keys, vs))
            keys = [k for k, _ in pairs]
            values = [v for _, v in pairs]
        except Exception as exc:
            raise self.fail(exc) from exc
        self.context.forward_batch(Batch(keys, values, batch.timestamps, batch.headers, batch.rows))


class MapValuesProcessor(_Stateless):
    """Forward ``fn(value)`` (or ``fn(key, value)`` with ``with_key``) as the value."""

    def __init__(self, name: str, fn: Callable[..., Any], with_key: bool) -> None:
        super().__init__(name, fn)
        self.with_key = with_key

    def process(self, record: AnyRecord) -> None:
        """Map the value and forward."""
        try:
            value = self.fn(record[0], record[1]) if self.with_key else self.fn(record[1])
        except Exception as exc:
            raise self.fail(exc) from exc
        self.forward(_new(Record, (record[0], value, record[2], record[3])))

    def process_batch(self, batch: Batch) -> None:
        """Map each value; forward the batch."""
        fn = self.fn
        try:
            if self.with_key:
                values = list(map(fn, batch.keys, batch.values))
            else:
                values = list(map(fn, batch.values))
        except Exception as exc:
            raise self.fail(exc) from exc
        self.context.forward_batch(batch.with_values(values))


class FlatMapProcessor(_Stateless):
    """Forward each ``(key, value)`` pair of ``fn(key, value)``."""

    def process(self, record: AnyRecord) -> None:
        """Expand and forward."""
        try:
            pairs = list(self.fn(record[0], record[1]))
        except Exception as exc:
            raise self.fail(exc) from exc
        ts, headers, forward = record[2], record[3], self.forward
        for key, value in pairs:
            forward(_new(Record, (key, value, ts, headers)))

    def process_batch(self, batch: Batch) -> None:
        """Expand each record; forward the batch of every pair, in order."""
        try:
            got = _expansions(map(self.fn, batch.keys, batch.values))
            pairs = list(chain.from_iterable(got))
            keys = [k for k, _ in pairs]
            values = [v for _, v in pairs]
        except Exception as exc:
            raise self.fail(exc) from exc
        self.context.forward_batch(expanded(batch, keys, values, list(map(len, got))))


class FlatMapValuesProcessor(_Stateless):
    """Forward each value of ``fn(value)`` (or ``fn(key, value)``) under the same key."""

    def __init__(self, name: str, fn: Callable[..., Iterable[Any]], with_key: bool) -> None:
        super().__init__(name, fn)
        self.with_key = with_key

    def process(self, record: AnyRecord) -> None:
        """Expand and forward."""
        try:
            values: Sequence[Any] = list(
                self.fn(record[0], record[1]) if self.with_key else self.fn(record[1])
            )
        except Exception as exc:
            raise self.fail(exc) from exc
        key, ts, headers, forward = record[0], record[2], record[3], self.forward
        for value in values:
            forward(_new(Record, (key, value, ts, headers)))

    def process_batch(self, batch: Batch) -> None:
        """Expand each value; forward the batch of every new value, in order."""
        fn, ks = self.fn, batch.keys
        try:
            got = _expansions(map(fn, ks, batch.values) if self.with_key else map(fn, batch.values))
            values = list(chain.from_iterable(got))
        except Exception as exc:
            raise self.fail(exc) from exc
        counts = list(map(len, got))
        # each record's key repeated: made a list only if a node below reads the keys
        self.context.forward_batch(expanded(batch, Repeated(ks, counts), values, counts))


class SelectKeyProcessor(_Stateless):
    """Forward with key ``fn(key, value)``. A function that returns its second argument
    and does nothing else (``lambda k, v: v``, grouping by the value) is not called per
    record on a batch: the batch's values are its keys, the very same list."""

    def __init__(self, name: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name, fn)
        self.keys_are_values = returns_second_argument(fn)

    def process(self, record: AnyRecord) -> None:
        """Select the key and forward."""
        try:
            key = self.fn(record[0], record[1])
        except Exception as exc:
            raise self.fail(exc) from exc
        self.forward(_new(Record, (key, record[1], record[2], record[3])))

    def process_batch(self, batch: Batch) -> None:
        """Select each key; forward the batch."""
        fn, vs = self.fn, batch.values
        if self.keys_are_values:
            self.context.forward_batch(batch.with_keys(vs))
            return
        try:
            keys = list(map(fn, batch.keys, vs))
        except Exception as exc:
            raise self.fail(exc) from exc
        self.context.forward_batch(batch.with_keys(keys))


class PeekProcessor(_Stateless):
    """Call ``fn(key, value)`` and forward the record unchanged (``terminal``: do not)."""

    def __init__(self, name: str, fn: Callable[[Any, Any], None], terminal: bool) -> None:
        super().__init__(name, fn)
        self.terminal = terminal

    def process(self, record: AnyRecord) -> None:
        """Call and forward."""
        try:
            self.fn(record[0], record[1])
        except Exception as exc:
            raise self.fail(exc) from exc
        if not self.terminal:
            self.forward(record)

    def process_batch(self, batch: Batch) -> None:
        """Call for each record; forward the batch."""
        try:
            deque(map(self.fn, batch.keys, batch.values), maxlen=0)
        except Exception as exc:
            raise self.fail(exc) from exc
        if not self.terminal:
            self.context.forward_batch(batch)


class PassThroughProcessor(Processor[Any, Any, Any, Any]):
    """Forward every record (merge, repartition filter, branch children)."""

    context: NodeContext

    def init(self, context: Any) -> None:
        """Bind ``forward``."""
        self.context = context
        self.forward = context.forward

    def process(self, record: AnyRecord) -> None:
        """Forward."""
        self.forward(record)

    def process_batch(self, batch: Batch) -> None:
        """Forward the batch."""
        self.context.forward_batch(batch)


class BranchProcessor(Processor[Any, Any, Any, Any]):
    """Send each record to the child of the first predicate it matches, else to the
    default child (if any), else drop it."""

    context: NodeContext

    def __init__(
        self,
        name: str,
        predicates: Sequence[Callable[[Any, Any], bool]],
        children: Sequence[str],
        default_child: str | None,
    ) -> None:
        self.name = name
        self.predicates = list(predicates)
        self.children = list(children)
        self.default_child = default_child

    def init(self, context: Any) -> None:
        """Resolve the child callables once."""
        self.context = context
        assert isinstance(context, NodeContext)
        self.routes = [
            (p, context._child_map[c]) for p, c in zip(self.predicates, self.children, strict=True)
        ]
        self.default = (
            context._child_map[self.default_child] if self.default_child is not None else None
        )
        self.batch_routes: list[BatchForward] = []
        self.batch_default: BatchForward | None = None

    def bind_batch_routes(self, entries: Mapping[str, BatchForward]) -> None:
        """Resolve the children's batch entries (columnar processing)."""
        self.batch_routes = [entries[c] for c in self.children]
        self.batch_default = None if self.default_child is None else entries[self.default_child]

    def process(self, record: AnyRecord) -> None:
        """Route the record."""
        for predicate, child in self.routes:
            try:
                matched = predicate(record[0], record[1])
            except Exception as exc:
                raise user_error(self.name, predicate, exc) from exc
            if matched:
                child(record)
                return
        if self.default is not None:
            self.default(record)

    def process_batch(self, batch: Batch) -> None:
        """Route each record; send each child the batch of its records."""
        ks, vs = batch.keys, batch.values
        routes: list[list[int]] = [[] for _ in self.predicates]
        rest: list[int] = []
        for i in range(len(ks)):
            for r, predicate in enumerate(self.predicates):
                try:
                    matched = predicate(ks[i], vs[i])
                except Exception as exc:
                    raise user_error(self.name, predicate, exc) from exc
                if matched:
                    routes[r].append(i)
                    break
            else:
                rest.append(i)
        for child, index in zip(self.batch_routes, routes, strict=True):
            if index:
                child(batch.take(index))
        if self.batch_default is not None and rest:
            self.batch_default(batch.take(rest))


def _second_argument(_first: Any, second: Any) -> Any:
    return second


#: The flags of a code object that change what its body's instructions do when called.
_CALL_FLAGS = (
    inspect.CO_VARARGS
    | inspect.CO_VARKEYWORDS
    | inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
)


def returns_second_argument(fn: object) -> bool:
    """Whether ``fn`` is a plain function of two positional arguments whose whole body
    returns the second (``lambda k, v: v``): its instructions are those of such a
    function, so calling it can do nothing else."""
    if type(fn) is not FunctionType:
        return False
    code, model = fn.__code__, _second_argument.__code__
    return (
        code.co_code == model.co_code
        and code.co_argcount == 2
        and not code.co_posonlyargcount
        and not code.co_kwonlyargcount
        and not code.co_flags & _CALL_FLAGS
    )


def _expansions(results: Iterable[Iterable[Any]]) -> list[list[Any]]:
    """Each record's expansion as a list, taken in record order (a generator runs before
    the next record's function is called, as record by record)."""
    return [r if type(r) is list else list(r) for r in results]


class PrintProcessor(Processor[Any, Any, Any, Any]):
    """Write ``[label]: <mapper(key, value)>`` per record (Kafka's ``KStreamPrint``), to
    standard output (flushed per line) or appended to a file (flushed at close)."""

    def __init__(self, name: str, label: str, mapper: Callable[[Any, Any], str], path: str | None):
        self.name = name
        self.label = label
        self.mapper = mapper
        self.path = path
        self._file: TextIO | None = None

    def init(self, context: Any) -> None:
        """Open the file to append to, if printing to one."""
        if self.path is not None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def process(self, record: AnyRecord) -> None:
        """Print the record."""
        self._write([self._line(record[0], record[1])])

    def process_batch(self, batch: Batch) -> None:
        """Print the batch's records, in order, in one write."""
        line = self._line
        self._write([line(k, v) for k, v in zip(batch.keys, batch.values, strict=True)])

    def _line(self, key: Any, value: Any) -> str:
        try:
            return f"[{self.label}]: {self.mapper(key, value)}\n"
        except Exception as exc:
            raise user_error(self.name, self.mapper, exc, "key-value mapper") from exc

    def _write(self, lines: list[str]) -> None:
        if self._file is None:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
        else:
            self._file.write("".join(lines))

    def close(self) -> None:
        """Close the file (its lines are written)."""
        if self._file is not None:
            self._file.close()
            self._file = None
