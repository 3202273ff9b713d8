"""LocalHost and SshHost are both a Host: every call the protocol names binds on either."""

from __future__ import annotations

import inspect

import pytest

from hyperloom_assets.resources.hosts.host import Host
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.hosts.ssh import SshHost


def protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars(Host).items()
            if inspect.isfunction(member) and not name.startswith("_")}


def call_as_the_protocol_names_it(signature: inspect.Signature) -> tuple[list[object], dict[str, object]]:
    """Every parameter given: positional ones by position, keyword-only ones by name."""
    params = list(signature.parameters.values())[1:]  # self
    positional = [object() for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {p.name: object() for p in params if p.kind is p.KEYWORD_ONLY}
    return positional, keywords


def test_the_protocol_names_what_the_project_asks_of_a_host() -> None:
    assert {"serve", "measure", "post", "state_path", "python_executable", "served_path"} <= set(protocol_methods())


@pytest.mark.parametrize("host_class", [LocalHost, SshHost])
def test_each_host_takes_every_call_of_the_protocol(host_class) -> None:
    assert "name" in host_class.model_fields
    for name, signature in protocol_methods().items():
        implementation = getattr(host_class, name, None)
        assert implementation is not None, f"{host_class.__name__} lacks {name}"
        positional, keywords = call_as_the_protocol_names_it(signature)
        inspect.signature(implementation).bind(None, *positional, **keywords)  # TypeError where it cannot
        by_name = {p: object() for p in list(signature.parameters)[1:]}
        inspect.signature(implementation).bind(None, **by_name)


def test_a_host_missing_a_parameter_is_caught() -> None:
    class Short:
        def served_path(self) -> str:
            return ""

    positional, keywords = call_as_the_protocol_names_it(protocol_methods()["served_path"])
    with pytest.raises(TypeError):
        inspect.signature(Short.served_path).bind(None, *positional, **keywords)
