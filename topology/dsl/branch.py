"""``split()``: route records to named branches by predicate (Kafka's ``BranchedKStream``).

A branch is named ``<split name><branch name>``; without a branch name, its 1-based
position (the default branch: ``0``). The split name is ``Named`` or ``KSTREAM-BRANCH-N``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from topology.graph.graph import ProcessorSpec
from topology.graph.naming import BRANCH
from topology.processors.proc_stream import BranchProcessor, PassThroughProcessor

if TYPE_CHECKING:
    from topology.dsl.kstream import KStream

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True, kw_only=True)
class Branched(Generic[K, V]):
    """A branch's name and what to do with its stream: ``chain`` returns the stream to put
    in the result (``None``: nothing), ``consumer`` takes it (nothing is put in)."""

    name: str | None = None
    chain: Callable[[KStream[K, V]], KStream[Any, Any] | None] | None = None
    consumer: Callable[[KStream[K, V]], None] | None = None

    @classmethod
    def as_(cls, name: str) -> Branched[Any, Any]:
        """Name the branch."""
        return cls(name=name)

    @classmethod
    def with_name(cls, name: str) -> Branched[Any, Any]:
        """Name the branch (alias of :meth:`as_`)."""
        return cls(name=name)

    @classmethod
    def with_function(
        cls, chain: Callable[[KStream[Any, Any]], KStream[Any, Any] | None], name: str | None = None
    ) -> Branched[Any, Any]:
        """Transform the branch stream; the result goes into the returned mapping."""
        return cls(name=name, chain=chain)

    @classmethod
    def with_consumer(
        cls, consumer: Callable[[KStream[Any, Any]], None], name: str | None = None
    ) -> Branched[Any, Any]:
        """Hand the branch stream to ``consumer``; it is not in the returned mapping."""
        return cls(name=name, consumer=consumer)


class BranchedKStream(Generic[K, V]):
    """Collects branches of a ``split()``; finish with :meth:`default_branch` or
    :meth:`no_default_branch`.

    Example:
        >>> out = (stream.split(named="route-")
        ...     .branch(lambda k, v: v < 0, Branched.as_("neg"))
        ...     .default_branch(Branched.as_("rest")))  # doctest: +SKIP
        >>> sorted(out)  # doctest: +SKIP
        ['route-neg', 'route-rest']
    """

    def __init__(self, source: KStream[K, V], name: str | None) -> None:
        self.source = source
        builder = source.builder
        self.splitter = builder.names.name_or_generate(name, BRANCH)
        self.predicates: list[Callable[[Any, Any], bool]] = []
        self.children: list[str] = []
        self.default_child: str | None = None
        self.outputs: dict[str, KStream[Any, Any]] = {}
        predicates, children, splitter = self.predicates, self.children, self.splitter
        holder = self

        def supplier() -> BranchProcessor:
            return BranchProcessor(splitter, predicates, children, holder.default_child)

        builder.graph.add_processor(
            ProcessorSpec(name=splitter, supplier=supplier, parents=(source.node,))
        )

    def branch(
        self, predicate: Callable[[K, V], bool], branched: Branched[K, V] | None = None
    ) -> BranchedKStream[K, V]:
        """Add a branch for records matching ``predicate`` (and no earlier branch)."""
        self.predicates.append(predicate)
        self.children.append(self._create(branched or Branched(), len(self.predicates)))
        return self

    def default_branch(
        self, branched: Branched[K, V] | None = None
    ) -> dict[str, KStream[Any, Any]]:
        """Add the branch of records no predicate matched; return the branches by name."""
        self.default_child = self._create(branched or Branched(), 0)
        return self.outputs

    def no_default_branch(self) -> dict[str, KStream[Any, Any]]:
        """Drop unmatched records; return the branches by name."""
        return self.outputs

    def _create(self, branched: Branched[K, V], index: int) -> str:
        source, builder = self.source, self.source.builder
        name = self.splitter + (branched.name if branched.name is not None else str(index))
        builder.names.new_processor_name(name)  # advances the counter, as Kafka does
        builder.graph.add_processor(
            ProcessorSpec(name=name, supplier=PassThroughProcessor, parents=(self.splitter,))
        )
        stream: KStream[K, V] = builder.handles.stream(
            name,
            source.key_serde,
            source.value_serde,
            repartition_required=source.repartition_required,
        )
        if branched.chain is not None:
            result = branched.chain(stream)
            if result is not None:
                self.outputs[name] = result
        elif branched.consumer is not None:
            branched.consumer(stream)
        else:
            self.outputs[name] = stream
        return name
