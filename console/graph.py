"""The layout of an execution's workflow graph, drawn as inline SVG.

Pure: (the workflow definition baked in the execution's snapshot, the task
views of the execution) → positioned nodes, edges and frames. No ORM, no
clock; the template only draws what this returns.

The graph is the definition, not the rows: a task that has not started yet
is drawn too (NOT_STARTED). Rows are matched to definition nodes by their
path with every index removed (``loop[2].step`` and ``fan[0].charge`` are
iterations and items of ``loop.step`` and ``fan.charge``), so a node inside a
DO_WHILE or a FORK_JOIN_DYNAMIC stands for all its iterations or items.

Shapes, top to bottom:
- a task list is a column; each task's exits join the next task's entry;
- FORK_JOIN and SWITCH put their branches side by side below them (a
  SWITCH's edges carry the case; branches it did not take are dimmed), and
  every branch's exit joins the task after them (the JOIN);
- DO_WHILE and FORK_JOIN_DYNAMIC draw their body in a frame below them; a
  loop has a back edge to its node, labelled with the iterations run;
- SUB_WORKFLOW is a node that links to the child execution.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

NOT_STARTED = "NOT_STARTED"

# One colour per task status (and for tasks not started yet). Text on a node
# is dark or light by its fill, for contrast.
STATUS_COLOURS: dict[str, str] = {
    NOT_STARTED: "#ffffff",
    "SCHEDULED": "#9ecae1",
    "IN_PROGRESS": "#2171b5",
    "COMPLETED": "#31a354",
    "COMPLETED_WITH_ERRORS": "#addd8e",
    "FAILED": "#e6550d",
    "FAILED_WITH_TERMINAL_ERROR": "#a50f15",
    "TIMED_OUT": "#fdae6b",
    "CANCELED": "#969696",
    "SKIPPED": "#dadaeb",
}
LIGHT_TEXT = frozenset({"IN_PROGRESS", "COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR", "CANCELED"})

EXECUTION_COLOURS: dict[str, str] = {
    "RUNNING": STATUS_COLOURS["IN_PROGRESS"],
    "PAUSED": "#756bb1",
    "COMPLETED": STATUS_COLOURS["COMPLETED"],
    "FAILED": STATUS_COLOURS["FAILED"],
    "TIMED_OUT": STATUS_COLOURS["TIMED_OUT"],
    "TERMINATED": "#636363",
}

# Which status a node shows when its iterations or items differ: anything
# still open first, then the worst ending, then success.
_PRECEDENCE = (
    "IN_PROGRESS",
    "SCHEDULED",
    "FAILED_WITH_TERMINAL_ERROR",
    "FAILED",
    "TIMED_OUT",
    "CANCELED",
    "COMPLETED_WITH_ERRORS",
    "COMPLETED",
    "SKIPPED",
)

NODE_W, NODE_H = 176.0, 46.0
GAP_X, GAP_Y = 24.0, 40.0
FRAME_PAD, FRAME_LABEL = 12.0, 18.0
LOOP_LANE = 28.0  # room right of a loop's frame for its back edge
MARGIN = 12.0
LABEL_CHARS = 24

_INDEX = re.compile(r"\[\d+\]")


def text_colour(status: str) -> str:
    return "#ffffff" if status in LIGHT_TEXT else "#111111"


def logical_key(path: str) -> str:
    """``loop[2].fan[0].step`` → ``loop.fan.step``: the node a row belongs to."""
    return _INDEX.sub("", path)


@dataclass
class Node:
    key: str
    ref: str
    type: str
    name: str
    status: str = NOT_STARTED
    attempts: int = 0
    runs: int = 0  # iterations or items that reached this task
    child_id: str | None = None  # the SUB_WORKFLOW's latest child execution
    path: str | None = None  # the latest row's path (its entry in the task table)
    blocked: dict | None = None  # the latest row's blockedBy
    reason: str | None = None  # the latest row's reasonForIncompletion
    untaken: bool = False  # in a SWITCH branch that was not chosen
    x: float = 0.0
    y: float = 0.0
    w: float = NODE_W
    h: float = NODE_H

    @property
    def fill(self) -> str:
        return STATUS_COLOURS[self.status]

    @property
    def text(self) -> str:
        return text_colour(self.status)

    @property
    def label(self) -> str:
        return _short(self.ref)

    @property
    def caption(self) -> str:
        parts = [self.type if self.type != "SIMPLE" else self.name]
        if self.runs > 1:
            parts.append(f"×{self.runs}")
        if self.attempts > self.runs:
            parts.append(f"{self.attempts} attempts")
        return _short(" · ".join(parts))

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def label_y(self) -> float:
        return self.y + 19

    @property
    def caption_y(self) -> float:
        return self.y + 36


@dataclass
class Edge:
    points: list[tuple[float, float]]
    label: str = ""
    back: bool = False
    untaken: bool = False

    @property
    def d(self) -> str:
        head, *rest = self.points
        return f"M{head[0]:.1f},{head[1]:.1f}" + "".join(f" L{x:.1f},{y:.1f}" for x, y in rest)

    @property
    def label_at(self) -> tuple[float, float]:
        x, y = self.points[-1]
        return x + 4, y - 6


@dataclass
class Frame:
    x: float
    y: float
    w: float
    h: float
    label: str

    @property
    def label_at(self) -> tuple[float, float]:
        return self.x + 8, self.y + 13


@dataclass
class Piece:
    """A laid-out part of the graph, its origin at (0, 0): entered at
    (entry, 0) from above, left from each of ``exits``."""

    w: float
    h: float
    entry: float
    exits: list[tuple[float, float]]
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)

    def move(self, dx: float, dy: float) -> None:
        for node in self.nodes:
            node.x, node.y = node.x + dx, node.y + dy
        for edge in self.edges:
            edge.points = [(x + dx, y + dy) for x, y in edge.points]
        for frame in self.frames:
            frame.x, frame.y = frame.x + dx, frame.y + dy
        self.entry += dx
        self.exits = [(x + dx, y + dy) for x, y in self.exits]

    def absorb(self, other: Piece) -> None:
        self.nodes += other.nodes
        self.edges += other.edges
        self.frames += other.frames


@dataclass
class Graph:
    width: float
    height: float
    nodes: list[Node]
    edges: list[Edge]
    frames: list[Frame]

    def node(self, key: str) -> Node:
        return next(node for node in self.nodes if node.key == key)


def layout(workflow: dict, tasks: list[dict], *, path_prefix: str = "") -> Graph:
    """The graph of ``workflow`` with the status of ``tasks`` (execution-view
    task dicts in seq order). ``path_prefix`` is the execution's own prefix
    (a child's rows are named ``sub.inner``)."""
    rows = _Rows(tasks)
    piece = _sequence(workflow.get("tasks", []), rows, logical_key(path_prefix))
    piece.move(MARGIN, MARGIN)
    return Graph(piece.w + 2 * MARGIN, piece.h + 2 * MARGIN, piece.nodes, piece.edges, piece.frames)


class _Rows:
    """The task views by logical key, in seq order."""

    def __init__(self, tasks: Iterable[dict]) -> None:
        self.by_key: dict[str, list[dict]] = {}
        for task in tasks:
            self.by_key.setdefault(logical_key(task["path"]), []).append(task)

    def node(self, task: dict, scope: str) -> Node:
        key = scope + task["taskReferenceName"]
        node = Node(key=key, ref=task["taskReferenceName"], type=task["type"], name=task["name"])
        found = self.by_key.get(key, [])
        if not found:
            return node
        latest = {row["path"]: row for row in found}  # the last attempt of each iteration or item
        node.status = summary_status(row["status"] for row in latest.values())
        node.attempts, node.runs = len(found), len(latest)
        last = found[-1]
        node.child_id, node.path = last.get("subWorkflowId"), last["path"]
        node.blocked, node.reason = last.get("blockedBy"), last.get("reasonForIncompletion")
        return node


def summary_status(statuses: Iterable[str]) -> str:
    seen = set(statuses)
    return next((status for status in _PRECEDENCE if status in seen), NOT_STARTED)


def _sequence(tasks: list[dict], rows: _Rows, scope: str) -> Piece:
    pieces = [_task(task, rows, scope) for task in tasks]
    if not pieces:
        return _pass()
    width = max(piece.w for piece in pieces)
    out = Piece(width, 0.0, 0.0, [])
    y = 0.0
    for piece in pieces:
        piece.move((width - piece.w) / 2, y)
        if piece is pieces[0]:
            out.entry = piece.entry
        else:
            out.edges += [_edge(exit_, (piece.entry, y)) for exit_ in out.exits]
        out.absorb(piece)
        out.exits = piece.exits  # the last piece's, once the loop ends
        y += piece.h + GAP_Y
    out.h = y - GAP_Y
    return out


def _task(task: dict, rows: _Rows, scope: str) -> Piece:
    node = rows.node(task, scope)
    kind = task["type"]
    if kind == "FORK_JOIN":
        return _branches(node, [(_sequence(branch, rows, scope), "", False) for branch in task["forkTasks"]])
    if kind == "SWITCH":
        return _switch(node, task, rows, scope)
    if kind == "DO_WHILE":
        body = _sequence(task["loopOver"], rows, f"{node.key}.")
        iterations = _output(rows, node.key, "iteration")
        return _framed(node, body, f"iteration {iterations}" if iterations else "loop body", loop=True)
    if kind == "FORK_JOIN_DYNAMIC" and "forkTask" in task:  # Conductor's by tasks has no template: one node
        body = _task(task["forkTask"], rows, f"{node.key}.")
        items = _output(rows, node.key, "items")
        return _framed(node, body, f"for each of {items} items" if items is not None else "for each item", loop=False)
    return _single(node)


def _output(rows: _Rows, key: str, name: str):
    """A field of the latest row's output at ``key`` (an operator's progress)."""
    found = rows.by_key.get(key)
    output = found[-1]["outputData"] if found else None
    return output.get(name) if isinstance(output, dict) else None


def _single(node: Node) -> Piece:
    return Piece(node.w, node.h, node.w / 2, [(node.w / 2, node.h)], nodes=[node])


def _pass() -> Piece:
    """An empty SWITCH branch: the flow goes straight through."""
    width = NODE_W / 2
    return Piece(width, 0.0, width / 2, [(width / 2, 0.0)])


def _switch(node: Node, task: dict, rows: _Rows, scope: str) -> Piece:
    chosen = _output(rows, node.key, "branch")
    cases = [*task.get("decisionCases", {}).items(), ("default", task.get("defaultCase", []))]
    branches = []
    for case, branch in cases:
        piece = _sequence(branch, rows, scope)
        untaken = chosen is not None and case != chosen
        if untaken:
            for inner in piece.nodes:
                inner.untaken = True
            for edge in piece.edges:
                edge.untaken = True
        branches.append((piece, case, untaken))
    return _branches(node, branches)


def _branches(node: Node, branches: list[tuple[Piece, str, bool]]) -> Piece:
    """``node`` above its branches, side by side (each with its edge's label,
    and whether it was left untaken)."""
    total = sum(piece.w for piece, _, _ in branches) + GAP_X * (len(branches) - 1)
    width = max(total, node.w)
    node.x = (width - node.w) / 2
    out = Piece(width, 0.0, node.cx, [], nodes=[node])
    x, top = (width - total) / 2, node.h + GAP_Y
    for piece, label, untaken in branches:
        piece.move(x, top)
        edge = _edge((node.cx, node.h), (piece.entry, top), label=label)
        edge.untaken = untaken
        out.edges.append(edge)
        out.absorb(piece)
        out.exits += piece.exits
        x += piece.w + GAP_X
    out.h = top + max(piece.h for piece, _, _ in branches)
    return out


def _framed(node: Node, body: Piece, label: str, *, loop: bool) -> Piece:
    """``node`` above a frame holding ``body``; a loop's frame has a back edge."""
    frame_w = max(body.w + 2 * FRAME_PAD, len(label) * 6.5 + 2 * FRAME_PAD)
    frame_h = body.h + 2 * FRAME_PAD + FRAME_LABEL
    inner = max(node.w, frame_w)
    # A loop's lane for its back edge is mirrored on the left, so that the
    # piece stays centred on its node, in line with the tasks around it.
    lane_w = LOOP_LANE if loop else 0.0
    width = inner + 2 * lane_w
    centre = width / 2
    node.x = centre - node.w / 2
    frame = Frame(centre - frame_w / 2, node.h + GAP_Y, frame_w, frame_h, label)
    body.move(frame.x + (frame_w - body.w) / 2, frame.y + FRAME_LABEL + FRAME_PAD)
    out = Piece(width, frame.y + frame_h, centre, [(centre, frame.y + frame_h)], nodes=[node], frames=[frame])
    out.edges.append(_edge((centre, node.h), (body.entry, frame.y + FRAME_LABEL + FRAME_PAD)))
    out.absorb(body)
    if loop:
        lane = centre + inner / 2 + lane_w / 2
        bottom = frame.y + frame_h - FRAME_PAD
        out.edges.append(
            Edge(
                [(frame.x + frame_w, bottom), (lane, bottom), (lane, node.h / 2), (node.x + node.w, node.h / 2)],
                back=True,
            )
        )
    return out


def _edge(start: tuple[float, float], end: tuple[float, float], *, label: str = "") -> Edge:
    """Down, across in the gap above ``end``, down again."""
    (x1, _), (x2, y2) = start, end
    if abs(x1 - x2) < 0.5:
        return Edge([start, end], label=label)
    middle = y2 - GAP_Y / 2
    return Edge([start, (x1, middle), (x2, middle), end], label=label)


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
