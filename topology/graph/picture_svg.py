"""A topology's picture (:mod:`topology.graph.picture`) as an SVG image, laid out here:
no Graphviz or browser needed, so ``streams-eos describe --format svg`` and the
documentation's pictures work on any machine the library installs on.

The layout is Sugiyama's layered drawing (grandalf): records flow downwards, topics
between the sub-topologies that write and read them; each connected part is laid out on
its own and the parts are set side by side. A sub-topology is a dashed frame around its
nodes, a store a cylinder, a topic a parallelogram (dashed: internal), a source or sink a
rounded box; a node that takes batches (columnar) is green.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout

from topology.graph.picture import (
    INTERNAL_TOPIC,
    PROCESSOR,
    SINK,
    SOURCE,
    STORE,
    TOPIC,
    Node,
    Picture,
)

_CHAR_W, _PAD_W, _BOX_H = 7.0, 24.0, 30.0
_GAP = 40.0
_MARGIN = 20.0
_FILL = {
    SOURCE: "#ffffff",
    SINK: "#ffffff",
    PROCESSOR: "#ffffff",
    TOPIC: "#fff3d6",
    INTERNAL_TOPIC: "#fff3d6",
    STORE: "#e6f0ff",
}
_COLUMNAR = "#d9f7e8"


@dataclass(slots=True)
class _View:
    """grandalf's view of a vertex: its size, and the centre the layout gives it."""

    w: float
    h: float
    xy: tuple[float, float] = (0.0, 0.0)


@dataclass(slots=True)
class _EdgeView:
    _pts: list[tuple[float, float]] | None = None

    def setpath(self, pts: list[tuple[float, float]]) -> None:
        self._pts = pts


def to_svg(pic: Picture, title: str = "topology") -> str:
    """The SVG image of ``pic``."""
    vertices = {n.id: Vertex(n) for n in pic.nodes}
    for v in vertices.values():
        node: Node = v.data
        v.view = _View(len(node.label) * _CHAR_W + _PAD_W, _BOX_H)
    edges = [Edge(vertices[a], vertices[b], data=dashed) for a, b, dashed in pic.edges]
    for e in edges:
        e.view = _EdgeView()
    graph = Graph(list(vertices.values()), edges)
    boxes: dict[str, tuple[float, float, float, float]] = {}  # id -> x, y, w, h (top-left)
    paths: list[tuple[list[tuple[float, float]], bool]] = []
    x_offset = _MARGIN
    for part in graph.C:
        layout = SugiyamaLayout(part)
        layout.xspace, layout.yspace = _GAP / 2, _GAP
        layout.init_all()
        layout.draw()
        xs = [v.view.xy[0] - v.view.w / 2 for v in part.sV]
        shift = x_offset - min(xs)
        right = x_offset
        for v in part.sV:
            cx, cy = v.view.xy
            box = (cx - v.view.w / 2 + shift, cy - v.view.h / 2, v.view.w, v.view.h)
            boxes[v.data.id] = box
            right = max(right, box[0] + box[2])
        for e in part.sE:
            pts = list(e.view._pts or [e.v[0].view.xy, e.v[1].view.xy])
            pts[0] = _border(e.v[0].view, pts[1])  # from and to the boxes' edges
            pts[-1] = _border(e.v[1].view, pts[-2])
            paths.append(([(x + shift, y) for x, y in pts], bool(e.data)))
        x_offset = right + _GAP
    top = min((b[1] for b in boxes.values()), default=0.0)
    # the frames of the sub-topologies, and room for their titles
    frames = []
    for sub, name in pic.subtopologies.items():
        members = [boxes[n.id] for n in pic.members(sub)]
        if members:
            x0 = min(b[0] for b in members) - 10
            y0 = min(b[1] for b in members) - 24
            x1 = max(b[0] + b[2] for b in members) + 10
            y1 = max(b[1] + b[3] for b in members) + 10
            frames.append((name, x0, y0, x1, y1))
            top = min(top, y0)
    dy = _MARGIN - top
    width = max([x_offset - _GAP + _MARGIN, *(f[3] + _MARGIN for f in frames)], default=200.0)
    height = max(
        [*(b[1] + b[3] + dy for b in boxes.values()), *(f[4] + dy for f in frames)],
        default=100.0,
    )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height + _MARGIN:.0f}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f"<title>{escape(title)}</title>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#4a5568"/></marker></defs>',
    ]
    for name, x0, y0, x1, y1 in frames:
        out.append(
            f'<rect x="{x0:.1f}" y="{y0 + dy:.1f}" width="{x1 - x0:.1f}" '
            f'height="{y1 - y0:.1f}" rx="6" fill="#fafafa" stroke="#a0aec0" '
            'stroke-dasharray="5,4"/>'
        )
        out.append(
            f'<text x="{x0 + 8:.1f}" y="{y0 + dy + 15:.1f}" fill="#4a5568" '
            f'font-weight="bold">{escape(name)}</text>'
        )
    for pts, dashed in paths:
        d = " ".join(f"{x:.1f},{y + dy:.1f}" for x, y in pts)
        style = 'stroke-dasharray="4,3"' if dashed else 'marker-end="url(#arrow)"'
        out.append(f'<polyline points="{d}" fill="none" stroke="#4a5568" {style}/>')
    for node in pic.nodes:
        x, y, w, h = boxes[node.id]
        out.append(_shape(node, x, y + dy, w, h))
        out.append(
            f'<text x="{x + w / 2:.1f}" y="{y + dy + h / 2 + 4:.1f}" '
            f'text-anchor="middle">{escape(node.label)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _border(view: _View, towards: tuple[float, float]) -> tuple[float, float]:
    """Where the line from ``view``'s centre towards ``towards`` leaves its box."""
    (cx, cy), (px, py) = view.xy, towards
    dx, dy = px - cx, py - cy
    scales = [view.w / 2 / abs(dx) if dx else 1.0, view.h / 2 / abs(dy) if dy else 1.0]
    t = min(1.0, *scales)
    return cx + t * dx, cy + t * dy


def _shape(node: Node, x: float, y: float, w: float, h: float) -> str:
    fill = _COLUMNAR if node.columnar else _FILL[node.kind]
    stroke = 'stroke="#2f855a" stroke-width="2"' if node.columnar else 'stroke="#4a5568"'
    if node.kind in (TOPIC, INTERNAL_TOPIC):
        s = 8.0
        dash = ' stroke-dasharray="4,3"' if node.kind == INTERNAL_TOPIC else ""
        corners = ((x + s, y), (x + w, y), (x + w - s, y + h), (x, y + h))
        pts = " ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in corners)
        return f'<polygon points="{pts}" fill="{fill}" {stroke}{dash}/>'
    if node.kind == STORE:
        r = 5.0
        return (
            f'<path d="M {x:.1f},{y + r:.1f} a {w / 2:.1f},{r} 0 0 1 {w:.1f},0 v {h - 2 * r:.1f} '
            f"a {w / 2:.1f},{r} 0 0 1 {-w:.1f},0 z M {x:.1f},{y + r:.1f} "
            f'a {w / 2:.1f},{r} 0 0 0 {w:.1f},0" fill="{fill}" {stroke}/>'
        )
    rx = 12 if node.kind in (SOURCE, SINK) else 3
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
        f'fill="{fill}" {stroke}/>'
    )
