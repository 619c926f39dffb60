"""A topology drawn: Mermaid, DOT and SVG pictures of its sub-topologies, nodes, stores and
the topics between them, the columnar nodes marked; ``streams-eos describe --format``."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from streams.cli import main
from topology import Materialized, StreamsBuilder
from topology.graph.picture import INTERNAL_TOPIC, STORE, TOPIC, picture, to_dot, to_mermaid
from topology.graph.picture_svg import to_svg
from topology.graph.topology import Topology

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SVG = "{http://www.w3.org/2000/svg}"


def word_count() -> Topology:
    b = StreamsBuilder()
    words = b.stream("lines").flat_map_values(str.split)
    words.group_by(lambda _k, w: w).count(Materialized.as_("counts")).to_stream().to("out")
    return b.build()


def with_global_store() -> Topology:
    b = StreamsBuilder()
    rates = b.global_table("rates", materialized=Materialized.as_("rates-store"))
    orders = b.stream("orders")
    orders.join(rates, lambda k, _v: k, lambda o, r: f"{o}@{r}").to("priced")
    return b.build()


def test_the_word_count_is_two_sub_topologies_joined_by_its_repartition_topic() -> None:
    topology = word_count()
    pic = picture(topology, columnar={"KSTREAM-AGGREGATE-0000000003"})
    assert pic.subtopologies == {0: "Sub-topology 0", 1: "Sub-topology 1"}
    by_label = {n.label: n for n in pic.nodes}
    assert by_label["lines"].kind == TOPIC and by_label["out"].kind == TOPIC
    repartition = next(n for n in pic.nodes if n.kind == INTERNAL_TOPIC)
    store = by_label["counts"]
    assert store.kind == STORE and store.subtopology == 1
    assert by_label["KSTREAM-AGGREGATE-0000000003"].columnar
    # the repartition topic: written by a sink of sub-topology 0, read by a source of 1
    writers = [pic.node(a) for a, b, _ in pic.edges if b == repartition.id]
    readers = [pic.node(b) for a, b, _ in pic.edges if a == repartition.id]
    assert [(n.kind, n.subtopology) for n in writers] == [("sink", 0)]
    assert [(n.kind, n.subtopology) for n in readers] == [("source", 1)]
    # every node of the description is drawn, each edge of it too
    described = {n.name for s in topology.describe().subtopologies for n in s.nodes}
    assert described <= set(by_label)
    for sub in topology.describe().subtopologies:
        for node in sub.nodes:
            for succ in node.successors:
                assert (by_label[node.name].id, by_label[succ].id, False) in pic.edges


def test_mermaid_and_dot_name_every_node_once_and_link_only_named_nodes() -> None:
    pic = picture(word_count(), columnar={"KSTREAM-AGGREGATE-0000000003"})
    mermaid = to_mermaid(pic)
    assert mermaid.startswith("flowchart TB\n")
    assert mermaid.count("subgraph ") == 2 and mermaid.count("\n  end\n") == 2
    declared = re.findall(r"^\s+(\w+)[\[(]", mermaid, re.MULTILINE)
    assert sorted(declared) == sorted(n.id for n in pic.nodes)
    for src, dst in re.findall(r"^\s+(\w+) (?:-->|-\.-) (\w+)$", mermaid, re.MULTILINE):
        assert src in declared and dst in declared
    assert re.search(r"class [\w,]+ columnar", mermaid)
    dot = to_dot(pic)
    assert dot.count("subgraph cluster_") == 2
    nodes = re.findall(r"^\s+(\w+) \[label=", dot, re.MULTILINE)
    assert sorted(nodes) == sorted(n.id for n in pic.nodes)
    edges = re.findall(r"^\s+(\w+) -> (\w+)", dot, re.MULTILINE)
    assert len(edges) == len(pic.edges) and all(a in nodes and b in nodes for a, b in edges)


def test_a_label_with_quotes_is_escaped() -> None:
    b = StreamsBuilder()
    b.stream('in"put').to("out")
    pic = picture(b.build())
    assert '[/"in#quot;put"/]' in to_mermaid(pic)
    assert 'label="in\\"put"' in to_dot(pic)


@pytest.mark.parametrize("build", [word_count, with_global_store], ids=["counts", "global"])
def test_the_svg_shows_every_node_without_overlaps_inside_its_sub_topologys_frame(
    build: object,
) -> None:
    assert callable(build)
    pic = picture(build())
    root = ET.fromstring(to_svg(pic, title="t"))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    for node in pic.nodes:
        assert node.label in texts
    for title in pic.subtopologies.values():
        assert title in texts
    assert len(list(root.iter(f"{SVG}polyline"))) == len(pic.edges)
    # the node boxes (rects with a node's label at their centre) do not overlap
    labels = {
        (float(t.get("x", 0)), t.text)
        for t in root.iter(f"{SVG}text")
        if t.get("text-anchor") == "middle"
    }
    assert len(labels) == len(pic.nodes)
    boxes = _node_boxes(root)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not _overlap(a, b), (a, b)


def _node_boxes(root: ET.Element) -> list[tuple[float, float, float, float]]:
    """The bounds of the node shapes (rects that are not frames, polygons, paths)."""
    boxes = []
    for el in root.iter():
        if el.tag == f"{SVG}rect" and el.get("stroke-dasharray") is None:
            x, y = float(el.get("x", 0)), float(el.get("y", 0))
            boxes.append((x, y, x + float(el.get("width", 0)), y + float(el.get("height", 0))))
        elif el.tag == f"{SVG}polygon":
            pts = [tuple(map(float, p.split(","))) for p in el.get("points", "").split()]
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            boxes.append((min(xs), min(ys), max(xs), max(ys)))
    return boxes


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_describe_draws_a_topology_file_in_each_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    wordcount = str(EXAMPLES / "wordcount.py")
    assert main(["describe", wordcount, "--format", "mermaid"]) == 0
    mermaid = capsys.readouterr().out
    assert "word-counts-repartition" in mermaid and "columnar" in mermaid
    assert main(["describe", wordcount, "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph topology {")
    assert main(["describe", wordcount, "--format", "svg"]) == 0
    svg = ET.fromstring(capsys.readouterr().out)
    assert svg.tag == f"{SVG}svg"
    assert main(["describe", wordcount]) == 0  # text: Kafka's description, as before
    assert capsys.readouterr().out.startswith("Topologies:\n")
