"""The errors of the consumer-group protocol (Kafka's group error codes as exceptions).

Each class says when it is raised and what the member (or the operator) should do next.
A member that gets :class:`RebalanceInProgressError`, :class:`IllegalGenerationError` or
:class:`UnknownMemberIdError` rejoins with :meth:`GroupMember.join()
<runtime.group.member.GroupMember.join>`; under exactly-once, a stream thread turns the last
two into ``TaskMigrated`` (its tasks went to someone else while it was away).
"""

from __future__ import annotations

from common.errors import StreamsError


class GroupError(StreamsError):
    """Root of the consumer-group protocol errors; the message names the group."""


class RebalanceInProgressError(GroupError):
    """The group is rebalancing (Kafka's REBALANCE_IN_PROGRESS): a member joined, left or
    failed, a subscription changed, or a subscribed topic got more partitions. Retriable:
    commit what you can, then call ``join()`` to take part in the new generation."""


class IllegalGenerationError(GroupError):
    """The member's generation is not the group's current one (ILLEGAL_GENERATION): the group
    completed a rebalance without it. Its partitions may already belong to another member,
    so an offset commit of that generation is refused. Call ``join()`` to rejoin."""


class UnknownMemberIdError(GroupError):
    """The member id is not in the group (UNKNOWN_MEMBER_ID): it left, its session timed
    out, or it did not rejoin within the rebalance timeout. Its partitions are lost: call
    ``join()``, which rejoins with a new member id (and raise ``session.timeout.ms`` or
    ``max.poll.interval.ms`` if this happens while the member was busy)."""


class GroupIdNotFoundError(UnknownMemberIdError):
    """The group has no coordinator log (GROUP_ID_NOT_FOUND): it was never joined, or it was
    deleted. A member of it is unknown: ``join()`` creates the group again."""


class FencedInstanceIdError(GroupError):
    """Another member joined with the same ``group.instance.id`` (FENCED_INSTANCE_ID) and took
    over this static member's place. This member is a zombie and must stop: close it. If no
    restart happened, two running processes share one instance id; give each its own."""


class InconsistentGroupProtocolError(GroupError):
    """A member asked to join with a protocol type or partition assignor that the group's
    other members do not use (INCONSISTENT_GROUP_PROTOCOL). Configure the same
    ``partition.assignment.strategy`` in every member, or use another ``group.id``."""


class TopologyMismatchError(InconsistentGroupProtocolError):
    """An instance of a streams application asked to join with another topology than the
    application's running instances (the fingerprint of its processors and tasks differs).
    One group cannot split the tasks of two topologies. Stop the old instances first (their
    members expire after ``session.timeout.ms``), or run the changed topology under a new
    ``application.id``, or reset the application (``streams-eos application-reset``)."""


class GroupNotEmptyError(GroupError):
    """The group still has members (GROUP_NOT_EMPTY), so it cannot be deleted (or its
    offsets reset). Stop its members, or wait for their session timeout, then try again."""


class GroupJoinTimeoutError(GroupError, TimeoutError):
    """``join()`` did not reach a stable generation within its timeout; the message names
    the group, the timeout and the state the group was stuck in. Retriable: call ``join()``
    again, give it a longer timeout, or look for a member that never rejoins (it is removed
    after its ``max.poll.interval.ms``, the rebalance timeout)."""
