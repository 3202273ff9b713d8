"""Reading a target or hosts file within limits, and keeping what is said about it short. Pure code.

A file in the targets folder is whatever a teammate (or a bad merge) left there, and the
definitions load every one of them, so no file may stop the others: each limit here is
a ConfigFileError that its caller turns into a problem naming the file. The limits bound
the work a file can cause, and the text an error about it can grow to, by its own size:
a YAML alias bomb (each level nine aliases of the one below) or an alias inside its own
anchor composes cheaply but expands without end once validated or printed.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a target or hosts file is a few hundred bytes
# Nodes all aliases of a file together may expand to: shared host fields (`<<: *ssh`) take tens.
MAX_ALIAS_NODES = 10_000
MAX_DEPTH = 64  # nesting, aliases expanded: a target nests four deep
MAX_PROBLEM_CHARS = 2_000  # one problem's text
MAX_PROBLEMS_PER_ENTRY = 20  # problems said about one target file, or one host of the hosts file


class ConfigFileError(ValueError):
    """A file that cannot be read as a config file; the text says what was expected of it."""


def capped(text: str, limit: int = MAX_PROBLEM_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how much was cut."""
    if len(text) <= limit:
        return text
    note = f"... ({len(text) - limit} more characters)"
    return text[:max(0, limit - len(note))] + note


def read_config_text(path: Path, text: str | None = None) -> str:
    """The file's text (or `text`, a snapshot of it), at most MAX_CONFIG_BYTES of UTF-8."""
    if text is not None:
        if len(text.encode("utf-8", "replace")) > MAX_CONFIG_BYTES:
            raise ConfigFileError(f"a file of at most {MAX_CONFIG_BYTES} bytes (1 MiB); this one is larger")
        return text
    if not path.is_file():
        raise ConfigFileError(f"a regular file, {path} is not one")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)  # never more than the cap, whatever the file holds
    except OSError as error:
        raise ConfigFileError(f"a readable file ({error.strerror or error})") from error
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"a file of at most {MAX_CONFIG_BYTES} bytes (1 MiB); this one is larger")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigFileError(f"UTF-8 text, but byte 0x{data[error.start]:02x} at offset {error.start} "
                              f"is not UTF-8") from error


def _expanded(node: Node, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(nodes, depth) of `node` with every alias in it expanded; without recursion, each node once."""
    stack = [(node, False)]
    while stack:
        current, children_done = stack.pop()
        if id(current) in memo:
            continue
        children = _children(current)
        if children_done:
            sizes = [memo[id(child)] for child in children]
            memo[id(current)] = (1 + sum(n for n, _ in sizes), 1 + max((d for _, d in sizes), default=0))
        else:
            stack.append((current, True))
            stack.extend((child, False) for child in children if id(child) not in memo)
    return memo[id(node)]


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class _BoundedLoader(yaml.SafeLoader):
    """safe_load's loader, refusing aliases beyond MAX_ALIAS_NODES, nesting beyond MAX_DEPTH and
    an alias inside its own anchor: each is refused while composing, before anything is built."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._alias_nodes, self._depth = 0, 0
        self._open_anchors: list[str] = []
        self._sizes: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            self._count_alias(event)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise ConfigFileError(f"YAML nested at most {MAX_DEPTH} deep (line {event.start_mark.line + 1} is deeper)")
        anchor = event.anchor if isinstance(event, CollectionStartEvent) else None
        if anchor is not None:
            self._open_anchors.append(anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.pop()

    def _count_alias(self, event: NodeEvent) -> None:
        where = f"line {event.start_mark.line + 1}: *{event.anchor}"
        if event.anchor in self._open_anchors:
            raise ConfigFileError(f"YAML without recursion ({where} is inside its own anchor)")
        node = self.anchors.get(event.anchor)
        if node is None:
            return  # the composer's own error names the undefined alias
        nodes, depth = _expanded(node, self._sizes)
        self._alias_nodes += nodes
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise ConfigFileError(f"YAML whose aliases expand to at most {MAX_ALIAS_NODES} nodes in all ({where} "
                                  f"takes them to {self._alias_nodes}: an alias bomb?)")
        if self._depth + depth > MAX_DEPTH:
            raise ConfigFileError(f"YAML nested at most {MAX_DEPTH} deep, aliases expanded ({where} is deeper)")


def load_config_yaml(path: Path, text: str | None = None) -> object:
    """The YAML document of a target or hosts file (or of `text`, its snapshot), as yaml.safe_load
    reads it, within this module's limits; ConfigFileError saying what was expected."""
    loader = _BoundedLoader(read_config_text(path, text))
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else ""
        raise ConfigFileError(capped(f"a readable YAML mapping ({type(error).__name__}: {first})")) from error
    finally:
        loader.dispose()
